import { AH_ERR_FORBIDDEN } from '../errors.js'
import { ownerAgentsOf, ownerOf, type NewTask } from '../storage/tasks/task.js'
import type { TaskStore } from '../storage/tasks/task-store.js'
import type { AuditInput } from '../storage/audit.js'
import type { Awaitable } from '../storage/awaitable.js'
import type { BusEvent } from '../storage/bus.js'
import { mayInvoke } from './agent-access.js'

/** A task agent as agent lists name it: its type (which is its name) and, when it is a CAP agent too, its manifest id. */
export interface TaskAgentName {
  type: string
  id?: string
}

/**
 * Who may have which task agent work for it. A task is work done for its owner, and so is an event's
 * delivery to an agent's subscription: both are held to the owner's agent list (a task's
 * `metadata.owner_agents`, an event's `owner_agents`: the key's or token's list, carried from the
 * request to every task and event it leads to), as `POST /v1/assist` holds a call to the caller's
 * (`agentRefusal`). A type no agent here serves (a worker elsewhere may) is allowed only to a list
 * naming it. Every refusal is audited like an assist refusal: `auth.deny` on `agent:<type>`, the owner
 * as actor, `reason: "agent"`.
 */
export class TaskAccess {
  readonly #ids: Map<string, string | undefined>
  readonly #audit: { append(input: AuditInput): Awaitable<unknown> }

  /**
   * @param agents the task agents loaded here (a type not among them is served by no agent here)
   * @param audit where refusals are recorded
   */
  constructor (agents: readonly TaskAgentName[], audit: { append(input: AuditInput): Awaitable<unknown> }) {
    this.#ids = new Map(agents.map((a) => [a.type, a.id]))
    this.#audit = audit
  }

  /** Why an owner limited to `allowed` may not have `type` worked, if it may not. */
  #refusal (allowed: readonly string[] | null, type: string): Error | undefined {
    const id = this.#ids.get(type)
    if (allowed === null || mayInvoke(new Set(allowed), { name: type, ...(id !== undefined ? { id } : {}) })) return undefined
    return new AH_ERR_FORBIDDEN(`this key may not invoke agent "${type}"${this.#ids.has(type) ? '' : ` (no agent here serves tasks of type "${type}")`}`)
  }

  /**
   * Refuse a batch holding a task its owner's list does not allow, before anything is created.
   * @throws AH_ERR_FORBIDDEN (403), audited
   */
  async check (batch: readonly NewTask[]): Promise<void> {
    for (const task of batch) {
      const metadata = task.metadata ?? {}
      const error = this.#refusal(ownerAgentsOf({ metadata }), task.type)
      if (error === undefined) continue
      const trace = task.context?.trace_id
      await this.#audit.append({
        actor: ownerOf({ metadata }) ?? 'host',
        action: 'auth.deny',
        resource: `agent:${task.type}`,
        success: false,
        ...(typeof trace === 'string' ? { trace_id: trace } : {}),
        details: { reason: 'agent', task_type: task.type, ...(task.parent_id != null ? { parent_id: task.parent_id } : {}) }
      })
      throw error
    }
  }

  /**
   * Whether `agent`'s subscription may handle `event` (run its handler, start its task): the event's
   * owner may have that agent work for it. A refusal is audited; the delivery is then done with.
   */
  async admits (event: BusEvent, agent: string, subscription: string): Promise<boolean> {
    if (this.#refusal(event.owner_agents, agent) === undefined) return true
    await this.#audit.append({
      actor: event.owner_key ?? 'host',
      action: 'auth.deny',
      resource: `agent:${agent}`,
      success: false,
      trace_id: event.trace_id,
      details: { reason: 'agent', subscription, event: event.id, event_type: event.type }
    })
    return false
  }

  /** `store` whose `create` is checked first ({@link check}): every path that makes tasks goes through it. */
  guard (store: TaskStore): TaskStore {
    return new Proxy(store, {
      get: (target, key) => {
        if (key === 'create') return async (batch: NewTask[]) => { await this.check(batch); return await target.create(batch) }
        const value = Reflect.get(target, key, target) as unknown
        return typeof value === 'function' ? value.bind(target) : value
      }
    })
  }
}
