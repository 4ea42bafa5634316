import type pg from 'pg'
import type { Interaction, InteractionRecord, RecallHit, SessionHandle, SessionIdentity } from '../../protocol/session.js'
import { queryWords, recallRows, toInteraction, valueText, type HostSessionStore, type InteractionRow } from '../sessions.js'
import { PgBatch, type PgGroupWriter } from './group-writer.js'
import { PgReadBatch } from './read-batch.js'

const INTERACTION_COLUMNS = 'request_id, agent_id, agent_request_id, root_request_id, parent_request_id, timestamp, status, input, output'

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

/**
 * The CTE `touched` that makes or touches the sessions of the relation `source` (its columns
 * `session_id`, `user_id` and an order `n`) at `at`, each once (ON CONFLICT DO UPDATE may not touch a
 * row twice in one statement), returning their ids: to compose into a statement.
 */
function touchingCte (source: string, at: string): string {
  return `touched AS (
  INSERT INTO sessions (session_id, user_id, created_at, updated_at)
  SELECT DISTINCT ON (session_id) session_id, user_id, ${at}, ${at} FROM ${source} ORDER BY session_id, n
  ON CONFLICT (session_id) DO UPDATE SET updated_at = excluded.updated_at
  RETURNING session_id
)`
}

/**
 * The CTE `claimed` that claims the sessions of the rows of `source` with a `claim_key` (its
 * columns `session_id`, `claim_user`, `claim_key` and an order `n`) at `at`, returning each one's
 * key now: a session that exists keeps its key (ON CONFLICT DO UPDATE returns the row as committed,
 * waiting for a concurrent claim's commit, where DO NOTHING would return nothing to compare); a new
 * one gets the key of its first claim in `n` order.
 */
export function claimingCte (source: string, at: string): string {
  return `claimed AS (
  INSERT INTO sessions (session_id, user_id, created_at, updated_at, key_id)
  SELECT DISTINCT ON (session_id) session_id, claim_user, ${at}, ${at}, claim_key FROM ${source} WHERE claim_key IS NOT NULL ORDER BY session_id, n
  ON CONFLICT (session_id) DO UPDATE SET updated_at = excluded.updated_at
  RETURNING session_id, key_id
)`
}

/*
 * Values stored in one statement: the sessions touched (each once), then the values upserted (the
 * last of one key in the batch wins), in the order stored, so that `stored_seq` says which came last.
 */
const STORE_MANY = `WITH batch AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS b(session_id, user_id, key, value, n)
), ${touchingCte('batch', '$5')}
INSERT INTO session_values (session_id, key, value, updated_at)
SELECT session_id, key, value, $5 FROM (
  SELECT DISTINCT ON (b.session_id, b.key) b.session_id, b.key, b.value, b.n FROM batch b JOIN touched t ON t.session_id = b.session_id ORDER BY b.session_id, b.key, b.n DESC
) AS last ORDER BY n
ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, stored_seq = DEFAULT`

/** A session value's identity in a read batch. */
const valueId = (sessionId: string, key: string): string => JSON.stringify([sessionId, key])

interface StoredValue { sessionId: string, userId: string, key: string, text: string }

async function storeManyIn (client: pg.ClientBase, values: readonly StoredValue[]): Promise<void[]> {
  await client.query({
    name: 'ah_session_store_many',
    text: STORE_MANY,
    values: [values.map((v) => v.sessionId), values.map((v) => v.userId), values.map((v) => v.key), values.map((v) => v.text), new Date().toISOString()]
  })
  return values.map(() => undefined)
}

/** The arrays of {@link interactionArrays}, as a row source's columns (the SQL types, in that order). */
export const INTERACTION_ARRAYS = {
  types: 'text[], text[], text[], text[], text[], text[], text[], text[], text[], text[], text[]',
  names: `${INTERACTION_COLUMNS}, session_id, user_id`
}

/** `records` as the parallel arrays a statement unnests (see {@link INTERACTION_ARRAYS}). */
export function interactionArrays (records: readonly InteractionRecord[]): Array<Array<string | null>> {
  const column = (pick: (r: InteractionRecord) => string | null): Array<string | null> => records.map(pick)
  return [
    column((r) => r.request_id), column((r) => r.agent_id), column((r) => r.agent_request_id), column((r) => r.root_request_id),
    column((r) => r.parent_request_id ?? null), column((r) => r.timestamp), column((r) => r.status),
    column((r) => JSON.stringify(r.input)), column((r) => JSON.stringify(r.output)), column((r) => r.session_id), column((r) => r.user_id)
  ]
}

/**
 * The CTEs that record the interactions of the relation `source` (its columns: those of
 * {@link INTERACTION_ARRAYS} and an order `n`), to compose into a statement: their sessions touched
 * at `at` (each once: ON CONFLICT DO UPDATE may not touch a row twice in one statement), then the
 * rows in the order of `n` (their ids, and so the history's order, follow it).
 */
export function recordingCtes (source: string, at: string, searched: string): string {
  return `${touchingCte(source, at)}, recorded AS (
  INSERT INTO interactions (${INTERACTION_COLUMNS}, session_id, search)
  SELECT ${INTERACTION_COLUMNS.split(', ').map((c) => `s.${c}`).join(', ')}, s.session_id,
    CASE WHEN ${searched}::boolean THEN ${INTERACTION_SEARCH_VECTOR} END
  FROM ${source} s JOIN touched t ON t.session_id = s.session_id ORDER BY s.n
  RETURNING id
)`
}

/** An interaction's search vector (a tsvector holds at most 1 MiB of words: the first 64 Ki characters of each side are searched). */
const INTERACTION_SEARCH_VECTOR = "to_tsvector('simple', left(s.input, 65536) || ' ' || left(s.output, 65536))"

/* A turn's interactions in one statement. */
const RECORD_MANY = `WITH batch AS (
  SELECT * FROM unnest(${INTERACTION_ARRAYS.types.split(', ').map((type, i) => `$${i + 1}::${type}`).join(', ')})
    WITH ORDINALITY AS b(${INTERACTION_ARRAYS.names}, n)
), ${recordingCtes('batch', '$12', '$13')}
SELECT count(*) FROM recorded`

/* One session claimed for a key (see claimingCte). */
const CLAIM = `WITH c AS (SELECT $1::text AS session_id, $2::text AS claim_user, $3::text AS claim_key, 1 AS n), ${claimingCte('c', '$4')}
SELECT key_id FROM claimed`

type RecallRow = InteractionRow & { kind: 'interaction' | 'value', ref: string, score: number, value: string | null }

/** `words` as a tsquery matching any of them (each quoted; they are letters and digits only, so no query syntax gets through). */
function tsQuery (words: string[]): string {
  return words.map((w) => `'${w}'`).join(' | ')
}

/**
 * Sessions in PostgreSQL (see {@link HostSessionStore}): interactions, JSON values, and recall by
 * full-text search over `tsvector` columns, with the SQLite store's semantics. Each method taking a
 * client (`...In`) works inside the caller's transaction (the engine's); the others are a
 * transaction of their own. A handle's `store()` joins the group writer's transaction of its turn,
 * given one; its `get()` joins the turn's other reads in one query.
 */
export class PgSessionStore implements HostSessionStore {
  readonly #pool: pg.Pool
  readonly #store: (value: StoredValue) => Promise<void>
  /** Values read by handles: one query for a turn's reads. */
  readonly #values: PgReadBatch<{ sessionId: string, key: string }, string>

  /** Whether interactions get a search vector (SESSION_SEARCH=all), or only stored values do. */
  readonly searchInteractions: boolean

  /**
   * @param writer a handle's `store()` joins its transactions (group commit: the values stored during
   *   one turn are one statement, committed with the host's other writes of that turn); without one
   *   each store commits alone
   * @param options `searchInteractions` (default true): false (SESSION_SEARCH=values) records
   *   interactions without a search vector (they stay unsearchable if it is turned on later)
   */
  constructor (pool: pg.Pool, writer?: PgGroupWriter, options: { searchInteractions?: boolean } = {}) {
    this.#pool = pool
    this.searchInteractions = options.searchInteractions ?? true
    this.#values = new PgReadBatch(async (keys) => {
      const { rows } = await pool.query<{ session_id: string, key: string, value: string }>({
        name: 'ah_session_values_get_many',
        text: 'SELECT v.session_id, v.key, v.value FROM session_values v JOIN unnest($1::text[], $2::text[]) AS k(session_id, key) ON v.session_id = k.session_id AND v.key = k.key',
        values: [keys.map((k) => k.sessionId), keys.map((k) => k.key)]
      })
      return new Map(rows.map((r) => [valueId(r.session_id, r.key), r.value]))
    }, (k) => valueId(k.sessionId, k.key))
    const batch = writer === undefined ? undefined : new PgBatch(writer, storeManyIn)
    this.#store = batch === undefined
      ? async (value) => { await storeManyIn(pool as unknown as pg.ClientBase, [value]) }
      : async (value) => { await batch.add(value) }
  }

  /** An agent's handle on one session: each call is a query of its own; `store()` is committed (with the turn's other writes, given a group writer) before it resolves. */
  open (sessionId: string, identity: SessionIdentity): SessionHandle {
    const pool = this.#pool
    const store = this.#store
    const values = this.#values
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
        await store({ sessionId, userId: identity.user_id, key: String(key), text })
      },
      async get<T>(key: string, fallback?: T) {
        const value = await values.load({ sessionId, key: String(key) })
        return value === undefined ? fallback : JSON.parse(value) as T
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
    await this.recordManyIn(this.#pool, [record])
  }

  /** {@link record} (the contract's name for the engine's call). */
  async recordNow (record: InteractionRecord): Promise<void> {
    await this.record(record)
  }

  /** Record one finished interaction inside the caller's transaction (it is searchable once that commits). */
  async recordIn (client: pg.ClientBase, record: InteractionRecord): Promise<void> {
    await this.recordManyIn(client, [record])
  }

  /** Record finished interactions in one statement inside the caller's transaction, in this order. */
  async recordManyIn (client: pg.ClientBase | pg.Pool, records: readonly InteractionRecord[]): Promise<void> {
    if (records.length === 0) return
    await client.query({ name: 'ah_interactions_record_many', text: RECORD_MANY, values: [...interactionArrays(records), new Date().toISOString(), this.searchInteractions] })
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
   * session meanwhile, the insert waits for its commit and returns its key).
   */
  async claimIn (client: pg.ClientBase | pg.Pool, sessionId: string, userId: string, keyId: string): Promise<string | null> {
    const { rows } = await client.query<{ key_id: string | null }>({ name: 'ah_session_claim', text: CLAIM, values: [sessionId, userId, keyId, new Date().toISOString()] })
    return rows[0]?.key_id ?? null
  }

  /** The key a session belongs to; undefined when there is no such session, null when it was made before keys were recorded. */
  async keyOf (sessionId: string): Promise<string | null | undefined> {
    const { rows } = await this.#pool.query<{ key_id: string | null }>('SELECT key_id FROM sessions WHERE session_id = $1', [sessionId])
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
