import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { AH_ERR_AGENT_DUPLICATE, AH_ERR_AGENT_INVALID } from '../errors.js'
import { hostAgent } from './hosted-agent.js'
import { AgentRegistry } from './registry.js'
import { asBaseAgent, isTaskAgent, type BaseAgent } from '../runtime/base-agent.js'
import type { ContractSubscription } from './define-contract-agent.js'

/** Entry files looked for in each agent folder, in this order. */
export const AGENT_ENTRY_FILES = ['index.js', 'index.mjs', 'index.ts'] as const

async function exists (path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile()
  } catch {
    return false
  }
}

function importFailure (file: string, err: unknown): string {
  const e = err as NodeJS.ErrnoException
  if (e.code === 'ERR_UNKNOWN_FILE_EXTENSION' && file.endsWith('.ts')) {
    return 'TypeScript agents must be compiled first (npm run build) or shipped as index.js'
  }
  return `import failed: ${e.message}`
}

/** A CommonJS module compiled from `export default x` arrives as `{ __esModule: true, default: x }`. */
function unwrapDefault (value: unknown): unknown {
  if (typeof value === 'object' && value !== null && (value as { __esModule?: unknown }).__esModule === true && 'default' in value) {
    return (value as { default: unknown }).default
  }
  return value
}

/** The bus subscriptions a task agent declares (a contract agent's `subscriptions`), checked. */
function subscriptionsOf (value: object): Array<ContractSubscription & { id: string }> {
  const list = (value as { subscriptions?: unknown }).subscriptions
  if (list === undefined) return []
  if (!Array.isArray(list)) throw new Error('subscriptions must be an array')
  for (const s of list as Array<Partial<ContractSubscription & { id: string }>>) {
    if (typeof s?.id !== 'string' || !Array.isArray(s.patterns) || s.patterns.length === 0 || !s.patterns.every((p) => typeof p === 'string' && p !== '')) {
      throw new Error('each subscription needs an id and a non-empty list of patterns (use defineContractAgent)')
    }
    if (s.startTask === undefined && s.handle === undefined) throw new Error(`subscription ${s.id} neither starts a task nor handles the event`)
  }
  return list as Array<ContractSubscription & { id: string }>
}

/** A task agent found in a folder. */
export interface LoadedTaskAgent {
  agent: BaseAgent
  source: string
  /** Its manifest id when it is a CAP agent too (an agent list may name it by that id). */
  id?: string
  /** Its subscriptions to the event bus (contract agents'), each with its id. */
  subscriptions: Array<ContractSubscription & { id: string }>
}

/** What a folder scan found. */
export interface LoadResult {
  registry: AgentRegistry
  /** Agents that work the task graph (`agentType` + `handleTask`). */
  taskAgents: LoadedTaskAgent[]
  /** Sub-folders without an entry file (not agents; listed so the boot log can say so). */
  skipped: string[]
}

/**
 * Register every agent in `dir`: each sub-folder with an `index.js`, `index.mjs` or `index.ts` whose
 * default export is an agent: a CAP agent (`manifest` + `assist`), a task agent (`agentType` +
 * `handleTask`, such as a BaseAgent), or both. Folders whose names start with `.` or `_` are not agents.
 * A broken agent (bad export, invalid manifest, duplicate id or name) throws with its file path.
 */
export async function loadAgents (dir: string): Promise<LoadResult> {
  const registry = new AgentRegistry()
  const taskAgents: LoadedTaskAgent[] = []
  const skipped: string[] = []
  let entries
  try {
    entries = await readdir(dir, { withFileTypes: true })
  } catch (err) {
    throw new AH_ERR_AGENT_INVALID(dir, `cannot read the agents folder (${(err as Error).message})`, { cause: err })
  }
  const folders = entries.filter((e) => e.isDirectory() && !/^[._]/.test(e.name)).map((e) => e.name).sort()
  for (const folder of folders) {
    let file: string | undefined
    for (const name of AGENT_ENTRY_FILES) {
      const candidate = join(dir, folder, name)
      if (await exists(candidate)) { file = candidate; break }
    }
    if (file === undefined) { skipped.push(join(dir, folder)); continue }
    let mod: { default?: unknown }
    try {
      mod = await import(pathToFileURL(file).href) as { default?: unknown }
    } catch (err) {
      throw new AH_ERR_AGENT_INVALID(file, importFailure(file, err), { cause: err })
    }
    const value = unwrapDefault(mod.default)
    const task = isTaskAgent(value)
    const cap = typeof value === 'object' && value !== null && ('manifest' in value || 'assist' in value)
    let loaded: LoadedTaskAgent | undefined
    if (task) {
      try {
        loaded = { agent: asBaseAgent(value), source: file, subscriptions: subscriptionsOf(value) }
      } catch (err) {
        throw new AH_ERR_AGENT_INVALID(file, (err as Error).message, { cause: err })
      }
      taskAgents.push(loaded)
    }
    if (task && !cap) continue
    let hosted
    try {
      hosted = hostAgent(value, file)
    } catch (err) {
      throw new AH_ERR_AGENT_INVALID(file, (err as Error).message, { cause: err })
    }
    if (loaded !== undefined) loaded.id = hosted.manifest.metadata.id
    try {
      registry.add(hosted)
    } catch (err) {
      throw new AH_ERR_AGENT_DUPLICATE(file, (err as Error).message, { cause: err })
    }
  }
  return { registry, taskAgents, skipped }
}
