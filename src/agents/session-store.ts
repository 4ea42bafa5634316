import type { Interaction, SessionHandle, SessionIdentity } from './contract.js'

/** An interaction as the host records it. */
export interface InteractionRecord extends Interaction {
  session_id: string
  /** The user the session belongs to (`context.user.user_id`). */
  user_id: string
}

/**
 * Where sessions live. The host opens a {@link SessionHandle} for every `/v1/assist` call and records
 * the interaction when the run ends (the SQLite store in `src/storage/sessions.ts`).
 */
export interface SessionStore {
  open(sessionId: string, identity: SessionIdentity): SessionHandle
  /** Append one finished interaction to its session's history (once per request id). */
  record(record: InteractionRecord): Promise<void>
  close(): Promise<void>
}
