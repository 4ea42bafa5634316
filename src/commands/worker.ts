import { randomUUID } from 'node:crypto'
import { loadConfig } from '../config.js'
import { USAGE } from './usage.js'
import { openCommandStores, type CommandIo } from './shared.js'
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
  // the stores the server uses, and the task graph where TASK_STORE keeps it
  const data = await openCommandStores(config, 'worker', io)
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
  await data.close()
  io.out('worker stopped')
  return 0
}
