import { randomUUID } from 'node:crypto'
import type { AuditInput } from '../storage/audit.js'
import type { Awaitable } from '../storage/awaitable.js'
import type { TaskEventSink } from './agent-runtime.js'
import { ownerOf, type TaskNode } from '../storage/tasks/task.js'
import type { TaskStore } from '../storage/tasks/task-store.js'

/**
 * Returns tasks whose worker stopped heart-beating (crashed, hung, partitioned) to PENDING — or
 * FAILED after `max_attempts` — with a `task.stalled` event and an audit row for each.
 */
export class Reaper {
  readonly #store: TaskStore
  readonly #events: TaskEventSink
  readonly #audit: { append(input: AuditInput): Awaitable<unknown> } | undefined
  #timer: NodeJS.Timeout | undefined
  #running: Promise<TaskNode[]> | undefined

  constructor (store: TaskStore, events: TaskEventSink, audit?: { append(input: AuditInput): Awaitable<unknown> }) {
    this.#store = store
    this.#events = events
    this.#audit = audit
  }

  /** Reap once now. */
  async reap (): Promise<TaskNode[]> {
    const reaped = await this.#store.reap()
    for (const task of reaped) {
      const conversation = task.metadata.conversation_id
      await this.#events.append({
        kind: 'task',
        id: randomUUID(),
        type: 'task.stalled',
        source: 'agent-host/reaper',
        time: new Date().toISOString(),
        session_id: typeof conversation === 'string' ? conversation : undefined,
        task_id: task.id,
        owner_key: ownerOf(task),
        event: { task_id: task.id, task_type: task.type, attempt: task.attempt, owner: task.error?.details, status: task.status }
      }, 'host')
      await this.#audit?.append({ actor: 'agent-host', action: 'task.reclaim', resource: task.id, success: true, details: { attempt: task.attempt, status: task.status } })
    }
    return reaped
  }

  /** Reap every `intervalMs` (the server uses lease/2) until {@link stop}. */
  start (intervalMs: number, onError: (err: unknown) => void): void {
    this.#timer = setInterval(() => {
      if (this.#running !== undefined) return
      this.#running = this.reap().catch((err: unknown) => { onError(err); return [] }).finally(() => { this.#running = undefined })
    }, intervalMs).unref()
  }

  async stop (): Promise<void> {
    clearInterval(this.#timer)
    await this.#running
  }
}
