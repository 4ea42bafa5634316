import { AH_ERR_POLICY_VIOLATION, AH_ERR_TASK_AGENT_FAILED, AH_ERR_TASK_APPROVAL_REQUIRED, type AgentError } from '../errors.js'
import type { AgentResult, AgentRuntime, TaskBus } from './agent-runtime.js'
import type { TaskNode, TaskWait } from '../storage/tasks/task.js'
import type { AgentHost } from '../backends/protocol.js'

/** What `handleTask` gets besides the task. */
export interface TaskContext {
  runtime: AgentRuntime
  /** Fires on cancel, shutdown, or a lost claim: stop and return. */
  signal: AbortSignal
  /** Report progress (AGENT_UPDATE, and a heartbeat). */
  progress(message: string, fraction?: number): Promise<void>
  /**
   * What the host lends this task, when the worker was given it: the backends (`host.backend('llm')`,
   * metered as the task's owner's), and where the worker has them the MCP tools (`host.tools`) and
   * external A2A agents (`host.a2a`), called on behalf of the task's owner (`metadata.owner_key`),
   * held to its scopes and agent list, stopped by {@link signal}, and recorded in the task's events
   * and the audit log (agents/README.md, "Task agents").
   */
  host?: AgentHost
  /** The event bus, when the worker was given it. */
  bus?: TaskBus
}

/**
 * A task agent (seed S34): declares `agentType` and implements `handleTask`. `executeOnce`
 * claims a task, runs the lifecycle hooks, keeps the lease alive with heartbeats while
 * `handleTask` runs, and completes or fails the task — for any error, not only AgentError — or, when
 * its host asked a person (`AH_ERR_TASK_APPROVAL_REQUIRED`), leaves it WAITING for the answer.
 */
export abstract class BaseAgent {
  abstract readonly agentType: string
  abstract handleTask (task: TaskNode, context: TaskContext): Promise<AgentResult>

  /** Called after a task is claimed. */
  async onAssign (task: TaskNode, runtime: AgentRuntime): Promise<void> {
    await runtime.emitUpdate(task.id, 'assigned')
  }

  /** Called for each progress report. */
  async onProgress (task: TaskNode, runtime: AgentRuntime, message: string, fraction?: number): Promise<void> {
    await runtime.emitUpdate(task.id, message, fraction)
  }

  /** Called before the task is marked COMPLETED. */
  async onComplete (_task: TaskNode, _runtime: AgentRuntime, _result: AgentResult): Promise<void> {}

  /** Called before the task is failed. */
  async onError (_task: TaskNode, _runtime: AgentRuntime, _error: AgentError): Promise<void> {}

  /**
   * Do one task, if there is one. Returns the finished task node, or `null` when there was no work.
   * @param signal the worker is stopping (shutdown): aborts the running handler, and a task it stops
   *   goes back to PENDING without using an attempt (no hook runs for it)
   */
  async executeOnce (runtime: AgentRuntime, signal?: AbortSignal, onClaimed?: (task: TaskNode, controller: AbortController) => () => void): Promise<TaskNode | null> {
    const task = await runtime.claimTask()
    if (task === undefined) return null
    const controller = new AbortController()
    const forget = onClaimed?.(task, controller)
    const host = runtime.hostOf(task, controller.signal)
    const abort = (): void => { controller.abort(signal?.reason) }
    if (signal?.aborted === true) abort()
    signal?.addEventListener('abort', abort, { once: true })
    let beating: Promise<void> | undefined
    const beat = setInterval(() => {
      beating ??= runtime.heartbeat(task.id)
        .then(() => {}, (err: unknown) => { controller.abort(err) })
        .finally(() => { beating = undefined })
    }, runtime.heartbeatMs)
    beat.unref()
    // a heartbeat that reaches the store after this attempt has ended is refused (and audited) as stale
    const stopBeating = async (): Promise<void> => { clearInterval(beat); await beating }
    let completed = false
    try {
      await this.onAssign(task, runtime)
      const result = await this.handleTask(task, {
        runtime,
        signal: controller.signal,
        progress: async (message, fraction) => { await this.onProgress(task, runtime, message, fraction) },
        ...(host !== undefined ? { host } : {}),
        ...(runtime.bus !== undefined ? { bus: runtime.bus } : {})
      })
      // a result the policy refuses is the agent's failure, found before onComplete is told otherwise
      runtime.assertAllowed(result)
      await this.onComplete(task, runtime, result)
      completed = true
      await stopBeating()
      return await runtime.completeTask(task.id, { ...result, task_id: task.id })
    } catch (err) {
      // onComplete ran: the hooks have said how this attempt ended (a completion that could not be stored is the caller's)
      if (completed) throw err
      // stopped by a graceful shutdown: the task goes back as it was, the attempt not counted
      if (signal?.aborted === true) {
        await stopBeating()
        return await runtime.releaseTask(task.id)
      }
      // the agent asked a person (a host call marked require_approval): the task waits for the answer, the attempt not counted
      if (err instanceof AH_ERR_TASK_APPROVAL_REQUIRED && err.taskId === task.id) {
        const wait = await err.waiting() as unknown as TaskWait
        await stopBeating()
        return await runtime.waitTask(task.id, wait, err.question)
      }
      const error = agentError(err)
      await this.onError(task, runtime, error)
      await stopBeating()
      return await runtime.failTask(task.id, { reason: error.reason, retryable: error.retryable, ...(error.details !== undefined ? { details: error.details } : {}) })
    } finally {
      await stopBeating()
      signal?.removeEventListener('abort', abort)
      forget?.()
      // what the agent left running with the task's host (an A2A call it did not await) is given up with the task, as a run's is
      controller.abort(new Error('task ended'))
    }
  }
}

/** What a task's failure is recorded as: a policy refusal is terminal; any other error is retried unless it says otherwise. */
function agentError (err: unknown): AgentError {
  if (err instanceof AH_ERR_TASK_AGENT_FAILED) return err
  if (err instanceof AH_ERR_POLICY_VIOLATION) return new AH_ERR_TASK_AGENT_FAILED('policy_violation', { retryable: false, details: { detail: err.message }, cause: err })
  return new AH_ERR_TASK_AGENT_FAILED((err as Error)?.message ?? String(err), { retryable: true, cause: err })
}

/** Whether a default export is a task agent: a BaseAgent, or an object with `agentType` and `handleTask`. */
export function isTaskAgent (value: unknown): value is Pick<BaseAgent, 'agentType' | 'handleTask'> {
  if (value instanceof BaseAgent) return true
  if (typeof value !== 'object' || value === null) return false
  const v = value as { agentType?: unknown, handleTask?: unknown }
  return typeof v.agentType === 'string' && typeof v.handleTask === 'function'
}

/** A task agent as a BaseAgent (plain objects get the default hooks unless they bring their own). */
export function asBaseAgent (value: Pick<BaseAgent, 'agentType' | 'handleTask'> & Partial<BaseAgent>): BaseAgent {
  if (value instanceof BaseAgent) return value
  if (value.agentType.trim() === '') throw new Error('agentType must not be empty')
  const plain = value
  return new (class extends BaseAgent {
    readonly agentType = plain.agentType
    async handleTask (task: TaskNode, context: TaskContext): Promise<AgentResult> { return await plain.handleTask(task, context) }
    override async onAssign (task: TaskNode, runtime: AgentRuntime): Promise<void> {
      if (plain.onAssign !== undefined) await plain.onAssign(task, runtime)
      else await super.onAssign(task, runtime)
    }

    override async onProgress (task: TaskNode, runtime: AgentRuntime, message: string, fraction?: number): Promise<void> {
      if (plain.onProgress !== undefined) await plain.onProgress(task, runtime, message, fraction)
      else await super.onProgress(task, runtime, message, fraction)
    }

    override async onComplete (task: TaskNode, runtime: AgentRuntime, result: AgentResult): Promise<void> { await plain.onComplete?.(task, runtime, result) }
    override async onError (task: TaskNode, runtime: AgentRuntime, error: AgentError): Promise<void> { await plain.onError?.(task, runtime, error) }
  })()
}
