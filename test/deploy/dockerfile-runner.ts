import { execFileSync, spawn } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, readFileSync, statSync } from 'node:fs'
import { basename, dirname, join, relative } from 'node:path'
import picomatch from 'picomatch'

// Runs a Dockerfile's steps without Docker (there is no Docker engine on the CI machines), so that a
// broken step fails CI: each stage gets a folder that stands for its root filesystem, and absolute
// paths outside the system's own folders (/app, /node_modules, ...) are rewritten into it. The same
// commands run with the same environment; what only Docker can do is checked instead of done:
// `apt-get install` packages must be installed on this machine, `chown` to a user this machine lacks
// and `USER` are skipped (ownership is tested by test/storage/data-dir.test.ts), `--chown` is ignored.

/** One instruction: its keyword and its arguments, continuation lines joined. */
export interface Instruction { op: string, args: string, line: number }

/** What the final stage leaves: its root folder, and how the container would start. */
export interface Image {
  root: string
  workdir: string
  env: Record<string, string>
  entrypoint: string[]
  cmd: string[]
  healthcheck: string[] | undefined
  /** Steps checked rather than run, with why. */
  skipped: string[]
}

interface Stage { name: string | undefined, root: string, workdir: string, env: Record<string, string> }

const SYSTEM = new Set(['bin', 'boot', 'dev', 'etc', 'home', 'lib', 'lib64', 'media', 'mnt', 'opt', 'proc', 'root', 'run', 'sbin', 'srv', 'sys', 'tmp', 'usr', 'var'])

/** The instructions of a Dockerfile (comments, blank lines and parser directives dropped). */
export function parseDockerfile (text: string): Instruction[] {
  const out: Instruction[] = []
  let pending: { text: string, line: number } | undefined
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trimEnd()
    if (pending === undefined && (line.trim() === '' || line.trimStart().startsWith('#'))) continue
    if (pending !== undefined && line.trimStart().startsWith('#')) continue
    const joined = pending === undefined ? { text: line.trim(), line: i + 1 } : { text: `${pending.text} ${line.trim()}`, line: pending.line }
    if (joined.text.endsWith('\\')) { pending = { text: joined.text.slice(0, -1).trimEnd(), line: joined.line }; continue }
    pending = undefined
    const [op, ...rest] = joined.text.split(/\s+/)
    out.push({ op: (op as string).toUpperCase(), args: rest.join(' '), line: joined.line })
  }
  return out
}

/** Absolute paths outside the system's folders, moved under `root`. */
export function rewritePaths (text: string, root: string): string {
  return text.replace(/(^|[\s=:'"(])(\/([A-Za-z0-9_.-]+)[^\s'"(),]*)/g, (whole, before: string, path: string, first: string) =>
    SYSTEM.has(first) ? whole : `${before}${root}${path}`)
}

function jsonOrShell (args: string): string[] {
  return args.startsWith('[') ? JSON.parse(args) as string[] : ['/bin/sh', '-c', args]
}

function envOf (args: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const match of args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)/g)) out[match[1] as string] = (match[2] as string).replace(/^"|"$/g, '')
  return out
}

function installed (pkg: string): boolean {
  try {
    return execFileSync('dpkg', ['-s', pkg], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).includes('Status: install ok installed')
  } catch {
    return false
  }
}

function userExists (user: string): boolean {
  try {
    execFileSync('getent', ['passwd', user])
    return true
  } catch {
    return false
  }
}

/**
 * Build the Dockerfile's stages under `work` from the build context `context`, running each RUN with
 * `env` (this process's environment, for npm's cache and PATH) plus the stage's ENV.
 */
export async function buildImage (dockerfile: string, context: string, work: string, env: Record<string, string>, log: (line: string) => void = () => {}): Promise<Image> {
  const ignore = existsSync(join(context, '.dockerignore'))
    ? readFileSync(join(context, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'))
    : []
  const ignored = picomatch(ignore, { dot: true })
  const keep = (source: string): boolean => {
    const rel = relative(context, source).split('/')
    return !rel.some((_, i) => ignored(rel.slice(0, i + 1).join('/')))
  }
  const stages: Stage[] = []
  const skipped: string[] = []
  let stage: Stage | undefined
  let entrypoint: string[] = []
  let cmd: string[] = []
  let healthcheck: string[] | undefined
  const inStage = (path: string, s: Stage): string => join(s.root, path.startsWith('/') ? path : join(s.workdir, path))

  for (const { op, args, line } of parseDockerfile(readFileSync(dockerfile, 'utf8'))) {
    if (op === 'FROM') {
      const name = /\sAS\s+(\S+)/i.exec(args)?.[1]
      stage = { name, root: join(work, `stage-${stages.length}`), workdir: '/', env: {} }
      mkdirSync(stage.root, { recursive: true })
      stages.push(stage)
      entrypoint = []
      cmd = []
      healthcheck = undefined
      continue
    }
    if (stage === undefined) throw new Error(`Dockerfile:${line}: ${op} before FROM`)
    const s = stage
    switch (op) {
      case 'WORKDIR':
        s.workdir = args.startsWith('/') ? args : join(s.workdir, args)
        mkdirSync(join(s.root, s.workdir), { recursive: true })
        break
      case 'ENV':
        Object.assign(s.env, envOf(args))
        break
      case 'COPY': {
        const words = args.split(/\s+/)
        const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length)
        const paths = words.filter((w) => !w.startsWith('--'))
        const dest = paths.pop() as string
        const source = from === undefined ? undefined : stages.find((st) => st.name === from)
        if (from !== undefined && source === undefined) throw new Error(`Dockerfile:${line}: no stage named ${from}`)
        const target = inStage(dest, s)
        for (const path of paths) {
          const src = source === undefined ? join(context, path) : inStage(path, source)
          if (!existsSync(src)) throw new Error(`Dockerfile:${line}: COPY ${path}: not found${source === undefined ? ' in the build context' : ` in stage ${from as string}`}`)
          const into = statSync(src).isDirectory() ? target : (dest.endsWith('/') || paths.length > 1 ? join(target, basename(path)) : target)
          mkdirSync(dirname(into), { recursive: true })
          cpSync(src, into, { recursive: true, verbatimSymlinks: true, ...(source === undefined ? { filter: keep } : {}) })
        }
        break
      }
      case 'RUN':
        for (const step of args.split(/\s+&&\s+/)) {
          const words = step.trim().split(/\s+/)
          if (words[0] === 'apt-get' && words[1] === 'install') {
            const missing = words.slice(2).filter((w) => !w.startsWith('-')).filter((pkg) => !installed(pkg))
            if (missing.length > 0) throw new Error(`Dockerfile:${line}: the image installs ${missing.join(', ')} (apt-get): install them on this machine to run its steps`)
            skipped.push(`${step.trim()} (checked: installed here)`)
            continue
          }
          if (words[0] === 'apt-get' || (words[0] === 'rm' && step.includes('/var/lib/apt/lists'))) { skipped.push(step.trim()); continue }
          if (words[0] === 'chown' && !userExists((words[1] ?? '').split(':')[0] as string)) { skipped.push(`${step.trim()} (no such user here)`); continue }
          const command = rewritePaths(step.trim(), s.root)
          log(`Dockerfile:${line}: ${command}`)
          await new Promise<void>((resolve, reject) => {
            const child = spawn('/bin/sh', ['-c', command], { cwd: join(s.root, s.workdir), env: { ...env, ...s.env }, stdio: ['ignore', 'pipe', 'pipe'] })
            let output = ''
            child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
            child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
            child.once('exit', (code) => { code === 0 ? resolve() : reject(new Error(`Dockerfile:${line}: \`${step.trim()}\` exited ${String(code)}:\n${output.slice(-4000)}`)) })
          })
        }
        break
      case 'ENTRYPOINT':
        entrypoint = jsonOrShell(args)
        break
      case 'CMD':
        cmd = jsonOrShell(args)
        break
      case 'HEALTHCHECK': {
        const at = args.indexOf('CMD ')
        healthcheck = at < 0 ? undefined : jsonOrShell(args.slice(at + 4).trim())
        break
      }
      case 'USER': case 'VOLUME': case 'EXPOSE': case 'LABEL': case 'ARG':
        if (op === 'USER') skipped.push(`USER ${args} (runs as this process's user)`)
        break
      default:
        throw new Error(`Dockerfile:${line}: ${op} is not handled by this runner`)
    }
  }
  if (stage === undefined) throw new Error('no FROM in the Dockerfile')
  return { root: stage.root, workdir: join(stage.root, stage.workdir), env: Object.fromEntries(Object.entries(stage.env).map(([k, v]) => [k, rewritePaths(v, stage.root)])), entrypoint, cmd, healthcheck, skipped }
}
