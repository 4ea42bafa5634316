import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { AH_ERR_TASK_STALE_CLAIM, type TaskQuestion } from '../errors.js'
import type { AuditInput } from '../storage/audit.js'
import type { Awaitable } from '../storage/awaitable.js'
import { isUnavailable } from '../storage/busy.js'
import { findRenderToUser, type EventAuthor, type EventInput, type EventQuery } from '../storage/events.js'
import type { StoredEvent } from '../protocol/events.js'
import { AH_ERR_POLICY_VIOLATION } from '../errors.js'
import { ownerOf, type ClaimToken, type JsonObject, type TaskFailure, type TaskNode, type TaskWait } from '../storage/tasks/task.js'
import type { TaskStore } from '../storage/tasks/task-store.js'
import type { AgentHost } from '../backends/protocol.js'
import type { EventPublication } from '../protocol/contract.js'

/** The event log as the runtime needs it. */
export interface TaskEventSink {
  append(input: EventInput, author?: EventAuthor): Awaitable<number>
  /** Events matching `query` (to tell whether an append whose answer was lost was written). */
  list?(query: EventQuery): Awaitable<StoredEvent[]>
}

export interface AgentRuntimeOptions {
  agentId: string
  agentType: string
  store: TaskStore
  events: TaskEventSink
  audit?: { append(input: AuditInput): Awaitable<unknown> }
  /** How often a running task's lease is extended. */
  heartbeatMs?: number
  /** How long a claim lasts without a heartbeat. */
  leaseMs?: number
  now?: () => Date
  /** The backends task agents may use (`context.host`); none when the worker has no configuration for them. */
  host?: AgentHost
  /**
   * The host one task's agent gets (`context.host`), bound to that task: its owner, its signal, its
   * trace (`assist/task-host.ts:taskHosts`); {@link host} is lent as it is when there is none.
   */
  hostFor?: TaskHostFactory
  /** The event bus task agents publish to (`context.bus`). */
  bus?: TaskBus
}

/** Makes the host one task's agent gets, bound to the task and given up when `signal` fires. */
export type TaskHostFactory = (task: TaskNode, signal: AbortSignal) => AgentHost

/** The event bus as a task sees it: a publication says whose it is (the task's creator) and its trace. */
export interface TaskBus {
  publish(publication: EventPublication, origin: { source: string, owner_key: string | null, owner_agents?: readonly string[] | null, owner_scopes?: readonly string[] | null, trace_id: string | null }): Promise<unknown>
}

/** What `completeTask` records (seed S34's AgentResult). */
export interface AgentResult {
  task_id: string
  outcome: 'completed' | 'failed'
  artifacts?: JsonObject[]
  notes?: string
  /** Follow-up tasks to create, with the finished task as their parent. */
  next_actions?: Array<{ type: string, inputs?: JsonObject, priority?: number, metadata?: JsonObject }>
}

/**
 * One agent's view of the task graph (seed S35): claim work of its type, report progress
 * (heartbeats), complete or fail it. Every mutation presents the claim it holds; a worker whose
 * lease expired and whose task was reclaimed gets `AH_ERR_TASK_STALE_CLAIM` and changes nothing (the
 * attempt is audited). AGENT_UPDATE and AGENT_RESULT events are always internal.
 */
export class AgentRuntime {
  readonly agentId: string
  readonly agentType: string
  readonly heartbeatMs: number
  readonly leaseMs: number
  /** The backends this worker's agents may use. */
  readonly host: AgentHost | undefined
  /** The event bus this worker's agents publish to. */
  readonly bus: TaskBus | undefined
  readonly #o: AgentRuntimeOptions
  readonly #claims = new Map<string, ClaimToken>()
  readonly #now: () => Date

  constructor (options: AgentRuntimeOptions) {
    this.#o = options
    this.agentId = options.agentId
    this.agentType = options.agentType
    this.heartbeatMs = options.heartbeatMs ?? 5000
    this.leaseMs = options.leaseMs ?? Math.max(this.heartbeatMs * 3, 1000)
    this.#now = options.now ?? (() => new Date())
    this.host = options.host
    this.bus = options.bus
  }

  /** The host `task`'s agent gets (`TaskContext.host`): its own, made for it, when the worker makes one per task; else this worker's. */
  hostOf (task: TaskNode, signal: AbortSignal): AgentHost | undefined {
    return this.#o.hostFor?.(task, signal) ?? this.host
  }

  /** The claim held on a task (its fencing token), if any. */
  tokenOf (taskId: string): ClaimToken | undefined {
    return this.#claims.get(taskId)
  }

  /** Claim the next task of this agent's type (PENDING → IN_PROGRESS), or undefined when there is none. */
  async claimTask (): Promise<TaskNode | undefined> {
    const task = await this.#o.store.claim(this.agentType, this.agentId, this.leaseMs)
    if (task !== undefined) this.#claims.set(task.id, { owner: this.agentId, attempt: task.attempt })
    return task
  }

  /** Read any task (for example a dependency's outputs). */
  async getTask (taskId: string): Promise<TaskNode | undefined> {
    return await this.#o.store.get(taskId)
  }

  /** Seed name for {@link claimTask}. */
  async pollNextTask (): Promise<TaskNode | undefined> {
    return await this.claimTask()
  }

  #token (taskId: string): ClaimToken {
    return this.#claims.get(taskId) ?? { owner: this.agentId, attempt: -1 }
  }

  async #guard<T>(task: string, op: string, fn: (token: ClaimToken) => Promise<T>): Promise<T> {
    const token = this.#token(task)
    try {
      return await fn(token)
    } catch (err) {
      if (err instanceof AH_ERR_TASK_STALE_CLAIM) {
        this.#claims.delete(task)
        await this.#o.audit?.append({ actor: this.agentId, action: `task.${op}.stale`, resource: task, success: false, details: { attempt: token.attempt } })
      }
      throw err
    }
  }

  async #event (task: TaskNode, type: string, data: JsonObject): Promise<void> {
    await this.#o.events.append(this.#eventOf(task, type, data))
  }

  #eventOf (task: TaskNode, type: string, data: JsonObject): EventInput {
    const conversation = task.metadata.conversation_id
    return {
      kind: 'task',
      id: randomUUID(),
      type,
      source: `agents/${this.agentId}`,
      time: this.#now().toISOString(),
      visibility: 'internal',
      session_id: typeof conversation === 'string' ? conversation : undefined,
      task_id: task.id,
      owner_key: ownerOf(task),
      event: { task_id: task.id, task_type: task.type, agent_id: this.agentId, attempt: task.attempt, ...data }
    }
  }

  /**
   * The AGENT_RESULT of a change the store has already committed (a completion, a failure). While
   * the database is unreachable (PostgreSQL restarting), the same event is tried again, for up to
   * the lease's time: given up at the first error, a task stayed COMPLETED with no AGENT_RESULT (the
   * cluster chaos test's database restart found it). A try whose write committed but whose answer was
   * lost is found (the attempt's AGENT_RESULT) before the next, so the event is never written twice.
   */
  async #resultEvent (task: TaskNode, data: JsonObject): Promise<void> {
    const event = this.#eventOf(task, 'AGENT_RESULT', data)
    const deadline = Date.now() + this.leaseMs
    for (let wait = 50; ; wait = Math.min(wait * 2, 1000)) {
      try {
        await this.#o.events.append(event)
        return
      } catch (err) {
        if (!isUnavailable(err) || Date.now() + wait > deadline) throw err
        await sleep(wait)
        try {
          if ((await this.#o.events.list?.({ task_id: task.id, type: 'AGENT_RESULT' }))?.some((e) => e.event.attempt === task.attempt) === true) return
        } catch {}
      }
    }
  }

  /**
   * Throw `AH_ERR_POLICY_VIOLATION` for what the event log would refuse (seed S36: `render_to_user`
   * anywhere), before anything changes. `executeOnce` checks a result with it before `onComplete`.
   */
  assertAllowed (data: unknown): void {
    this.#policy(data)
  }

  #policy (data: unknown): void {
    const flagged = findRenderToUser(data)
    if (flagged !== undefined) throw Object.assign(new AH_ERR_POLICY_VIOLATION(`render_to_user at ${flagged}`), { policy_error: true })
  }

  /** AGENT_UPDATE: progress on a task; also a heartbeat (the lease is extended). */
  async emitUpdate (taskId: string, message: string, progress?: number): Promise<TaskNode> {
    this.#policy(message)
    return await this.#guard(taskId, 'update', async (token) => {
      const task = await this.#o.store.heartbeat(taskId, token, this.leaseMs)
      await this.#event(task, 'AGENT_UPDATE', { message, ...(progress !== undefined ? { progress } : {}) })
      return task
    })
  }

  /** Extend the lease without an event. */
  async heartbeat (taskId: string): Promise<TaskNode> {
    return await this.#guard(taskId, 'heartbeat', async (token) => await this.#o.store.heartbeat(taskId, token, this.leaseMs))
  }

  /** AGENT_RESULT, COMPLETED, and any `next_actions` created as child tasks. Returns the stored node. */
  async completeTask (taskId: string, result: AgentResult): Promise<TaskNode> {
    this.#policy(result)
    return await this.#guard(taskId, 'complete', async (token) => {
      const outputs: JsonObject = { outcome: result.outcome, artifacts: result.artifacts ?? [], notes: result.notes ?? '', next_actions: result.next_actions ?? [] }
      const task = await this.#o.store.complete(taskId, token, outputs)
      this.#claims.delete(taskId)
      await this.#resultEvent(task, { outcome: 'completed', result: outputs })
      if ((result.next_actions ?? []).length > 0) {
        await this.#o.store.create((result.next_actions ?? []).map((action) => {
          // a child is its parent's owner's, held to the owner's agent list and scopes: an agent can neither hand a task to someone else nor widen either
          const { owner_key: _claimed, owner_agents: _widened, owner_scopes: _raised, ...asked } = action.metadata ?? {}
          return { type: action.type, inputs: action.inputs ?? {}, priority: action.priority ?? task.priority, metadata: { ...task.metadata, ...asked }, parent_id: task.id }
        }))
      }
      return task
    })
  }

  /** AGENT_RESULT with `outcome: "failed"`; back to PENDING with backoff when retryable and attempts remain, else FAILED. */
  async failTask (taskId: string, error: TaskFailure): Promise<TaskNode> {
    this.#policy(error)
    return await this.#guard(taskId, 'fail', async (token) => {
      const task = await this.#o.store.fail(taskId, token, error)
      this.#claims.delete(taskId)
      await this.#resultEvent(task, { outcome: 'failed', error: { reason: error.reason, retryable: error.retryable, ...(error.details !== undefined ? { details: error.details } : {}) }, status: task.status })
      return task
    })
  }

  /** Give a claimed task back because this worker is stopping: PENDING at once, the attempt not counted. */
  async releaseTask (taskId: string): Promise<TaskNode> {
    return await this.#guard(taskId, 'release', async (token) => {
      const task = await this.#o.store.release(taskId, token)
      this.#claims.delete(taskId)
      await this.#o.audit?.append({ actor: this.agentId, action: 'task.release', resource: taskId, success: true, details: { reason: 'shutdown', attempt: token.attempt } })
      return task
    })
  }

  /**
   * The task's agent asked a person (a host call marked `require_approval`, `question`): WAITING with
   * `wait` (its questions and host calls) until every question is answered
   * (`POST /v1/tasks/:id/approvals/:approval_id`), the attempt not counted; a `task.waiting` event
   * (internal) with the question.
   */
  async waitTask (taskId: string, wait: TaskWait, question: TaskQuestion): Promise<TaskNode> {
    return await this.#guard(taskId, 'wait', async (token) => {
      const task = await this.#o.store.wait(taskId, token, wait)
      this.#claims.delete(taskId)
      await this.#event(task, 'task.waiting', { approval_id: question.id, message: question.message, call: question.call, open: wait.approvals.filter((a) => a.answer === undefined).length })
      return task
    })
  }

  /** Whether a heartbeat is due since `lastTs` (ms since epoch, or a date). */
  heartbeatDue (lastTs: number | Date | string): boolean {
    const last = typeof lastTs === 'number' ? lastTs : new Date(lastTs).getTime()
    return this.#now().getTime() - last >= this.heartbeatMs
  }
}
