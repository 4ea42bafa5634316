import type { Db } from './database.js'
import type { SqliteEventStore } from './events.js'
import { conversationsToNarrate, narrationQuery, narrationStep, TASK_RESULT_TYPES, type NarrationHint, type TaskNarrator, type TaskResultRow } from '../tasks/narration.js'

/**
 * The narrator on SQLite (see {@link TaskNarrator}): each step is one immediate transaction, so
 * narrators in several processes on one DATA_DIR take turns.
 */
export class SqliteNarrator implements TaskNarrator {
  readonly #events: SqliteEventStore
  readonly #db: Db
  readonly #conversationSeq
  readonly #setConversationSeq
  readonly #followed
  readonly #setFollowed
  readonly #results

  constructor (events: SqliteEventStore, db: Db) {
    this.#events = events
    this.#db = db
    this.#conversationSeq = db.prepare('SELECT seq FROM narrations WHERE session_id = ?').pluck()
    this.#setConversationSeq = db.prepare('INSERT INTO narrations (session_id, seq) VALUES (?, ?) ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq')
    this.#followed = db.prepare('SELECT seq FROM narrator_state WHERE id = 1').pluck()
    this.#setFollowed = db.prepare('UPDATE narrator_state SET seq = ? WHERE id = 1')
    this.#results = db.prepare(`SELECT seq, session_id, owner_key, type, body FROM events
      WHERE seq > ? AND kind = 'task' AND type IN (${TASK_RESULT_TYPES.map(() => '?').join(', ')}) AND session_id IS NOT NULL ORDER BY seq LIMIT ?`)
  }

  narrate (conversationId: string, hint?: NarrationHint, owner: string | null = null): number | undefined {
    return this.#db.transaction(() => this.#narrate(conversationId, hint, owner)).immediate()
  }

  follow (limit = 500): number {
    return this.#db.transaction(() => {
      const rows = this.#results.all(this.#followed.get(), ...TASK_RESULT_TYPES, limit) as TaskResultRow[]
      if (rows.length === 0) return 0
      let spoken = 0
      for (const { conversation, owner, hint } of conversationsToNarrate(rows)) if (this.#narrate(conversation, hint, owner) !== undefined) spoken++
      this.#setFollowed.run((rows.at(-1) as TaskResultRow).seq)
      return spoken
    }).immediate()
  }

  #narrate (conversationId: string, hint: NarrationHint | undefined, owner: string | null): number | undefined {
    // the place of an owner's conversation is kept apart from another's of the same id (the host's own under the bare id, as before owners)
    const place = owner === null ? conversationId : `${owner}\u0000${conversationId}`
    const since = (this.#conversationSeq.get(place) as number | undefined) ?? 0
    const step = narrationStep(conversationId, hint, owner, since, this.#events.list(narrationQuery(conversationId, owner, since)))
    if (step.place === undefined) {
      this.#events.append(step.event, 'narrator')
      return undefined
    }
    this.#setConversationSeq.run(place, step.place)
    return this.#events.append(step.event, 'narrator')
  }
}
