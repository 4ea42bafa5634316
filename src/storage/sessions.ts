import { AH_ERR_SESSION_VALUE_INVALID } from '../errors.js'
import type { Interaction, InteractionRecord, SessionStore } from '../protocol/session.js'
import type { Awaitable } from './awaitable.js'

export type JsonObject = Record<string, unknown>

/** The largest JSON value `store()` accepts, in bytes of its JSON text. */
export const MAX_VALUE_BYTES = 1024 * 1024

/**
 * Sessions as the host uses them: what agents get ({@link SessionStore}) and what the engine and
 * routes call. {@link SqliteSessionStore} answers at once; the PostgreSQL store
 * (`postgres/sessions.ts`) answers with promises: callers `await` every call. The SQLite store's
 * `indexPending` is its own (its search index is filled in batches; PostgreSQL's is a generated
 * column, current at every commit).
 */
export interface HostSessionStore extends SessionStore {
  /** The session's interactions, newest last, skipping the `offset` newest. */
  history(sessionId: string, limit?: number, offset?: number): Awaitable<Interaction[]>
  /** How many interactions the session has. */
  count(sessionId: string): Awaitable<number>
  /** {@link SessionStore.record}, in a transaction of its own (SQLite: at once, inside the caller's transaction if there is one). */
  recordNow(record: InteractionRecord): Awaitable<void>
  /** Remove everything of one session: history, values and their search entries. Returns whether it existed. */
  erase(sessionId: string): Awaitable<boolean>
  /**
   * The key a session belongs to: made for `keyId` when it does not exist yet.
   * @returns the owning key's id (null for a session made before keys were recorded)
   */
  claim(sessionId: string, userId: string, keyId: string): Awaitable<string | null>
  /** The key a session belongs to; undefined when there is no such session, null when it was made before keys were recorded. */
  keyOf(sessionId: string): Awaitable<string | null | undefined>
  /** The owner (user id) of a session, if it exists. */
  owner(sessionId: string): Awaitable<string | undefined>
}

/** An interaction as both stores keep it (input and output as JSON text). */
export interface InteractionRow {
  request_id: string
  agent_id: string
  agent_request_id: string
  root_request_id: string
  parent_request_id: string | null
  timestamp: string
  status: string
  input: string
  output: string
}

/** A stored interaction as the contract gives it. */
export function toInteraction (row: InteractionRow): Interaction {
  const interaction: Interaction = {
    request_id: row.request_id,
    agent_id: row.agent_id,
    agent_request_id: row.agent_request_id,
    root_request_id: row.root_request_id,
    timestamp: row.timestamp,
    status: row.status,
    input: JSON.parse(row.input) as JsonObject,
    output: JSON.parse(row.output) as JsonObject
  }
  if (row.parent_request_id !== null) interaction.parent_request_id = row.parent_request_id
  return interaction
}

/**
 * The JSON text `store()` keeps for `value`.
 * @throws `AH_ERR_SESSION_VALUE_INVALID` when `value` is not JSON or its text is over {@link MAX_VALUE_BYTES}
 */
export function valueText (key: string, value: unknown): string {
  const text = JSON.stringify(value)
  if (text === undefined) throw new AH_ERR_SESSION_VALUE_INVALID(key, 'a JSON value', 0)
  if (Buffer.byteLength(text) > MAX_VALUE_BYTES) throw new AH_ERR_SESSION_VALUE_INVALID(key, `at most ${MAX_VALUE_BYTES} bytes of JSON`, Buffer.byteLength(text))
  return text
}

/** How many search rows a recall of `limit` hits reads: some may be gone (erased) or under the threshold. */
export function recallRows (limit: number): number {
  return Math.max(1, Math.min(limit, 100)) * 4
}

/** Interactions added to the search index in one go (see {@link SqliteSessionStore.indexPending}). */
export const INDEX_BATCH = 256

/** The words a recall looks for: runs of letters and digits, lower-cased, each once. */
export function queryWords (query: string): string[] {
  return [...new Set(query.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [])]
}

/** Words of `query` as an FTS5 expression matching any of them (each quoted: no query syntax leaks through). */
export function ftsQuery (query: string): string | undefined {
  const words = queryWords(query)
  if (words.length === 0) return undefined
  return words.map((w) => `"${w}"`).join(' OR ')
}

/**
 * BM25 gives 0 or less (more negative is better). We report `s / (1 + s)` with `s = -bm25`: it
 * grows with relevance, lies in 0..1, and does not depend on the other hits.
 */
export function normaliseRank (bm25: number): number {
  const s = Math.max(0, -bm25)
  return s / (1 + s)
}
