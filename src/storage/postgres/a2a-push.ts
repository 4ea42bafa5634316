import type pg from 'pg'
import type { A2APushStore, ClaimedPushConfig, NewPushConfig, PushConfigChanges, PushConfigRecord, PushDeliveryRow, PushState } from '../a2a-push.js'
import type { AuditInput } from '../audit.js'
import { inTransaction, PG_LOCKS } from './database.js'
import { viewerSql, type Viewer } from '../tenants.js'

/** A pool, or one client (inside a transaction or not): what a single statement runs on. */
type Queryable = pg.Pool | pg.ClientBase

/** Rows a statement changed (`rowCount` is null only for commands that change none). */
const changes = (result: pg.QueryResult): number => Number(result.rowCount)

/** Soonest due first, then oldest: the order claims are handed out in. */
function claimOrder (a: ClaimedPushConfig, b: ClaimedPushConfig): number {
  return a.next_attempt_at - b.next_attempt_at || a.seq - b.seq
}

/**
 * A2A push notification configs and their delivery state on PostgreSQL (`DATABASE_URL`), shared
 * by every instance: the {@link A2APushStore} contract with promises. A config is claimed with
 * `FOR UPDATE SKIP LOCKED` under a fencing token of its own (`gen_random_uuid()`), so instances
 * claiming at once never take the same config nor wait for each other; every later write of the
 * holder presents the token. Writes another store may compose into a bigger transaction (a config
 * saved or deleted with its audit row) also exist as `...In(client, ...)`.
 */
/** {@link PushConfigChanges} on PostgreSQL: one transaction each, the task's configs locked by {@link PgPushStore.listIn}. */
export function pgPushChanges (pool: pg.Pool, store: PgPushStore, audit: { appendIn: (client: pg.ClientBase, input: AuditInput) => Promise<unknown> }): PushConfigChanges {
  return {
    save: async (runKey, decide, from, now) => await inTransaction(pool, async (client) => {
      const change = decide(await store.listIn(client, runKey))
      const saved = await store.saveIn(client, change.config, from, now)
      await audit.appendIn(client, change.audit)
      return saved
    }),
    delete: async (runKey, id, input) => await inTransaction(pool, async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [PG_LOCKS.pushConfigs, runKey])
      const deleted = await store.deleteIn(client, runKey, id)
      if (deleted) await audit.appendIn(client, input)
      return deleted
    })
  }
}

export class PgPushStore implements A2APushStore {
  readonly #pool: pg.Pool

  constructor (pool: pg.Pool) {
    this.#pool = pool
  }

  async save (config: NewPushConfig, from: 'start' | 'now', now: number): Promise<PushConfigRecord> {
    return await this.saveIn(this.#pool, config, from, now)
  }

  /** {@link save} on `client`. */
  async saveIn (client: Queryable, config: NewPushConfig, from: 'start' | 'now', now: number): Promise<PushConfigRecord> {
    const { rows } = await client.query<PushConfigRecord>(`INSERT INTO a2a_push_configs AS c (run_key, id, task_id, agent_id, owner_key, created_by, url, token, auth_scheme, auth_credentials, created_at, updated_at, cursor, next_attempt_at)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11,
        CASE WHEN $12::text = 'start' THEN 0 ELSE (SELECT coalesce(max(j.ord), 0) FROM journal j JOIN runs r ON r.run_id = j.run_id WHERE r.request_id = $1) END, $11)
      ON CONFLICT (run_key, id) DO UPDATE SET url = excluded.url, token = excluded.token, auth_scheme = excluded.auth_scheme, auth_credentials = excluded.auth_credentials,
        created_by = excluded.created_by, updated_at = excluded.updated_at, state = CASE WHEN c.state = 'failed' THEN 'active' ELSE c.state END,
        attempts = 0, last_error = NULL, next_attempt_at = excluded.next_attempt_at
      RETURNING *`,
    [config.run_key, config.id, config.task_id, config.agent_id, config.owner_key, config.created_by, config.url, config.token, config.auth_scheme, config.auth_credentials, now, from])
    return rows[0] as PushConfigRecord
  }

  async get (runKey: string, id: string): Promise<PushConfigRecord | undefined> {
    const { rows } = await this.#pool.query<PushConfigRecord>('SELECT * FROM a2a_push_configs WHERE run_key = $1 AND id = $2', [runKey, id])
    return rows[0]
  }

  async list (runKey: string): Promise<PushConfigRecord[]> {
    return await listOn(this.#pool, runKey)
  }

  /**
   * {@link list} inside the caller's transaction on `client`, holding the task's configs until it
   * ends: a save that depends on what is there (at most so many configs per task) cannot race
   * another instance's save of the same task.
   */
  async listIn (client: pg.ClientBase, runKey: string): Promise<PushConfigRecord[]> {
    // a row lock cannot hold back an insert of a new config: lock the task instead
    await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [PG_LOCKS.pushConfigs, runKey])
    return await listOn(client, runKey)
  }

  async delete (runKey: string, id: string): Promise<boolean> {
    return await this.deleteIn(this.#pool, runKey, id)
  }

  /** {@link delete} on `client`. */
  async deleteIn (client: Queryable, runKey: string, id: string): Promise<boolean> {
    return changes(await client.query('DELETE FROM a2a_push_configs WHERE run_key = $1 AND id = $2', [runKey, id])) > 0
  }

  async claim (now: number, leaseMs: number, limit: number): Promise<ClaimedPushConfig[]> {
    return await this.claimIn(this.#pool, now, leaseMs, limit)
  }

  /** {@link claim} on `client` (one statement: atomic on its own). */
  async claimIn (client: Queryable, now: number, leaseMs: number, limit: number): Promise<ClaimedPushConfig[]> {
    const { rows } = await client.query<ClaimedPushConfig>(`WITH picked AS (
        SELECT c.seq, r.state AS run_state FROM a2a_push_configs c JOIN runs r ON r.request_id = c.run_key
        WHERE c.state = 'active' AND c.next_attempt_at <= $1 AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= $1)
          AND (c.delivered = 0 OR r.state = 'ended' OR EXISTS (SELECT 1 FROM journal j WHERE j.run_id = r.run_id AND j.ord > c.cursor))
        ORDER BY c.next_attempt_at, c.seq LIMIT $2 FOR UPDATE OF c SKIP LOCKED)
      UPDATE a2a_push_configs c SET lease_token = gen_random_uuid()::text, lease_expires_at = $3 FROM picked
      WHERE c.seq = picked.seq RETURNING c.*, picked.run_state`, [now, limit, now + leaseMs])
    return rows.sort(claimOrder)
  }

  async advance (seq: number, token: string, progress: { cursor: number, delivered: number, status: number | null }, expiresAt: number): Promise<boolean> {
    return await this.advanceIn(this.#pool, seq, token, progress, expiresAt)
  }

  /** {@link advance} on `client`. */
  async advanceIn (client: Queryable, seq: number, token: string, progress: { cursor: number, delivered: number, status: number | null }, expiresAt: number): Promise<boolean> {
    return changes(await client.query(`UPDATE a2a_push_configs SET cursor = $1, delivered = $2, attempts = 0, last_error = NULL,
      last_status = coalesce($3::integer, last_status), lease_expires_at = $4 WHERE seq = $5 AND lease_token = $6`,
    [progress.cursor, progress.delivered, progress.status, expiresAt, seq, token])) > 0
  }

  async fail (seq: number, token: string, failure: { status: number | null, error: string, retryAt: number | null }): Promise<boolean> {
    return await this.failIn(this.#pool, seq, token, failure)
  }

  /** {@link fail} on `client`. */
  async failIn (client: Queryable, seq: number, token: string, failure: { status: number | null, error: string, retryAt: number | null }): Promise<boolean> {
    return changes(await client.query(`UPDATE a2a_push_configs SET attempts = attempts + 1, last_status = $1, last_error = $2,
      state = CASE WHEN $3::bigint IS NULL THEN 'failed' ELSE state END, next_attempt_at = coalesce($3::bigint, next_attempt_at),
      lease_token = NULL, lease_expires_at = NULL WHERE seq = $4 AND lease_token = $5`,
    [failure.status, failure.error, failure.retryAt, seq, token])) > 0
  }

  async finish (seq: number, token: string): Promise<boolean> {
    return await this.finishIn(this.#pool, seq, token)
  }

  /** {@link finish} on `client`. */
  async finishIn (client: Queryable, seq: number, token: string): Promise<boolean> {
    return changes(await client.query("UPDATE a2a_push_configs SET state = 'done', lease_token = NULL, lease_expires_at = NULL WHERE seq = $1 AND lease_token = $2", [seq, token])) > 0
  }

  async release (seq: number, token: string): Promise<boolean> {
    return await this.releaseIn(this.#pool, seq, token)
  }

  /** {@link release} on `client`. */
  async releaseIn (client: Queryable, seq: number, token: string): Promise<boolean> {
    return changes(await client.query('UPDATE a2a_push_configs SET lease_token = NULL, lease_expires_at = NULL WHERE seq = $1 AND lease_token = $2', [seq, token])) > 0
  }

  async nextRetry (now: number): Promise<number | undefined> {
    const { rows } = await this.#pool.query<{ due: number | null }>("SELECT min(next_attempt_at) AS due FROM a2a_push_configs WHERE state = 'active' AND next_attempt_at > $1", [now])
    return rows[0]?.due ?? undefined
  }

  async deliveries (query: { after?: number, limit?: number, viewer?: Viewer, taskId?: string, state?: PushState }): Promise<PushDeliveryRow[]> {
    const values: unknown[] = [query.after ?? 0, query.limit ?? 100, query.taskId ?? null, query.state ?? null]
    const seen = viewerSql(query.viewer ?? { all: true }, 'c.owner_key', (value) => `$${values.push(value)}`)
    const { rows } = await this.#pool.query<PushDeliveryRow>(`SELECT c.seq, c.id, c.task_id, c.agent_id, c.url, c.state, c.delivered, c.attempts, c.last_status, c.last_error, c.next_attempt_at, c.created_at,
        CASE WHEN c.state = 'done' THEN 0 ELSE greatest(coalesce((SELECT max(j.ord) FROM journal j WHERE j.run_id = r.run_id), 0) - c.cursor, 0) + (c.delivered = 0)::integer END AS pending
      FROM a2a_push_configs c JOIN runs r ON r.request_id = c.run_key
      WHERE c.seq > $1 AND ${seen} AND ($3::text IS NULL OR c.task_id = $3) AND ($4::text IS NULL OR c.state = $4)
      ORDER BY c.seq LIMIT $2`, values)
    return rows
  }
}

async function listOn (client: Queryable, runKey: string): Promise<PushConfigRecord[]> {
  const { rows } = await client.query<PushConfigRecord>('SELECT * FROM a2a_push_configs WHERE run_key = $1 ORDER BY seq', [runKey])
  return rows
}
