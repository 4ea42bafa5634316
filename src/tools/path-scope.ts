import { lstat, realpath } from 'node:fs/promises'
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path'
import picomatch from 'picomatch'
import type { JsonObject } from '../backends/protocol.js'
import type { PathScopeSpec } from './servers-file.js'

/** What a scope check decides: the arguments to send (each checked path made the absolute real path that was checked), or why not. */
export type ScopeDecision = { ok: true, args: JsonObject } | { ok: false, reason: string }

/**
 * A filesystem tool's path scope. Every path-valued argument is resolved against the scope's root,
 * then by real path (`realpath` of the path, or of its nearest existing parent for a file still to
 * be made), so `..`, an absolute path or a symbolic link cannot lead out of it; the result must lie
 * under the root and match one of the globs (picomatch, relative to the root; a dotfile matches
 * only a glob that names dotfiles).
 *
 * The server is sent the absolute real path that was checked, not what the agent wrote: a server
 * resolving a relative path from a folder of its own cannot then reach something else.
 */
export class PathScope {
  readonly spec: PathScopeSpec
  readonly #matches: (path: string) => boolean

  constructor (spec: PathScopeSpec) {
    this.spec = spec
    this.#matches = picomatch([...spec.patterns])
  }

  /** Check the path-valued arguments of `args`; the others pass as they are. */
  async check (args: JsonObject): Promise<ScopeDecision> {
    const out: JsonObject = { ...args }
    for (const name of this.spec.arguments) {
      if (!Object.hasOwn(args, name)) continue
      const value = args[name]
      const values = Array.isArray(value) ? value : [value]
      if (!values.every((v): v is string => typeof v === 'string')) return { ok: false, reason: `argument "${name}" must be a path or a list of paths, for the scope check` }
      const checked: string[] = []
      for (const path of values) {
        const decision = await this.#checkOne(name, path)
        if (typeof decision !== 'string') return decision
        checked.push(decision)
      }
      out[name] = Array.isArray(value) ? checked : checked[0]
    }
    return { ok: true, args: out }
  }

  /** The absolute real path of one argument, or the refusal. */
  async #checkOne (name: string, path: string): Promise<string | { ok: false, reason: string }> {
    const root = this.spec.root
    const shown = JSON.stringify(path)
    let real: string | undefined
    try {
      real = await realPathOf(resolve(root, path))
    } catch (err) {
      return { ok: false, reason: `argument "${name}" ${shown} cannot be resolved (${(err as { code?: string }).code ?? (err as Error).message})` }
    }
    if (real === undefined) return { ok: false, reason: `argument "${name}" ${shown} goes through a symbolic link to nothing` }
    const rel = relative(root, real)
    if (rel === '..' || rel.startsWith(`..${sep}`) || isAbsolute(rel)) return { ok: false, reason: `argument "${name}" ${shown} resolves outside the tool's root` }
    const posix = rel.split(sep).join('/')
    if (!this.#matches(posix)) {
      return { ok: false, reason: `argument "${name}" ${shown} (${posix === '' ? 'the root itself' : posix}) is not in the tool's scope (${this.spec.patterns.join(', ')})` }
    }
    return real
  }
}

/**
 * `path` by real path: `realpath` of it, or of its nearest existing parent with the missing part
 * added back. Undefined for a path through a symbolic link whose target does not exist: a server
 * writing through it would create a file wherever it points.
 */
async function realPathOf (path: string): Promise<string | undefined> {
  const missing: string[] = []
  let at = path
  for (;;) {
    try {
      const real = await realpath(at)
      return missing.length === 0 ? real : join(real, ...missing.reverse())
    } catch (err) {
      const code = (err as { code?: string }).code
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err
      // realpath found nothing there: a dangling link is something, and it points elsewhere
      if (await lstat(at).then(() => true, () => false)) return undefined
      missing.push(basename(at))
      // the filesystem's root always exists, so this climb ends
      at = dirname(at)
    }
  }
}
