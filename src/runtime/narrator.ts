import { randomUUID } from 'node:crypto'
import type { Db } from '../storage/database.js'
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
 *
 * It hears only what the task runtime wrote (events of kind `task`: workers' results, in this
 * process or any other on the DATA_DIR, and the reaper's stalls); an agent's CloudEvent named like
 * one is the agent's event and moves nothing. Where it stands — in the event log ({@link follow})
 * and in each conversation — is stored, and each step is one immediate transaction, so across
 * restarts and processes every event is narrated at most once.
 */
export class Narrator {
  readonly #events: EventStore
  readonly #db: Db
  readonly #conversationSeq
  readonly #setConversationSeq
  readonly #followed
  readonly #setFollowed
  readonly #results

  constructor (events: EventStore, db: Db) {
    this.#events = events
    this.#db = db
    this.#conversationSeq = db.prepare('SELECT seq FROM narrations WHERE session_id = ?').pluck()
    this.#setConversationSeq = db.prepare('INSERT INTO narrations (session_id, seq) VALUES (?, ?) ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq')
    this.#followed = db.prepare('SELECT seq FROM narrator_state WHERE id = 1').pluck()
    this.#setFollowed = db.prepare('UPDATE narrator_state SET seq = ? WHERE id = 1')
    this.#results = db.prepare(`SELECT seq, session_id, owner_key, type, body FROM events
      WHERE seq > ? AND kind = 'task' AND type IN ('AGENT_RESULT', 'task.stalled') AND session_id IS NOT NULL ORDER BY seq LIMIT ?`)
  }

  /**
   * Consider the conversation now. Returns the NARRATION event's seq, or undefined when suppressed.
   * @param owner whose conversation it is: conversations are per principal (two callers may pick the same id); null: the host's own tasks
   */
  narrate (conversationId: string, hint?: NarrationHint, owner: string | null = null): number | undefined {
    return this.#db.transaction(() => this.#narrate(conversationId, hint, owner)).immediate()
  }

  /**
   * Narrate the conversations whose tasks finished, failed or stalled since the last call (their
   * results as the runtime wrote them, from any process). Returns how many narrations it wrote.
   * @throws SQLITE_BUSY while another process holds the write lock (call again later)
   */
  follow (limit = 500): number {
    return this.#db.transaction(() => {
      const rows = this.#results.all(this.#followed.get(), limit) as Array<{ seq: number, session_id: string, owner_key: string | null, type: string, body: string }>
      if (rows.length === 0) return 0
      const hints = new Map<string, { conversation: string, owner: string | null, hint: NarrationHint }>()
      for (const row of rows) {
        const failed = row.type === 'task.stalled' || (JSON.parse(row.body) as { outcome?: string }).outcome === 'failed'
        const key = JSON.stringify([row.owner_key, row.session_id])
        hints.set(key, { conversation: row.session_id, owner: row.owner_key, hint: failed || hints.get(key)?.hint === 'agent_failed' ? 'agent_failed' : 'task_completed' })
      }
      let spoken = 0
      for (const { conversation, owner, hint } of hints.values()) if (this.#narrate(conversation, hint, owner) !== undefined) spoken++
      this.#setFollowed.run((rows.at(-1) as { seq: number }).seq)
      return spoken
    }).immediate()
  }

  #narrate (conversationId: string, hint: NarrationHint | undefined, owner: string | null): number | undefined {
    // the place of an owner's conversation is kept apart from another's of the same id (the host's own under the bare id, as before owners)
    const place = owner === null ? conversationId : `${owner}\u0000${conversationId}`
    const since = (this.#conversationSeq.get(place) as number | undefined) ?? 0
    const recent = this.#events.list({ session_id: conversationId, after: since, limit: 500, owner_key: owner }).filter((e) => e.kind === 'task' && e.visibility === 'internal' && e.type !== 'NARRATION_SUPPRESSED')
    const last = recent.at(-1)?.seq ?? since
    const open = (hint !== undefined && (NARRATION_HINTS as readonly string[]).includes(hint)) || recent.some((e) => GATE_TYPES.has(e.type))
    const base = { kind: 'task' as const, id: randomUUID(), source: 'agent-host/narrator', time: new Date().toISOString(), session_id: conversationId, owner_key: owner }
    if (!open) {
      this.#events.append({ ...base, type: 'NARRATION_SUPPRESSED', event: { hint: hint ?? null, considered: recent.length } }, 'narrator')
      return undefined
    }
    const lines = recent.map(describe).filter((l): l is string => l !== undefined)
    const text = lines.length > 0 ? lines.join('\n') : hint === 'user_waiting' ? 'Still working on it.' : 'Update on your request.'
    this.#setConversationSeq.run(place, last)
    return this.#events.append({ ...base, type: 'NARRATION', visibility: 'user', event: { text, hint: hint ?? null, based_on: recent.map((e) => e.seq) } }, 'narrator')
  }
}
