import { randomUUID } from 'node:crypto'
import type { Db } from './database.js'
import type { AuditInput } from '../audit.js'
import { type A2APushStore, type PushConfigChanges, type ClaimedPushConfig, type NewPushConfig, type PushConfigRecord, type PushDeliveryRow, type PushState } from '../a2a-push.js'
import { namedViewerSql, type Viewer } from '../tenants.js'

/** {@link PushConfigChanges} on SQLite: one write of the group writer each. */
export function sqlitePushChanges (store: SqlitePushStore, audit: { append: (input: AuditInput) => unknown }, write: <T>(op: () => T) => Promise<T>): PushConfigChanges {
  return {
    save: async (runKey, decide, from, now) => await write(() => {
      const change = decide(store.list(runKey))
      const saved = store.save(change.config, from, now)
      audit.append(change.audit)
      return saved
    }),
    delete: async (runKey, id, input) => await write(() => {
      const deleted = store.delete(runKey, id)
      if (deleted) audit.append(input)
      return deleted
    })
  }
}

/**
 * A2A push notification configs and their delivery state, synchronous: callers run these inside
 * the group writer (writes) or read directly. Each config keeps a cursor into its task's journal
 * (the last `ord` pushed), so a restart resumes where the last process stopped. A config is pushed
 * by one process at a time: it holds a lease with a fencing token, renewed with each write, and a
 * holder whose lease lapsed and was taken changes nothing.
 */
export class SqlitePushStore implements A2APushStore {
  readonly #db: Db
  readonly #get
  readonly #list

  constructor (db: Db) {
    this.#db = db
    this.#get = db.prepare('SELECT * FROM a2a_push_configs WHERE run_key = ? AND id = ?')
    this.#list = db.prepare('SELECT * FROM a2a_push_configs WHERE run_key = ? ORDER BY seq')
  }

  /**
   * Store a config, or replace the URL and credentials of the task's config with the same id (its
   * delivery goes on from where it is; a `failed` one is tried again). A new config starts `from`
   * the start of the task's journal (its first update is the task as submitted) or from `now` (the
   * task as it stands, then the updates after it).
   */
  save (config: NewPushConfig, from: 'start' | 'now', now: number): PushConfigRecord {
    this.#db.prepare(`INSERT INTO a2a_push_configs (run_key, id, task_id, agent_id, owner_key, created_by, url, token, auth_scheme, auth_credentials, created_at, updated_at, cursor, next_attempt_at)
      VALUES (@run_key, @id, @task_id, @agent_id, @owner_key, @created_by, @url, @token, @auth_scheme, @auth_credentials, @now, @now,
        CASE WHEN @from = 'start' THEN 0 ELSE (SELECT coalesce(max(j.ord), 0) FROM journal j JOIN runs r ON r.run_id = j.run_id WHERE r.request_id = @run_key) END, @now)
      ON CONFLICT (run_key, id) DO UPDATE SET url = excluded.url, token = excluded.token, auth_scheme = excluded.auth_scheme, auth_credentials = excluded.auth_credentials,
        created_by = excluded.created_by, updated_at = excluded.updated_at, state = CASE WHEN state = 'failed' THEN 'active' ELSE state END,
        attempts = 0, last_error = NULL, next_attempt_at = excluded.next_attempt_at`)
      .run({ ...config, from, now })
    return this.get(config.run_key, config.id) as PushConfigRecord
  }

  get (runKey: string, id: string): PushConfigRecord | undefined {
    return this.#get.get(runKey, id) as PushConfigRecord | undefined
  }

  /** A task's configs, oldest first. */
  list (runKey: string): PushConfigRecord[] {
    return this.#list.all(runKey) as PushConfigRecord[]
  }

  /** Delete a task's config; false when it has none of that id. */
  delete (runKey: string, id: string): boolean {
    return this.#db.prepare('DELETE FROM a2a_push_configs WHERE run_key = ? AND id = ?').run(runKey, id).changes > 0
  }

  /**
   * Lease up to `limit` configs that have something to push now (the task itself not pushed yet,
   * journal packets after the cursor, or a run that ended) and are not leased elsewhere, each under
   * a fencing token of its own, until `now + leaseMs`.
   */
  claim (now: number, leaseMs: number, limit: number): ClaimedPushConfig[] {
    return this.#db.transaction(() => {
      const rows = this.#db.prepare(`SELECT c.*, r.state AS run_state FROM a2a_push_configs c JOIN runs r ON r.request_id = c.run_key
        WHERE c.state = 'active' AND c.next_attempt_at <= @now AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= @now)
          AND (c.delivered = 0 OR r.state = 'ended' OR EXISTS (SELECT 1 FROM journal j WHERE j.run_id = r.run_id AND j.ord > c.cursor))
        ORDER BY c.next_attempt_at, c.seq LIMIT @limit`).all({ now, limit }) as Array<Omit<ClaimedPushConfig, 'lease_token' | 'lease_expires_at'>>
      const lease = this.#db.prepare('UPDATE a2a_push_configs SET lease_token = ?, lease_expires_at = ? WHERE seq = ?')
      return rows.map((row) => {
        const token = randomUUID()
        lease.run(token, now + leaseMs, row.seq)
        return { ...row, lease_token: token, lease_expires_at: now + leaseMs }
      })
    }).immediate()
  }

  /**
   * Updates were pushed (or packets passed over) up to journal `cursor`: `delivered` in all, the
   * last answered `status` (null when nothing was sent). Clears the failures; extends the lease.
   * Fenced: false when `token` no longer holds the config.
   */
  advance (seq: number, token: string, progress: { cursor: number, delivered: number, status: number | null }, expiresAt: number): boolean {
    return this.#db.prepare(`UPDATE a2a_push_configs SET cursor = @cursor, delivered = @delivered, attempts = 0, last_error = NULL,
      last_status = coalesce(@status, last_status), lease_expires_at = @expiresAt WHERE seq = @seq AND lease_token = @token`)
      .run({ ...progress, seq, token, expiresAt }).changes > 0
  }

  /**
   * An attempt failed: count it, keep its status and error, and either wait until `retryAt` (the
   * lease is released) or, with `retryAt` null, give up: the config is `failed`. Fenced.
   */
  fail (seq: number, token: string, failure: { status: number | null, error: string, retryAt: number | null }): boolean {
    return this.#db.prepare(`UPDATE a2a_push_configs SET attempts = attempts + 1, last_status = @status, last_error = @error,
      state = CASE WHEN @retryAt IS NULL THEN 'failed' ELSE state END, next_attempt_at = coalesce(@retryAt, next_attempt_at),
      lease_token = NULL, lease_expires_at = NULL WHERE seq = @seq AND lease_token = @token`)
      .run({ ...failure, seq, token }).changes > 0
  }

  /** The task's final status was pushed (or its run ended with nothing left to push): `done`, and the lease released. Fenced. */
  finish (seq: number, token: string): boolean {
    return this.#db.prepare("UPDATE a2a_push_configs SET state = 'done', lease_token = NULL, lease_expires_at = NULL WHERE seq = ? AND lease_token = ?").run(seq, token).changes > 0
  }

  /** Give the lease up (nothing more to push now, or closing). Fenced. */
  release (seq: number, token: string): boolean {
    return this.#db.prepare('UPDATE a2a_push_configs SET lease_token = NULL, lease_expires_at = NULL WHERE seq = ? AND lease_token = ?').run(seq, token).changes > 0
  }

  /** When the next `active` config waiting for a retry falls due (ms since the epoch), if one waits. */
  nextRetry (now: number): number | undefined {
    return (this.#db.prepare("SELECT min(next_attempt_at) AS due FROM a2a_push_configs WHERE state = 'active' AND next_attempt_at > ?").get(now) as { due: number | null }).due ?? undefined
  }

  /**
   * The delivery state of configs after `after` (by seq), oldest first: only those of the tasks
   * `viewer` sees when given, of one task (its A2A task id) or in one state when asked.
   */
  deliveries (query: { after?: number, limit?: number, viewer?: Viewer, taskId?: string, state?: PushState }): PushDeliveryRow[] {
    const where = ['c.seq > @after']
    const seen = namedViewerSql(query.viewer ?? { all: true }, 'c.owner_key')
    where.push(seen.sql)
    if (query.taskId !== undefined) where.push('c.task_id = @taskId')
    if (query.state !== undefined) where.push('c.state = @state')
    return this.#db.prepare(`SELECT c.seq, c.id, c.task_id, c.agent_id, c.url, c.state, c.delivered, c.attempts, c.last_status, c.last_error, c.next_attempt_at, c.created_at,
        CASE WHEN c.state = 'done' THEN 0 ELSE max(coalesce((SELECT max(j.ord) FROM journal j WHERE j.run_id = r.run_id), 0) - c.cursor, 0) + (c.delivered = 0) END AS pending
      FROM a2a_push_configs c JOIN runs r ON r.request_id = c.run_key WHERE ${where.join(' AND ')} ORDER BY c.seq LIMIT @limit`)
      .all({ after: query.after ?? 0, limit: query.limit ?? 100, ...seen.params, taskId: query.taskId ?? null, state: query.state ?? null }) as PushDeliveryRow[]
  }
}
