import { randomUUID } from 'node:crypto'
import type { EventStore } from '../storage/events.js'
import type { StoredEvent } from '../protocol/events.js'

/** Hints that always open the gate. */
export const NARRATION_HINTS = ['user_waiting', 'task_completed', 'agent_failed'] as const
export type NarrationHint = typeof NARRATION_HINTS[number]

/** Internal event types that open the gate when they are recent. */
const GATE_TYPES = new Set(['ERROR', 'AGENT_RESULT', 'task.stalled'])

function describe (event: StoredEvent): string | undefined {
  const e = event.event as { task_id?: string, task_type?: string, outcome?: string, message?: string, error?: { reason?: string }, status?: string }
  const what = `${e.task_type ?? 'task'} ${e.task_id ?? ''}`.trim()
  if (event.type === 'AGENT_RESULT') return e.outcome === 'failed' ? `${what} failed: ${e.error?.reason ?? 'unknown error'}${e.status === 'PENDING' ? ' (it will be retried)' : ''}` : `${what} is done.`
  if (event.type === 'task.stalled') return `${what} stopped responding; it has been ${e.status === 'FAILED' ? 'given up' : 'handed to another worker'}.`
  if (event.type === 'AGENT_UPDATE') return e.message === undefined ? undefined : `${what}: ${e.message}`
  return undefined
}

/**
 * The only component that may speak to users (seed S36). It reads a conversation's internal
 * events since its last narration and, when the gate opens — a hint (`user_waiting`,
 * `task_completed`, `agent_failed`) or a recent ERROR / AGENT_RESULT / stall — writes one
 * user-visible NARRATION event summarising them; otherwise it records NARRATION_SUPPRESSED.
 */
export class Narrator {
  readonly #events: EventStore
  readonly #cursor = new Map<string, number>()

  constructor (events: EventStore) {
    this.#events = events
  }

  /** Consider the conversation now. Returns the NARRATION event's seq, or undefined when suppressed. */
  narrate (conversationId: string, hint?: NarrationHint): number | undefined {
    const since = this.#cursor.get(conversationId) ?? 0
    const recent = this.#events.list({ session_id: conversationId, after: since, limit: 500 }).filter((e) => e.visibility === 'internal' && e.type !== 'NARRATION_SUPPRESSED')
    const last = recent.at(-1)?.seq ?? since
    const open = (hint !== undefined && (NARRATION_HINTS as readonly string[]).includes(hint)) || recent.some((e) => GATE_TYPES.has(e.type))
    const base = { kind: 'task' as const, id: randomUUID(), source: 'agent-host/narrator', time: new Date().toISOString(), session_id: conversationId }
    if (!open) {
      this.#events.append({ ...base, type: 'NARRATION_SUPPRESSED', event: { hint: hint ?? null, considered: recent.length } }, 'narrator')
      return undefined
    }
    const lines = recent.map(describe).filter((l): l is string => l !== undefined)
    const text = lines.length > 0 ? lines.join('\n') : hint === 'user_waiting' ? 'Still working on it.' : 'Update on your request.'
    this.#cursor.set(conversationId, last)
    return this.#events.append({ ...base, type: 'NARRATION', visibility: 'user', event: { text, hint: hint ?? null, based_on: recent.map((e) => e.seq) } }, 'narrator')
  }
}
