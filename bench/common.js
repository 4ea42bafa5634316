// Shared by the benchmarks: a throwaway DATA_DIR, the result file, the server's modules, smoke mode.
import { execSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs'
import { tmpdir, cpus, totalmem } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

/** `--smoke`: tiny sizes, the TypeScript sources, no timing claims (npm test runs every bench so). */
export const smoke = process.argv.includes('--smoke')

const ROOT = fileURLToPath(new URL('..', import.meta.url))

/**
 * Import one of the server's modules (`'app'`, `'storage/database'`, ...) from `build` (a checkout,
 * default this one): its `dist/` (run `npm run build` first), or under `--smoke` its `src/`
 * through the TypeScript loader the test runner started us with.
 */
export async function load (path, build = ROOT) {
  return await import(pathToFileURL(resolve(build, smoke ? `src/${path}.ts` : `dist/src/${path}.js`)).href)
}

/** Node flags a child process needs to run the same way (the TypeScript loader under --smoke). */
export const childExecArgv = smoke ? process.execArgv : []

export function tempDir () {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-bench-'))
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) }
}

export function mean (values) {
  return values.reduce((a, b) => a + b, 0) / values.length
}

/** The commit this checkout is at (and whether it has uncommitted changes), for result files. */
function commit () {
  try {
    const head = execSync('git rev-parse --short HEAD', { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim()
    const dirty = execSync('git status --porcelain -- src', { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim() !== ''
    return dirty ? `${head}+changes` : head
  } catch {
    return 'unknown'
  }
}

/**
 * Write `result` with the machine it ran on to `<dir>/<name>-<time>.json` and `<name>-latest.json`,
 * and say where. `<dir>` is bench/results/, or BENCH_RESULTS_DIR (the smoke test's temporary one).
 */
export function saveResult (name, result) {
  const dir = process.env.BENCH_RESULTS_DIR ?? fileURLToPath(new URL('./results/', import.meta.url))
  mkdirSync(dir, { recursive: true })
  const stamp = new Date().toISOString().replace(/[:.]/g, '-')
  const machine = { node: process.version, cpus: cpus().length, cpu_model: cpus()[0]?.model, memory_gib: Math.round(totalmem() / 2 ** 30), platform: process.platform }
  const body = JSON.stringify({ ...machine, commit: commit(), at: new Date().toISOString(), smoke, ...result }, null, 2) + '\n'
  writeFileSync(join(dir, `${name}-${stamp}.json`), body)
  writeFileSync(join(dir, `${name}-latest.json`), body)
  console.log(`\nwritten to ${join(dir, `${name}-${stamp}.json`)} (and ${name}-latest.json)`)
  if (smoke) console.log(`smoke: ${name} ran end to end and wrote its result`)
}

/** A numeric option: `--name=<n>`, else BENCH_<NAME>, else `fallback` (`smokeValue` under --smoke). */
export function arg (name, fallback, smokeValue = fallback) {
  const flag = process.argv.find((a) => a.startsWith(`--${name}=`))
  const value = flag?.slice(name.length + 3) ?? process.env[`BENCH_${name.toUpperCase()}`]
  return value === undefined ? (smoke ? smokeValue : fallback) : Number(value)
}

/**
 * Start a server script of the benchmarks (`./assist-server.js`, `./raw-server.js`, ...) in its own
 * process; resolves once it printed its `{"url": ...}` line, with the url, its pid and a stop().
 */
export async function startServer (script, args = [], env = process.env) {
  const child = spawn(process.execPath, [...childExecArgv, fileURLToPath(new URL(script, import.meta.url)), ...args], { stdio: ['ignore', 'pipe', 'inherit'], env })
  let out = ''
  child.stdout.on('data', (c) => { out += c })
  while (!out.includes('\n')) {
    if (child.exitCode !== null) throw new Error(`${script} ${args.join(' ')} exited`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return { url: JSON.parse(out).url, pid: child.pid, stop: async () => { child.kill('SIGTERM'); await once(child, 'exit') } }
}
