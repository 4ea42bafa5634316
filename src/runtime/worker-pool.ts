import { hostname } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import { AH_ERR_TASK_STALE_CLAIM } from '../errors.js'
import type { Awaitable } from '../storage/awaitable.js'
import type { AuditInput } from '../storage/audit.js'
import { AgentRuntime, type TaskBus, type TaskEventSink, type TaskHostFactory } from './agent-runtime.js'
import type { BaseAgent } from './base-agent.js'
import type { TaskStore } from '../storage/tasks/task-store.js'
import type { AgentHost } from '../backends/protocol.js'

export interface WorkerPoolOptions {
  store: TaskStore
  events: TaskEventSink
  audit?: { append(input: AuditInput): Awaitable<unknown> }
  /** Loops per task agent. */
  workersPerType: number
  heartbeatMs: number
  leaseMs: number
  /** Idle wait between polls when there is no work. */
  pollMs: number
  log: { info(obj: object, msg?: string): void, error(obj: object, msg?: string): void }
  /** The backends the agents may use (`TaskContext.host`), when no {@link hostFor} makes each task's. */
  host?: AgentHost
  /** The host each task's agent gets (`TaskContext.host`), bound to that task (`assist/task-host.ts:taskHosts`). */
  hostFor?: TaskHostFactory
  /** The event bus the agents publish to (`TaskContext.bus`). */
  bus?: TaskBus
}

/**
 * Runs task agents: `workersPerType` loops per agent, each claiming and doing one task at a time
 * (the same loop `agent-host worker` runs as its own process). Running tasks can be cancelled one
 * by one; {@link stop} aborts them all and waits for the loops to end — a task whose handler
 * stops is failed (and retried later), and one that does not lets its lease lapse.
 */
export class WorkerPool {
  readonly #o: WorkerPoolOptions
  readonly #controller = new AbortController()
  readonly #running = new Map<string, AbortController>()
  readonly #loops: Array<Promise<void>> = []

  constructor (options: WorkerPoolOptions) {
    this.#o = options
  }

  /** Start the loops for `agents`. */
  start (agents: BaseAgent[]): void {
    const host = `${hostname()}:${process.pid}`
    for (const agent of agents) {
      for (let i = 0; i < this.#o.workersPerType; i++) {
        const runtime = new AgentRuntime({
          agentId: `${agent.agentType}@${host}#${i}`,
          agentType: agent.agentType,
          store: this.#o.store,
          events: this.#o.events,
          ...(this.#o.audit !== undefined ? { audit: this.#o.audit } : {}),
          heartbeatMs: this.#o.heartbeatMs,
          leaseMs: this.#o.leaseMs,
          ...(this.#o.host !== undefined ? { host: this.#o.host } : {}),
          ...(this.#o.hostFor !== undefined ? { hostFor: this.#o.hostFor } : {}),
          ...(this.#o.bus !== undefined ? { bus: this.#o.bus } : {})
        })
        this.#loops.push(this.#loop(agent, runtime))
      }
    }
  }

  async #loop (agent: BaseAgent, runtime: AgentRuntime): Promise<void> {
    const signal = this.#controller.signal
    while (!signal.aborted) {
      let done = null
      try {
        done = await agent.executeOnce(runtime, signal, (task, controller) => {
          this.#running.set(task.id, controller)
          return () => { this.#running.delete(task.id) }
        })
      } catch (err) {
        if (err instanceof AH_ERR_TASK_STALE_CLAIM) this.#o.log.info({ err: err.message, agent: runtime.agentId }, 'task moved on without this worker')
        else this.#o.log.error({ err, agent: runtime.agentId }, 'task loop failed')
      }
      if (done === null) await sleep(this.#o.pollMs, undefined, { signal }).catch(() => {})
    }
  }

  /** Abort the handler running `taskId` here, if any. */
  cancel (taskId: string): boolean {
    const controller = this.#running.get(taskId)
    controller?.abort(new Error('task cancelled'))
    return controller !== undefined
  }

  async stop (): Promise<void> {
    this.#controller.abort(new Error('shutting down'))
    await Promise.allSettled(this.#loops)
  }
}
