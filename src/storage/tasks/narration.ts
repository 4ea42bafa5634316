import { randomUUID } from 'node:crypto'
import type { Awaitable } from '../awaitable.js'
import type { EventInput, EventQuery } from '../events.js'
import type { StoredEvent } from '../../protocol/events.js'

/** Hints that always open the gate. */
export const NARRATION_HINTS = ['user_waiting', 'task_completed', 'agent_failed'] as const
export type NarrationHint = typeof NARRATION_HINTS[number]

/** The task runtime's events that {@link TaskNarrator.follow} narrates: a worker's result, the reaper's stall. */
export const TASK_RESULT_TYPES: readonly string[] = ['AGENT_RESULT', 'task.stalled']

/** Internal event types that open the gate when they are recent. */
const GATE_TYPES = new Set(['ERROR', 'AGENT_RESULT', 'task.stalled'])

/** How many of a conversation's events one narration considers at most. */
const WINDOW = 500

/**
 * The only component that may speak to users (seed S36). It reads a conversation's internal
 * events since its last narration and, when the gate opens — a hint (`user_waiting`,
 * `task_completed`, `agent_failed`) or a recent ERROR / AGENT_RESULT / stall — writes one
 * user-visible NARRATION event summarising them; otherwise it records NARRATION_SUPPRESSED.
 *
 * It hears only what the task runtime wrote (events of kind `task`: workers' results, in this
 * process or any other, and the reaper's stalls); an agent's CloudEvent named like one is the
 * agent's event and moves nothing. Where it stands — in the event log ({@link follow}) and in each
 * conversation — is stored, and each step is one transaction that excludes every other narrator's
 * on the same database, so across restarts, processes and instances every event is narrated once.
 *
 * `SqliteNarrator` (`storage/sqlite/narrator.ts`) answers at once, `PgNarrator` (`storage/postgres/narrator.ts`) with promises:
 * callers `await` every call. Both apply the rules of this file ({@link narrationStep},
 * {@link conversationsToNarrate}).
 */
export interface TaskNarrator {
  /**
   * Consider the conversation now. Returns the NARRATION event's seq, or undefined when suppressed
   * (a NARRATION_SUPPRESSED event is written instead).
   * @param owner whose conversation it is: conversations are per principal (two callers may pick the same id); null: the host's own tasks
   */
  narrate(conversationId: string, hint?: NarrationHint, owner?: string | null): Awaitable<number | undefined>
  /**
   * Narrate the conversations whose tasks finished, failed or stalled since the last call (their
   * results as the runtime wrote them, from any process), reading at most `limit` results (a
   * negative limit: all). Returns how many narrations it wrote; 0 when there was nothing new.
   * @throws SQLITE_BUSY (SQLite) while another process holds the write lock (call again later)
   */
  follow(limit?: number): Awaitable<number>
}

/** A task result or stall in the event log, as {@link TaskNarrator.follow} reads it (oldest first). */
export interface TaskResultRow {
  seq: number
  session_id: string
  owner_key: string | null
  type: string
  /** The event's JSON. */
  body: string
}

/** One conversation {@link TaskNarrator.follow} narrates, and why. */
export interface ConversationToNarrate {
  conversation: string
  owner: string | null
  hint: NarrationHint
}

/**
 * The conversations that `rows` ask to narrate, each once (per owner), in order of their first
 * result: `agent_failed` when any of its results failed or stalled, else `task_completed`.
 */
export function conversationsToNarrate (rows: readonly TaskResultRow[]): ConversationToNarrate[] {
  const hints = new Map<string, ConversationToNarrate>()
  for (const row of rows) {
    const failed = row.type === 'task.stalled' || (JSON.parse(row.body) as { outcome?: string }).outcome === 'failed'
    const key = JSON.stringify([row.owner_key, row.session_id])
    hints.set(key, { conversation: row.session_id, owner: row.owner_key, hint: failed || hints.get(key)?.hint === 'agent_failed' ? 'agent_failed' : 'task_completed' })
  }
  return [...hints.values()]
}

/** The events a narration of the conversation reads: the owner's, after the conversation's place `since`. */
export function narrationQuery (conversationId: string, owner: string | null, since: number): EventQuery {
  return { session_id: conversationId, after: since, limit: WINDOW, owner_key: owner }
}

/** What one narration writes. */
export interface NarrationStep {
  /** The NARRATION (gate open) or NARRATION_SUPPRESSED event, to append as the `narrator`. */
  event: EventInput
  /** Gate open: the conversation's new place (the last event considered); undefined: suppressed, the place stays. */
  place: number | undefined
}

function describe (event: StoredEvent): string | undefined {
  const e = event.event as { task_id?: string, task_type?: string, outcome?: string, message?: string, error?: { reason?: string }, status?: string }
  const what = `${e.task_type ?? 'task'} ${e.task_id ?? ''}`.trim()
  if (event.type === 'AGENT_RESULT') return e.outcome === 'failed' ? `${what} failed: ${e.error?.reason ?? 'unknown error'}${e.status === 'PENDING' ? ' (it will be retried)' : ''}` : `${what} is done.`
  if (event.type === 'task.stalled') return `${what} stopped responding; it has been ${e.status === 'FAILED' ? 'given up' : 'handed to another worker'}.`
  if (event.type === 'task.waiting') return `${what} waits for an approval: ${e.message ?? 'a call it asked to make'}`
  if (event.type === 'AGENT_UPDATE') return e.message === undefined ? undefined : `${what}: ${e.message}`
  return undefined
}

/**
 * The rules of one narration: given the conversation's events after its place `since` (read with
 * {@link narrationQuery}), which of them are recent (the task runtime's internal events), whether the
 * gate opens, and the text.
 */
export function narrationStep (conversationId: string, hint: NarrationHint | undefined, owner: string | null, since: number, events: readonly StoredEvent[]): NarrationStep {
  const recent = events.filter((e) => e.kind === 'task' && e.visibility === 'internal' && e.type !== 'NARRATION_SUPPRESSED')
  const open = (hint !== undefined && (NARRATION_HINTS as readonly string[]).includes(hint)) || recent.some((e) => GATE_TYPES.has(e.type))
  const base = { kind: 'task' as const, id: randomUUID(), source: 'agent-host/narrator', time: new Date().toISOString(), session_id: conversationId, owner_key: owner }
  if (!open) return { event: { ...base, type: 'NARRATION_SUPPRESSED', event: { hint: hint ?? null, considered: recent.length } }, place: undefined }
  const lines = recent.map(describe).filter((l): l is string => l !== undefined)
  const text = lines.length > 0 ? lines.join('\n') : hint === 'user_waiting' ? 'Still working on it.' : 'Update on your request.'
  return {
    event: { ...base, type: 'NARRATION', visibility: 'user', event: { text, hint: hint ?? null, based_on: recent.map((e) => e.seq) } },
    place: recent.at(-1)?.seq ?? since
  }
}
