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
import { parsePrices, SUBPROCESS_ENV_ALWAYS, type Config } from '../config.js'
import { Budgets } from '../assist/budgets.js'
import { loadBudgets } from '../assist/budgets-file.js'
import { loadToolServers } from '../tools/servers-file.js'
import { McpToolRegistry } from '../tools/tool-registry.js'
import { loadA2AAgents } from '../a2a-client/agents-file.js'
import { RemoteAgents } from '../a2a-client/remote-agents.js'
import { taskHosts } from '../assist/task-host.js'
import type { Stores } from '../storage/stores.js'
import type { EventInput } from '../storage/events.js'
import type { AuditInput } from '../storage/audit.js'
import pkg from '../../package.json' with { type: 'json' }

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
  const names = taskAgents.map((loaded) => ({ type: loaded.agent.agentType, id: loaded.id }))
  const access = new TaskAccess(names, data.audit)
  const store = access.guard(data.tasks)
  const log = {
    info: (obj: object, msg?: string) => { io.out(JSON.stringify({ level: 'info', msg, ...obj })) },
    error: (obj: object, msg?: string) => { io.err(JSON.stringify({ level: 'error', msg, ...obj, err: String((obj as { err?: unknown }).err) })) }
  }
  const backends = createBackends(config, { ...log, warn: log.info })
  const { tools, a2a } = hostCallers(config, data, { debug: () => {}, info: log.info, warn: log.info })
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
    // the server's budgets (BUDGETS_FILE over the shared counters): a worker's backend calls spend the same
    hostFor: taskHosts({ backends, tools, a2a, agents: names, budgets: new Budgets({ file: loadBudgets(config.BUDGETS_FILE), store: data.budgets, estimateTokens: config.BUDGET_CALL_ESTIMATE_TOKENS, reservationMs: config.BUDGET_RESERVATION_MS, prices: parsePrices(config.LLM_PRICES) }) }),
    bus
  })
  pool.start([agent.agent])
  await subscribeAgents(bus, store, [agent], access)
  io.out(`worker ready: type ${type}, ${concurrency} loop(s), pid ${process.pid}, store ${config.TASK_STORE}`)
  if (io.signal !== undefined && !io.signal.aborted) await new Promise((resolve) => io.signal?.addEventListener('abort', resolve, { once: true }))
  await bus.close()
  await pool.stop()
  await a2a.close()
  await tools.close()
  await backends.close()
  await data.close()
  io.out('worker stopped')
  return 0
}

/**
 * The MCP tools and external A2A agents the worker's task agents call (`context.host`), made as the
 * server's plugins make them (`plugins/tools.ts`, `plugins/a2a-client.ts`: the same files, the same
 * environment), each call recorded in the stores' event log and audit log. A worker has no run
 * ledger: a call's event and audit row are written in one durable write of the stores (one
 * transaction on SQLite; on PostgreSQL each its own).
 */
function hostCallers (config: Config, data: Stores, log: { debug(obj: object, msg?: string): void, info(obj: object, msg?: string): void, warn(obj: object, msg?: string): void }): { tools: McpToolRegistry, a2a: RemoteAgents } {
  const ledger = {
    record: async (event: EventInput, audit: AuditInput): Promise<void> => {
      await data.write(() => {
        // both begin inside the write: SQLite's appends answer at once, in its transaction (which must not be given a promise); PostgreSQL's are promises
        const pending = [data.events.append(event, 'host'), data.audit.append(audit)].filter((written) => written instanceof Promise)
        return pending.length > 0 ? Promise.all(pending) : undefined
      })
    }
  }
  const baseEnv = Object.fromEntries(SUBPROCESS_ENV_ALWAYS.flatMap((name) => {
    const value = config.SUBPROCESS_ENV[name]
    return value !== undefined ? [[name, value]] : []
  }))
  const tools = new McpToolRegistry(loadToolServers(config.MCP_SERVERS_FILE, config.ENV), { baseEnv, clientInfo: { name: 'agent-host', version: pkg.version }, log, stores: { ledger } })
  const a2a = new RemoteAgents({ agents: loadA2AAgents(config.A2A_AGENTS_FILE, { ...config.ENV, PORT: String(config.PORT) }), ledger, log })
  return { tools, a2a }
}
