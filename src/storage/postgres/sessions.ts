import type pg from 'pg'
import type { Interaction, InteractionRecord, RecallHit, SessionHandle, SessionIdentity } from '../../protocol/session.js'
import { queryWords, recallRows, toInteraction, valueText, type HostSessionStore, type InteractionRow } from '../sessions.js'
import { inTransaction } from './database.js'

const INTERACTION_COLUMNS = 'request_id, agent_id, agent_request_id, root_request_id, parent_request_id, timestamp, status, input, output'

const TOUCH = `INSERT INTO sessions (session_id, user_id, created_at, updated_at) VALUES ($1, $2, $3, $3)
  ON CONFLICT (session_id) DO UPDATE SET updated_at = excluded.updated_at`

/*
 * Recall over both search vectors (generated columns, GIN-indexed: current at every commit, nothing
 * to index later). ts_rank with normalisation 1|32: divided by 1 + log(length), as BM25 favours the
 * shorter of two equal matches, then r / (r + 1), so a score lies in 0..1 and does not depend on the
 * other hits, as on SQLite. Ties go as on SQLite (FTS5 returns equal ranks in rowid order): values
 * before interactions, the value stored last first, interactions oldest first.
 */
const RECALL = `WITH q AS (SELECT to_tsquery('simple', $2) AS q)
SELECT * FROM (
  SELECT 'interaction' AS kind, i.request_id AS ref, ts_rank(i.search, q.q, 33) AS score, i.id, NULL AS stored_seq,
    ${INTERACTION_COLUMNS.split(', ').map((c) => `i.${c}`).join(', ')}, NULL AS value
  FROM interactions i CROSS JOIN q WHERE i.session_id = $1 AND i.search @@ q.q
  UNION ALL
  SELECT 'value', v.key, ts_rank(v.search, q.q, 33), NULL, v.stored_seq,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, v.value
  FROM session_values v CROSS JOIN q WHERE v.session_id = $1 AND v.search @@ q.q
) AS hits ORDER BY score DESC, kind DESC, stored_seq DESC, id LIMIT $3`

type RecallRow = InteractionRow & { kind: 'interaction' | 'value', ref: string, score: number, value: string | null }

/** `words` as a tsquery matching any of them (each quoted; they are letters and digits only, so no query syntax gets through). */
function tsQuery (words: string[]): string {
  return words.map((w) => `'${w}'`).join(' | ')
}

/**
 * Sessions in PostgreSQL (see {@link HostSessionStore}): interactions, JSON values, and recall by
 * full-text search over `tsvector` columns, with the SQLite store's semantics. Each method taking a
 * client (`...In`) works inside the caller's transaction (the engine's); the others are a
 * transaction of their own, and so is a handle's `store()` (there is no group commit here).
 */
export class PgSessionStore implements HostSessionStore {
  readonly #pool: pg.Pool

  constructor (pool: pg.Pool) {
    this.#pool = pool
  }

  /** An agent's handle on one session: each call is a query (or, for `store()`, a transaction) of its own. */
  open (sessionId: string, identity: SessionIdentity): SessionHandle {
    const pool = this.#pool
    return {
      session_id: sessionId,
      identity,
      history: async (limit = 10, offset = 0) => await this.history(sessionId, limit, offset),
      async recall (query, limit = 5, threshold = 0) {
        const words = queryWords(String(query))
        if (words.length === 0) return []
        const { rows } = await pool.query<RecallRow>(RECALL, [sessionId, tsQuery(words), recallRows(limit)])
        const hits: RecallHit[] = []
        for (const row of rows) {
          if (row.score < threshold) continue
          const content = row.kind === 'value' ? { key: row.ref, value: JSON.parse(row.value as string) as unknown } : toInteraction(row)
          hits.push({ kind: row.kind, ref: row.ref, score: row.score, content: content as unknown as Record<string, unknown> })
          if (hits.length >= limit) break
        }
        return hits
      },
      async store (key, value) {
        const text = valueText(String(key), value)
        await inTransaction(pool, async (client) => {
          const now = new Date().toISOString()
          await client.query(TOUCH, [sessionId, identity.user_id, now])
          await client.query(`INSERT INTO session_values (session_id, key, value, updated_at) VALUES ($1, $2, $3, $4)
            ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, stored_seq = DEFAULT`, [sessionId, String(key), text, now])
        })
      },
      async get<T>(key: string, fallback?: T) {
        const { rows } = await pool.query<{ value: string }>('SELECT value FROM session_values WHERE session_id = $1 AND key = $2', [sessionId, key])
        const row = rows[0]
        return row === undefined ? fallback : JSON.parse(row.value) as T
      }
    }
  }

  /** The session's interactions, newest last, skipping the `offset` newest. */
  async history (sessionId: string, limit = 10, offset = 0): Promise<Interaction[]> {
    const { rows } = await this.#pool.query<InteractionRow>(`SELECT ${INTERACTION_COLUMNS} FROM interactions WHERE session_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3`,
      [sessionId, Math.max(0, limit), Math.max(0, offset)])
    return rows.reverse().map(toInteraction)
  }

  /** How many interactions the session has. */
  async count (sessionId: string): Promise<number> {
    const { rows } = await this.#pool.query<{ n: number }>('SELECT count(*) AS n FROM interactions WHERE session_id = $1', [sessionId])
    return (rows[0] as { n: number }).n
  }

  /** Append one finished interaction to its session's history, in a transaction of its own. */
  async record (record: InteractionRecord): Promise<void> {
    await inTransaction(this.#pool, async (client) => { await this.recordIn(client, record) })
  }

  /** {@link record} (the contract's name for the engine's call). */
  async recordNow (record: InteractionRecord): Promise<void> {
    await this.record(record)
  }

  /** Record one finished interaction inside the caller's transaction (it is searchable once that commits). */
  async recordIn (client: pg.ClientBase, record: InteractionRecord): Promise<void> {
    await client.query(TOUCH, [record.session_id, record.user_id, new Date().toISOString()])
    await client.query(`INSERT INTO interactions (${INTERACTION_COLUMNS}, session_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, [
      record.request_id, record.agent_id, record.agent_request_id, record.root_request_id, record.parent_request_id ?? null,
      record.timestamp, record.status, JSON.stringify(record.input), JSON.stringify(record.output), record.session_id
    ])
  }

  /** Remove everything of one session: history and values (their search vectors are theirs). Returns whether it existed. */
  async erase (sessionId: string): Promise<boolean> {
    return await this.eraseIn(this.#pool, sessionId)
  }

  /**
   * {@link erase} inside the caller's transaction: with `PgEventStore.eraseSessionIn` (and the run
   * store's) in one transaction, a session goes whole or not at all.
   */
  async eraseIn (client: pg.ClientBase | pg.Pool, sessionId: string): Promise<boolean> {
    // interactions and values go with it (ON DELETE CASCADE), in this one statement
    return (await client.query('DELETE FROM sessions WHERE session_id = $1', [sessionId])).rowCount === 1
  }

  /**
   * The key a session belongs to: made for `keyId` when it does not exist yet.
   * @returns the owning key's id (null for a session made before keys were recorded)
   */
  async claim (sessionId: string, userId: string, keyId: string): Promise<string | null> {
    return await this.claimIn(this.#pool, sessionId, userId, keyId)
  }

  /**
   * {@link claim} inside the caller's transaction (READ COMMITTED: when another instance made the
   * session meanwhile, the insert waits for its commit and the read that follows sees its key).
   */
  async claimIn (client: pg.ClientBase | pg.Pool, sessionId: string, userId: string, keyId: string): Promise<string | null> {
    const now = new Date().toISOString()
    await client.query('INSERT INTO sessions (session_id, user_id, created_at, updated_at, key_id) VALUES ($1, $2, $3, $3, $4) ON CONFLICT (session_id) DO NOTHING',
      [sessionId, userId, now, keyId])
    return (await this.#keyOf(client, sessionId)) ?? null
  }

  /** The key a session belongs to; undefined when there is no such session, null when it was made before keys were recorded. */
  async keyOf (sessionId: string): Promise<string | null | undefined> {
    return await this.#keyOf(this.#pool, sessionId)
  }

  async #keyOf (client: pg.ClientBase | pg.Pool, sessionId: string): Promise<string | null | undefined> {
    const { rows } = await client.query<{ key_id: string | null }>('SELECT key_id FROM sessions WHERE session_id = $1', [sessionId])
    return rows[0]?.key_id
  }

  /** The owner of a session, if it exists. */
  async owner (sessionId: string): Promise<string | undefined> {
    const { rows } = await this.#pool.query<{ user_id: string }>('SELECT user_id FROM sessions WHERE session_id = $1', [sessionId])
    return rows[0]?.user_id
  }

  /** The pool is the caller's: nothing to close. */
  async close (): Promise<void> {}
}
