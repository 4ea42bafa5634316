import { randomUUID } from 'node:crypto'
import { auditKeysRetired, loadConfig, type Config } from '../config.js'
import { USAGE } from './usage.js'
import { openData, type CommandIo } from './shared.js'
import { AuditKeyring } from '../storage/audit-key.js'
import { SqliteAuditLog } from '../storage/sqlite/audit.js'
import { type AuditStore } from '../storage/audit.js'
import { SqliteEventStore } from '../storage/sqlite/events.js'
import { type EventLog } from '../storage/events.js'
import type { Awaitable } from '../storage/awaitable.js'
import { PgEventStore } from '../storage/postgres/events.js'
import { PgBusStore } from '../storage/postgres/bus.js'
import { PgAuditLog } from '../storage/postgres/audit.js'
import { PgTaskStore } from '../storage/postgres/tasks.js'
import { openPostgres } from '../storage/postgres/database.js'
import type { TaskStore } from '../storage/tasks/task-store.js'
import { FileTaskStore } from '../storage/file/tasks.js'
import { SqliteTaskStore } from '../storage/sqlite/tasks.js'
import { SqliteBusStore } from '../storage/sqlite/bus.js'
import { type BusStore } from '../storage/bus.js'
import { retryBusy } from '../storage/busy.js'
import { loadAgents } from '../agents/loader.js'
import { WorkerPool } from '../runtime/worker-pool.js'
import { createBackends } from '../backends/registry.js'
import { EventBus } from '../bus/event-bus.js'
import { subscribeAgents } from '../bus/agent-subscriptions.js'
import { TaskAccess } from '../auth/task-access.js'

/** `agent-host worker`: the task graph worked as task agent `type`, `concurrency` loops, until `io.signal` aborts. */
export async function worker (type: string | undefined, concurrency: number, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  if (type === undefined || type === '') { io.err(`worker needs --type\n\n${USAGE}`); return 2 }
  const config = loadConfig(env)
  const { taskAgents } = await loadAgents(config.AGENTS_DIR)
  const agent = taskAgents.find((a) => a.agent.agentType === type)
  if (agent === undefined) {
    io.err(`no task agent of type "${type}" in ${config.AGENTS_DIR} (found: ${taskAgents.map((a) => a.agent.agentType).join(', ') || 'none'})`)
    return 2
  }
  const data = await workerStores(config, io)
  const access = new TaskAccess(taskAgents.map((loaded) => ({ type: loaded.agent.agentType, id: loaded.id })), data.audit)
  const store = access.guard(data.tasks)
  const log = {
    info: (obj: object, msg?: string) => { io.out(JSON.stringify({ level: 'info', msg, ...obj })) },
    error: (obj: object, msg?: string) => { io.err(JSON.stringify({ level: 'error', msg, ...obj, err: String((obj as { err?: unknown }).err) })) }
  }
  const backends = createBackends(config, { ...log, warn: log.info })
  const bus = new EventBus({
    store: data.bus,
    write: data.write,
    instanceId: randomUUID(),
    pollMs: config.BUS_POLL_MS,
    leaseMs: config.BUS_LEASE_MS,
    maxAttempts: config.BUS_MAX_ATTEMPTS,
    backoffMs: config.BUS_RETRY_BACKOFF_MS,
    log: { warn: log.info, error: log.error }
  })
  const pool = new WorkerPool({
    store,
    events: data.events,
    audit: data.audit,
    workersPerType: concurrency,
    heartbeatMs: config.TASK_HEARTBEAT_MS,
    leaseMs: config.TASK_LEASE_MS,
    pollMs: config.TASK_POLL_MS,
    log,
    host: backends,
    bus
  })
  pool.start([agent.agent])
  await subscribeAgents(bus, store, [agent], access)
  io.out(`worker ready: type ${type}, ${concurrency} loop(s), pid ${process.pid}, store ${config.TASK_STORE}`)
  if (io.signal !== undefined && !io.signal.aborted) await new Promise((resolve) => io.signal?.addEventListener('abort', resolve, { once: true }))
  await bus.close()
  await pool.stop()
  await backends.close()
  await store.close()
  await data.close()
  io.out('worker stopped')
  return 0
}

/** What a worker process writes to: the database the server uses (DATABASE_URL, else DATA_DIR's SQLite file) and the task store TASK_STORE names. */
async function workerStores (config: Config, io: CommandIo): Promise<{ tasks: TaskStore, bus: BusStore, events: EventLog, audit: AuditStore, write: <T>(op: () => Awaitable<T>) => Promise<T>, close: () => Promise<void> }> {
  const keyring = new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config))
  if (config.DATABASE_URL !== '') {
    const pool = await openPostgres(config.DATABASE_URL, { max: config.DB_POOL_MAX, applicationName: 'agent-host worker' })
    try {
      return {
        tasks: config.TASK_STORE === 'postgres' ? new PgTaskStore(pool) : new FileTaskStore(config.DATA_DIR, { staleMs: config.TASK_LOCK_STALE_MS }),
        bus: new PgBusStore(pool),
        events: new PgEventStore(pool),
        audit: await PgAuditLog.open(pool, keyring),
        write: async (op) => await op(),
        close: async () => { await pool.end() }
      }
    } catch (err) {
      await pool.end()
      throw err
    }
  }
  const db = openData(config.DATA_DIR, io)
  return {
    tasks: config.TASK_STORE === 'sqlite' ? new SqliteTaskStore(db) : new FileTaskStore(config.DATA_DIR, { staleMs: config.TASK_LOCK_STALE_MS }),
    bus: new SqliteBusStore(db),
    events: new SqliteEventStore(db),
    audit: new SqliteAuditLog(db, keyring),
    write: async (op) => await retryBusy(op, config.DB_WRITE_BUDGET_MS),
    close: async () => { db.close() }
  }
}
