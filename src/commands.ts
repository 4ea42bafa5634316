import { parseArgs } from 'node:util'
import { loadConfig } from './config.js'
import { openDatabase } from './storage/database.js'
import { AuditLog } from './storage/audit.js'
import { EventStore } from './storage/events.js'
import { loadAgents } from './agents/loader.js'
import { FileTaskStore } from './runtime/file-task-store.js'
import { SqliteTaskStore } from './runtime/sqlite-task-store.js'
import { WorkerPool } from './runtime/worker-pool.js'

const USAGE = `usage: agent-host <command>

commands:
  audit verify [--data-dir DIR]                 check the audit log's hash chain (exit 0 when intact, 1 when not)
  worker --type T [--concurrency N] [--data-dir DIR]
                                                work the task graph as task agent T until SIGTERM/SIGINT

Settings come from the environment as for the server (DATA_DIR, AGENTS_DIR, TASK_STORE, TASK_*).`

/** Where a command writes, and what stops a long-running one. */
export interface CommandIo {
  out: (line: string) => void
  err: (line: string) => void
  /** Stops `worker` (the CLI wires SIGTERM and SIGINT to it). */
  signal?: AbortSignal
}

async function worker (type: string | undefined, concurrency: number, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  if (type === undefined || type === '') { io.err(`worker needs --type\n\n${USAGE}`); return 2 }
  const config = loadConfig(env)
  const { taskAgents } = await loadAgents(config.AGENTS_DIR)
  const agent = taskAgents.find((a) => a.agent.agentType === type)
  if (agent === undefined) {
    io.err(`no task agent of type "${type}" in ${config.AGENTS_DIR} (found: ${taskAgents.map((a) => a.agent.agentType).join(', ') || 'none'})`)
    return 2
  }
  const db = openDatabase(config.DATA_DIR)
  const store = config.TASK_STORE === 'sqlite' ? new SqliteTaskStore(db) : new FileTaskStore(config.DATA_DIR)
  const log = {
    info: (obj: object, msg?: string) => { io.out(JSON.stringify({ level: 'info', msg, ...obj })) },
    error: (obj: object, msg?: string) => { io.err(JSON.stringify({ level: 'error', msg, ...obj, err: String((obj as { err?: unknown }).err) })) }
  }
  const pool = new WorkerPool({
    store,
    events: new EventStore(db),
    audit: new AuditLog(db),
    workersPerType: concurrency,
    heartbeatMs: config.TASK_HEARTBEAT_MS,
    leaseMs: config.TASK_LEASE_MS,
    pollMs: config.TASK_POLL_MS,
    log
  })
  pool.start([agent.agent])
  io.out(`worker ready: type ${type}, ${concurrency} loop(s), pid ${process.pid}, store ${config.TASK_STORE}`)
  if (io.signal !== undefined && !io.signal.aborted) await new Promise((resolve) => io.signal?.addEventListener('abort', resolve, { once: true }))
  await pool.stop()
  db.close()
  io.out('worker stopped')
  return 0
}

/**
 * The `agent-host` command line (src/cli.ts is its process entry point).
 * @returns the exit code
 */
export async function main (argv: string[], env: Record<string, string | undefined>, io: CommandIo = { out: console.log, err: console.error }): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        'data-dir': { type: 'string' },
        type: { type: 'string' },
        concurrency: { type: 'string', default: '1' },
        help: { type: 'boolean', short: 'h' }
      }
    })
  } catch (e) {
    io.err(`${(e as Error).message}\n\n${USAGE}`)
    return 2
  }
  const [command, sub] = parsed.positionals
  if (parsed.values.help === true || command === undefined) {
    io.out(USAGE)
    return command === undefined && parsed.values.help !== true ? 2 : 0
  }
  const scoped = { ...env, ...(parsed.values['data-dir'] !== undefined ? { DATA_DIR: parsed.values['data-dir'] } : {}) }
  if (command === 'audit' && sub === 'verify') {
    const config = loadConfig(scoped)
    const db = openDatabase(config.DATA_DIR)
    try {
      const result = new AuditLog(db).verify()
      io.out(JSON.stringify(result))
      return result.ok ? 0 : 1
    } finally {
      db.close()
    }
  }
  if (command === 'worker') {
    const concurrency = Number(parsed.values.concurrency)
    if (!Number.isInteger(concurrency) || concurrency < 1) { io.err('--concurrency must be a positive integer'); return 2 }
    return await worker(parsed.values.type, concurrency, scoped, io)
  }
  io.err(`unknown command: ${parsed.positionals.join(' ')}\n\n${USAGE}`)
  return 2
}
