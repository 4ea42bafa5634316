import { createHash } from 'node:crypto'
import type { LoadedTaskAgent } from '../agents/loader.js'
import type { TaskAccess } from '../auth/task-access.js'
import type { TaskStore } from '../storage/tasks/task-store.js'
import type { BusEvent } from '../storage/bus.js'
import type { EventBus } from './event-bus.js'

/**
 * The id of the task a subscription starts for an event: one per event and subscription, so a
 * redelivery finds it (`bus.<event id>.<8 hex digits of the subscription id's hash>`, short enough
 * for any subscription's name; the task's metadata names the subscription).
 */
export const busTaskId = (event: BusEvent, subscriptionId: string): string => `bus.${event.id}.${createHash('sha256').update(subscriptionId).digest('hex').slice(0, 8)}`

/**
 * Register the bus subscriptions of these task agents, handled in this process: a subscription's
 * `handle` runs for each event, and its `startTask` creates a task of the agent (inputs from the
 * event, `metadata.intent` its capability, `owner_key`, `owner_agents` and the trace carried over). The
 * task id comes from the event, so at-least-once delivery starts each task once. Given `access`, an
 * event whose owner may not have the agent work for it is neither handled nor starts a task (audited,
 * and done with: a refusal is not a failure to retry).
 */
export async function subscribeAgents (bus: EventBus, store: TaskStore, agents: readonly LoadedTaskAgent[], access?: TaskAccess): Promise<void> {
  for (const { agent, subscriptions } of agents) {
    for (const sub of subscriptions) {
      await bus.subscribe({
        id: sub.id,
        agent: agent.agentType,
        patterns: sub.patterns,
        ...(sub.filter !== undefined ? { filter: sub.filter } : {}),
        ...(sub.maxAttempts !== undefined ? { maxAttempts: sub.maxAttempts } : {}),
        ...(sub.backoffMs !== undefined ? { backoffMs: sub.backoffMs } : {}),
        handler: async (event, context) => {
          if (access !== undefined && !await access.admits(event, agent.agentType, sub.id)) return
          await sub.handle?.(event, { signal: context.signal })
          if (sub.startTask === undefined) return
          const inputs = sub.startTask === true ? event.data as Record<string, unknown> : sub.startTask(event)
          if (inputs === undefined) return
          const id = busTaskId(event, sub.id)
          if (await store.get(id) !== undefined) return
          try {
            await store.create([{
              id,
              type: agent.agentType,
              inputs,
              context: { ...(event.trace_id !== null ? { trace_id: event.trace_id } : {}) },
              metadata: { ...(sub.intent !== undefined ? { intent: sub.intent } : {}), bus_event_id: event.id, bus_event_type: event.type, subscription: sub.id, ...(event.owner_key !== null ? { owner_key: event.owner_key } : {}), ...(event.owner_agents != null ? { owner_agents: event.owner_agents } : {}), ...(event.owner_scopes != null ? { owner_scopes: event.owner_scopes } : {}) }
            }])
          } catch (err) {
            // another process handling the same delivery (its lease lapsed) created it first
            if (await store.get(id) === undefined) throw err
          }
        }
      })
    }
  }
}
