/**
 * The session contract (seed 000): what an agent's `session` argument offers, and how the host
 * stores sessions. Types only; the SQLite store in `src/storage/sqlite/sessions.ts` and the PostgreSQL one in `src/storage/postgres/sessions.ts` implement it.
 */

/** A JSON object. */
type JsonObject = Record<string, unknown>

/** One recorded exchange of a session (newest last in `history()`). */
export interface Interaction {
  /** The envelope's `request_id` (the HTTP transaction). */
  request_id: string
  /** The agent that answered (manifest id). */
  agent_id: string
  /** `payload.request_id` as the agent saw it, and its lineage. */
  agent_request_id: string
  root_request_id: string
  parent_request_id?: string
  timestamp: string
  /** How the run ended: `done`, `aborted`, `cancelled`, `shutdown` or `interrupted`. */
  status: string
  /** The agent's arguments (`payload.payload`). */
  input: JsonObject
  /** The `result()` object, or the transcript `{ text, events, streams, errors }`. */
  output: JsonObject
}

/** A search hit of `recall()`. */
export interface RecallHit {
  /** What matched: an interaction or a stored value. */
  kind: 'interaction' | 'value'
  /** The interaction's request id, or the value's key. */
  ref: string
  /** Relevance in 0..1 (1 is best). */
  score: number
  content: JsonObject
}

/** Who the session belongs to. */
export interface SessionIdentity {
  user_id: string
  email?: string
  tier: string
  locale: string
}

/**
 * Active memory for one session (seed 000): history, search and key/value storage.
 */
export interface SessionHandle {
  readonly session_id: string
  readonly identity: SessionIdentity
  /** The session's interactions, newest last, skipping the `offset` newest. */
  history(limit?: number, offset?: number): Promise<Interaction[]>
  /** Interactions and values whose text matches `query`, best first. */
  recall(query: string, limit?: number, threshold?: number): Promise<RecallHit[]>
  /** Store a JSON value under `key` for this session. */
  store(key: string, value: unknown): Promise<void>
  /** Read a stored value, or `fallback` when there is none. */
  get<T = unknown>(key: string, fallback?: T): Promise<T | undefined>
}

/** An interaction as the host records it. */
export interface InteractionRecord extends Interaction {
  session_id: string
  /** The user the session belongs to (`context.user.user_id`). */
  user_id: string
}

/**
 * Where sessions live. The host opens a {@link SessionHandle} for every `/v1/assist` call and records
 * the interaction when the run ends (the SQLite store in `src/storage/sqlite/sessions.ts`).
 */
export interface SessionStore {
  open(sessionId: string, identity: SessionIdentity): SessionHandle
  /** Append one finished interaction to its session's history (once per request id). */
  record(record: InteractionRecord): Promise<void>
  close(): Promise<void>
}
