import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { type TaskNarrator } from '../storage/tasks/narration.js'
import { isBusy } from '../storage/busy.js'
import { Reaper } from '../runtime/reaper.js'
import { WorkerPool } from '../runtime/worker-pool.js'
import { subscribeAgents } from '../bus/agent-subscriptions.js'
import { TaskAccess } from '../auth/task-access.js'
import { taskHosts } from '../assist/task-host.js'
import type { TaskStore } from '../storage/tasks/task-store.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The task graph. */
    tasks: TaskStore
    /** The in-process workers of the task agents. */
    workers: WorkerPool
    /** The only writer of user-visible events. */
    narrator: TaskNarrator
  }
}

/**
 * The task-graph runtime inside the server: the store (TASK_STORE), the reaper (every lease/2),
 * the narrator (it follows the event log and narrates each task result of a conversation, from any
 * process), and WORKERS_PER_TYPE worker loops
 * per task agent, whose agents each get a host bound to their task (`assist/task-host.ts`: the backends,
 * the MCP tools and the external A2A agents, on behalf of the task's owner). On close the workers are aborted and waited for before the database closes.
 */
async function tasks (app: FastifyInstance): Promise<void> {
  const config = app.config
  const names = app.taskAgents.map((loaded) => ({ type: loaded.agent.agentType, id: loaded.id }))
  const access = new TaskAccess(names, app.audit)
  // every task made here (routes, plans, the bus, agents' follow-ups) is held to its owner's agent list
  const store: TaskStore = access.guard(app.metrics.instrument(app.stores.tasks))
  const narrator = app.stores.narrator
  const reaper = new Reaper(store, app.events, app.audit)
  const pool = new WorkerPool({
    store,
    events: app.events,
    audit: app.audit,
    workersPerType: config.WORKERS_PER_TYPE,
    heartbeatMs: config.TASK_HEARTBEAT_MS,
    leaseMs: config.TASK_LEASE_MS,
    pollMs: config.TASK_POLL_MS,
    log: app.log,
    host: app.backends,
    // each task's agent gets the host a run's does, bound to the task: its owner, its signal, its trace
    hostFor: taskHosts({ backends: app.backends, tools: app.tools, a2a: app.a2aAgents, budgets: app.budgets, agents: names, usage: (usage) => { app.metrics.runObserver.usage?.(usage) } }),
    bus: app.bus
  })
  app.decorate('tasks', store)
  app.decorate('workers', pool)
  app.decorate('narrator', narrator)

  // the narrator follows the event log itself (worker processes and the reaper write there too); a
  // local task result only makes it look sooner
  let looking: NodeJS.Immediate | undefined
  // one look at a time: a second would only wait for the first's lock
  let following: Promise<void> | undefined
  const follow = async (): Promise<void> => {
    try {
      while (await narrator.follow() > 0);
    } catch (err) {
      if (!isBusy(err)) app.log.error({ err }, 'narration failed')
    }
  }
  const look = async (): Promise<void> => {
    looking = undefined
    following ??= follow().finally(() => { following = undefined })
    await following
  }
  const onEvent = (e: { type: string }): void => {
    if (e.type === 'AGENT_RESULT' || e.type === 'task.stalled') looking ??= setImmediate(() => { look().catch(() => {}) })
  }
  app.events.appended.on('event', onEvent)
  const narrating = setInterval(() => { looking ??= setImmediate(() => { look().catch(() => {}) }) }, config.TASK_POLL_MS).unref()
  reaper.start(Math.max(100, Math.floor(config.TASK_LEASE_MS / 2)), (err) => { app.log.error({ err }, 'reaper failed') })
  pool.start(app.taskAgents.map((t) => t.agent))
  await subscribeAgents(app.bus, store, app.taskAgents, access)
  app.addHook('preClose', async () => {
    await pool.stop()
    await reaper.stop()
    app.events.appended.off('event', onEvent)
    clearInterval(narrating)
    if (looking !== undefined) clearImmediate(looking)
    await look()
  })
}

export default fp(tasks, { name: 'tasks', fastify: '5.x', dependencies: ['config', 'storage', 'metrics', 'agents', 'backends', 'bus', 'tools', 'a2a-client', 'budgets'] })
