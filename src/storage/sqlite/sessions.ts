import type { Interaction, InteractionRecord, RecallHit, SessionHandle, SessionIdentity } from '../../protocol/session.js'
import type { SqliteGroupWriter } from './group-writer.js'
import type { Db } from './database.js'
import { type HostSessionStore, INDEX_BATCH, type InteractionRow, ftsQuery, normaliseRank, recallRows, toInteraction, valueText, type JsonObject } from '../sessions.js'

/**
 * Sessions in SQLite: interactions (history), JSON values, and an FTS5 index over both for
 * `recall()`. Everything survives restarts; {@link erase} removes a session completely.
 */
export class SqliteSessionStore implements HostSessionStore {
  readonly #db: Db
  readonly #touch
  readonly #history
  readonly #insertInteraction
  readonly #getValue
  readonly #putValue
  readonly #ftsDelete
  readonly #pendingValues
  readonly #valueIndexed
  readonly #ftsInsert
  readonly #recall
  readonly #nextValueRowid
  readonly #indexedTo
  readonly #setIndexedTo
  readonly #interactionById
  readonly #claim
  readonly #keyOf
  readonly #unindexed

  /** Where agents' `store()` and a recall's pending index work go: the engine's group commit. */
  readonly #writer: SqliteGroupWriter

  /** Whether interactions join the search index (SESSION_SEARCH=all), or only stored values do. */
  readonly searchInteractions: boolean

  /**
   * @param writer the group writer (an agent's `store()` resolves once its commit is durable)
   * @param options `searchInteractions` (default true): false (SESSION_SEARCH=values) keeps interactions
   *   out of the search index; turned on again, the next batches index those recorded meanwhile
   */
  constructor (db: Db, writer: SqliteGroupWriter, options: { searchInteractions?: boolean } = {}) {
    this.#db = db
    this.#writer = writer
    this.searchInteractions = options.searchInteractions ?? true
    this.#recordAlone = db.transaction(this.#record)
    this.#indexPending = db.transaction((limit: number): number => {
      const rows = !this.searchInteractions ? [] : this.#unindexed.all(this.#indexedTo.get(), limit) as Array<{ id: number, request_id: string, session_id: string, input: string, output: string }>
      for (const row of rows) this.#ftsInsert.run(row.id, `${row.input} ${row.output}`, row.session_id, 'interaction', row.request_id)
      if (rows.length > 0) this.#setIndexedTo.run((rows.at(-1) as { id: number }).id)
      const values = this.#pendingValues.all(limit) as Array<{ session_id: string, key: string, value: string, fts_rowid: number | null }>
      for (const value of values) {
        if (value.fts_rowid !== null) this.#ftsDelete.run(value.fts_rowid)
        const rowid = this.#nextValueRowid.get() as number
        this.#ftsInsert.run(rowid, `${value.key} ${value.value}`, value.session_id, 'value', value.key)
        this.#valueIndexed.run(rowid, value.session_id, value.key)
      }
      return Math.max(rows.length, values.length)
    })
    this.#touch = db.prepare(`INSERT INTO sessions (session_id, user_id, created_at, updated_at) VALUES (@session_id, @user_id, @now, @now)
      ON CONFLICT (session_id) DO UPDATE SET updated_at = @now`)
    this.#history = db.prepare('SELECT * FROM interactions WHERE session_id = ? ORDER BY id DESC LIMIT ? OFFSET ?')
    this.#insertInteraction = db.prepare(`INSERT INTO interactions (request_id, session_id, agent_id, agent_request_id, root_request_id,
      parent_request_id, timestamp, status, input, output)
      VALUES (@request_id, @session_id, @agent_id, @agent_request_id, @root_request_id, @parent_request_id, @timestamp, @status, @input, @output)`)
    this.#getValue = db.prepare('SELECT value FROM session_values WHERE session_id = ? AND key = ?')
    this.#putValue = db.prepare(`INSERT INTO session_values (session_id, key, value, updated_at, pending) VALUES (?, ?, ?, ?, 1)
      ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, pending = 1`)
    this.#pendingValues = db.prepare('SELECT session_id, key, value, fts_rowid FROM session_values WHERE pending = 1 LIMIT ?')
    this.#ftsDelete = db.prepare('DELETE FROM memory_fts WHERE rowid = ?')
    this.#valueIndexed = db.prepare('UPDATE session_values SET fts_rowid = ?, pending = 0 WHERE session_id = ? AND key = ?')
    this.#ftsInsert = db.prepare('INSERT INTO memory_fts (rowid, content, session_id, kind, ref) VALUES (?, ?, ?, ?, ?)')
    this.#nextValueRowid = db.prepare('UPDATE search_index SET next_value_rowid = next_value_rowid - 1 WHERE id = 1 RETURNING next_value_rowid + 1 AS rowid').pluck()
    this.#indexedTo = db.prepare('SELECT indexed_to FROM search_index WHERE id = 1').pluck()
    this.#setIndexedTo = db.prepare('UPDATE search_index SET indexed_to = ? WHERE id = 1')
    this.#claim = db.prepare('INSERT INTO sessions (session_id, user_id, created_at, updated_at, key_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING')
    this.#keyOf = db.prepare('SELECT key_id FROM sessions WHERE session_id = ?')
    this.#unindexed = db.prepare('SELECT id, request_id, session_id, input, output FROM interactions WHERE id > ? ORDER BY id LIMIT ?')
    this.#interactionById = db.prepare('SELECT * FROM interactions WHERE id = ?')
    this.#recall = db.prepare(`SELECT rowid, kind, ref, bm25(memory_fts) AS rank FROM memory_fts
      WHERE memory_fts MATCH ? AND session_id = ? ORDER BY rank LIMIT ?`)
  }

  #ensure (sessionId: string, userId: string): void {
    this.#touch.run({ session_id: sessionId, user_id: userId, now: new Date().toISOString() })
  }

  open (sessionId: string, identity: SessionIdentity): SessionHandle {
    const store = this
    return {
      session_id: sessionId,
      identity,
      async history (limit = 10, offset = 0) {
        return store.history(sessionId, limit, offset)
      },
      async recall (query, limit = 5, threshold = 0) {
        const match = ftsQuery(String(query))
        if (match === undefined) return []
        // what was recorded since the last batch is searchable now, not after it
        await store.#writer.write(() => { while (store.indexPending() === INDEX_BATCH); })
        const rows = store.#recall.all(match, sessionId, recallRows(limit)) as Array<{ rowid: number, kind: 'interaction' | 'value', ref: string, rank: number }>
        const hits: RecallHit[] = []
        for (const row of rows) {
          const score = normaliseRank(row.rank)
          if (score < threshold) continue
          const content = row.kind === 'value'
            ? { key: row.ref, value: store.#readValue(sessionId, row.ref) }
            : store.#interaction(row.rowid)
          if (content === undefined) continue
          hits.push({ kind: row.kind, ref: row.ref, score, content: content as JsonObject })
          if (hits.length >= limit) break
        }
        return hits
      },
      async store (key, value) {
        const text = valueText(String(key), value)
        await store.#writer.write(() => {
          store.#ensure(sessionId, identity.user_id)
          store.#putValue.run(sessionId, String(key), text, new Date().toISOString())
        })
      },
      async get<T>(key: string, fallback?: T) {
        const value = store.#readValue(sessionId, key)
        return value === undefined ? fallback : value as T
      }
    }
  }

  #readValue (sessionId: string, key: string): unknown {
    const row = this.#getValue.get(sessionId, key) as { value: string } | undefined
    return row === undefined ? undefined : JSON.parse(row.value)
  }

  #interaction (id: number): Interaction | undefined {
    const row = this.#interactionById.get(id) as InteractionRow | undefined
    return row === undefined ? undefined : toInteraction(row)
  }

  /** The session's interactions, newest last, skipping the `offset` newest. */
  history (sessionId: string, limit = 10, offset = 0): Interaction[] {
    const rows = this.#history.all(sessionId, Math.max(0, limit), Math.max(0, offset)) as InteractionRow[]
    return rows.reverse().map(toInteraction)
  }

  /** How many interactions the session has. */
  count (sessionId: string): number {
    return (this.#db.prepare('SELECT count(*) AS n FROM interactions WHERE session_id = ?').get(sessionId) as { n: number }).n
  }

  async record (record: InteractionRecord): Promise<void> {
    this.recordNow(record)
  }

  /**
   * {@link record}, synchronously (to join a caller's transaction). The interaction joins the search
   * index in the next batch ({@link indexPending}), or at once when a recall needs it.
   */
  recordNow (record: InteractionRecord): void {
    if (this.#db.inTransaction) this.#record(record)
    else this.#recordAlone(record)
  }

  readonly #record = (record: InteractionRecord): void => {
    this.#ensure(record.session_id, record.user_id)
    this.#insertInteraction.run({ ...record, parent_request_id: record.parent_request_id ?? null, input: JSON.stringify(record.input), output: JSON.stringify(record.output) })
  }

  readonly #recordAlone: (record: InteractionRecord) => void

  /**
   * Add up to `limit` interactions that are not in the search index yet (those above its mark:
   * interaction ids are never reused), oldest first, and up to `limit` values stored since they were
   * last indexed, in the caller's transaction (or one of their own). The index keeps no copy of the
   * text. Batched, it takes one segment per batch instead of one per commit, off the request path
   * (`bench/assist.js --compare` against indexing in each run's own commit: 1.22× requests a second,
   * 0.79× CPU per request), and a key stored on every request is indexed once a batch.
   * @returns how many interactions or values (the larger) were indexed (`limit` means there may be more)
   */
  indexPending (limit = INDEX_BATCH): number {
    return this.#indexPending(limit)
  }

  readonly #indexPending: (limit: number) => number

  /** Remove everything of one session: history, values and their search entries. Returns whether it existed. */
  erase (sessionId: string): boolean {
    return this.#db.transaction(() => {
      this.#db.prepare(`DELETE FROM memory_fts WHERE rowid IN (SELECT id FROM interactions WHERE session_id = @id
        UNION ALL SELECT fts_rowid FROM session_values WHERE session_id = @id)`).run({ id: sessionId })
      return this.#db.prepare('DELETE FROM sessions WHERE session_id = ?').run(sessionId).changes > 0
    })()
  }

  /**
   * The key a session belongs to: made for `keyId` when it does not exist yet.
   * @returns the owning key's id (null for a session made before keys were recorded)
   */
  claim (sessionId: string, userId: string, keyId: string): string | null {
    const now = new Date().toISOString()
    this.#claim.run(sessionId, userId, now, now, keyId)
    return this.keyOf(sessionId) ?? null
  }

  /** The key a session belongs to; undefined when there is no such session, null when it was made before keys were recorded. */
  keyOf (sessionId: string): string | null | undefined {
    return (this.#keyOf.get(sessionId) as { key_id: string | null } | undefined)?.key_id
  }

  /** The owner of a session, if it exists. */
  owner (sessionId: string): string | undefined {
    return (this.#db.prepare('SELECT user_id FROM sessions WHERE session_id = ?').get(sessionId) as { user_id: string } | undefined)?.user_id
  }

  async close (): Promise<void> {}
}
