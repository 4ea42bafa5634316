import type pg from 'pg'
import { AH_ERR_TASK_INVALID, AH_ERR_TASK_NOT_FOUND } from '../errors.js'
import { inTransaction, PG_LOCKS } from '../storage/postgres/database.js'
import {
  claimable, claimNode, cancelNode, completeNode, createNodes, failNode, heartbeatNode, releaseNode, retryOrFail
} from './task-graph.js'
import { retryDelayMs, type ClaimToken, type JsonObject, type NewTask, type TaskFailure, type TaskNode, type TaskQuery } from './task.js'
import type { TaskStore, TaskStoreOptions } from './task-store.js'

// Each statement is named, so that every connection parses and plans it once.
const GET = 'SELECT node FROM tasks WHERE id = $1'
const LOCK = 'SELECT node FROM tasks WHERE id = $1 FOR UPDATE'
const EXISTING = 'SELECT id FROM tasks WHERE id = ANY($1::text[])'
// the columns are read from each node's JSON, so that the node text stored is the one given
const INSERT = `INSERT INTO tasks (id, type, status, priority, owner, attempt, dependency_ids, created_at, available_at, lease_expires_at, conversation_id, owner_key, node)
  SELECT j->>'id', j->>'type', j->>'status', (j->>'priority')::float8, j->>'owner', (j->>'attempt')::integer,
    ARRAY(SELECT json_array_elements_text(j->'dependency_ids')), (j->>'created_at')::timestamptz, (j->>'available_at')::timestamptz,
    (j->>'lease_expires_at')::timestamptz,
    CASE WHEN json_typeof(j->'metadata'->'conversation_id') = 'string' THEN j->'metadata'->>'conversation_id' END,
    CASE WHEN json_typeof(j->'metadata'->'owner_key') = 'string' THEN j->'metadata'->>'owner_key' END,
    n.node
  FROM unnest($1::text[]) WITH ORDINALITY AS n(node, ord), LATERAL (SELECT n.node::json AS j) AS parsed
  ORDER BY n.ord
  ON CONFLICT (id) DO NOTHING
  RETURNING id`
const UPDATE = `UPDATE tasks SET status = $2, owner = $3, attempt = $4, available_at = $5, lease_expires_at = $6, node = $7
  WHERE id = $1`
// SKIP LOCKED: a row another worker is claiming or finishing is passed over, never waited for, so
// that N workers claiming at once neither get the same task nor queue behind one row. The
// dependencies' statuses come along for the rule (`claimable`) to decide.
const CANDIDATE = `SELECT t.node, (SELECT json_object_agg(d.id, d.status) FROM tasks d WHERE d.id = ANY(t.dependency_ids)) AS deps
  FROM tasks t
  WHERE t.type = $1 AND t.status = 'PENDING' AND t.available_at <= $2 AND NOT (t.id = ANY($3::text[]))
    AND NOT EXISTS (SELECT 1 FROM unnest(t.dependency_ids) AS dep(id)
      WHERE NOT EXISTS (SELECT 1 FROM tasks d WHERE d.id = dep.id AND d.status = 'COMPLETED'))
  ORDER BY t.priority DESC, t.created_at, t.created_seq
  LIMIT 1
  FOR UPDATE OF t SKIP LOCKED`
// SKIP LOCKED: a task a worker is finishing right now is left to it; if its lease is still out
// once the worker is done, the next round reaps it
const EXPIRED = `SELECT node FROM tasks WHERE status = 'IN_PROGRESS' AND lease_expires_at <= $1
  ORDER BY created_at, created_seq
  FOR UPDATE SKIP LOCKED`

/**
 * The task graph in PostgreSQL (`TASK_STORE=postgres`, with `DATABASE_URL`): the same semantics as
 * the file and SQLite stores (the rules of `task-graph.ts`; this store's SQL only finds and locks
 * rows), shared by any number of API instances and worker processes.
 *
 * - A claim takes the best claimable task with `FOR UPDATE SKIP LOCKED`: workers claiming at once
 *   never get the same task and never wait for each other's rows.
 * - Every write of a worker locks its task's row (`FOR UPDATE`), then checks its claim token, so a
 *   stale worker's write is refused (`AH_ERR_TASK_STALE_CLAIM`) and changes nothing.
 * - {@link PgTaskStore.reap} runs on one instance at a time (the `PG_LOCKS.reaper` advisory lock).
 *
 * Every time the rules compare comes from `options.now`, never from the database's clock. Each write
 * also exists as `...In(client, ...)`, for a caller composing it into a transaction of its own.
 */
export class PgTaskStore implements TaskStore {
  readonly #pool: pg.Pool
  readonly #now: () => Date
  readonly #retryBaseMs: number
  readonly #retryCapMs: number

  /** @param pool the app's pool: {@link PgTaskStore.close} leaves it open */
  constructor (pool: pg.Pool, options: TaskStoreOptions = {}) {
    this.#pool = pool
    this.#now = options.now ?? (() => new Date())
    this.#retryBaseMs = options.retryBaseMs ?? 1000
    this.#retryCapMs = options.retryCapMs ?? 60_000
  }

  async create (batch: NewTask[]): Promise<TaskNode[]> {
    return await inTransaction(this.#pool, async (c) => await this.createIn(c, batch))
  }

  /**
   * {@link PgTaskStore.create} on a client inside a transaction. A task id another transaction
   * inserts at the same moment makes this one fail with `AH_ERR_TASK_INVALID` once that one commits
   * (the caller must then roll back).
   */
  async createIn (client: pg.ClientBase, batch: NewTask[]): Promise<TaskNode[]> {
    const now = this.#now()
    const referenced = Array.isArray(batch) ? batch.flatMap((task) => [task.id, task.parent_id, ...(task.dependency_ids ?? [])]).filter((id) => typeof id === 'string') : []
    const { rows } = await client.query<{ id: string }>({ name: 'tasks-existing', text: EXISTING, values: [referenced] })
    const existing = new Set(rows.map((r) => r.id))
    const nodes = createNodes(batch, (id) => existing.has(id), now)
    const inserted = await client.query<{ id: string }>({ name: 'tasks-insert', text: INSERT, values: [nodes.map((node) => JSON.stringify(node))] })
    if (inserted.rowCount !== nodes.length) {
      const stored = new Set(inserted.rows.map((r) => r.id))
      const taken = nodes.find((node) => !stored.has(node.id)) as TaskNode
      throw new AH_ERR_TASK_INVALID(`task id "${taken.id}" is already used`)
    }
    return nodes
  }

  async get (id: string): Promise<TaskNode | undefined> {
    const { rows } = await this.#pool.query<{ node: string }>({ name: 'tasks-get', text: GET, values: [id] })
    return rows[0] === undefined ? undefined : JSON.parse(rows[0].node) as TaskNode
  }

  async list (query: TaskQuery = {}): Promise<TaskNode[]> {
    const where: string[] = []
    const values: unknown[] = []
    const filter = (column: string, value: unknown): void => {
      if (value === undefined) return
      values.push(value)
      where.push(`${column} = $${values.length}`)
    }
    filter('status', query.status)
    filter('type', query.type)
    filter('conversation_id', query.conversation_id)
    filter('owner_key', query.owner)
    values.push(query.limit ?? 100, query.offset ?? 0)
    const sql = `SELECT node FROM tasks ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
      ORDER BY created_at, created_seq LIMIT $${values.length - 1} OFFSET $${values.length}`
    const { rows } = await this.#pool.query<{ node: string }>(sql, values)
    return rows.map((r) => JSON.parse(r.node) as TaskNode)
  }

  async claim (type: string, owner: string, leaseMs: number): Promise<TaskNode | undefined> {
    return await inTransaction(this.#pool, async (c) => await this.claimIn(c, type, owner, leaseMs))
  }

  /** {@link PgTaskStore.claim} on a client inside a transaction: the claimed row stays locked until it ends. */
  async claimIn (client: pg.ClientBase, type: string, owner: string, leaseMs: number): Promise<TaskNode | undefined> {
    const now = this.#now()
    const passed: string[] = []
    for (;;) {
      const { rows } = await client.query<{ node: string, deps: Record<string, TaskNode['status']> | null }>({ name: 'tasks-candidate', text: CANDIDATE, values: [type, now.toISOString(), passed] })
      const row = rows[0]
      if (row === undefined) return undefined
      const task = JSON.parse(row.node) as TaskNode
      // the query's filter is the rule's; should they ever disagree, the rule wins and the search goes on
      if (!claimable(task, type, now, (id) => row.deps?.[id])) {
        passed.push(task.id)
        continue
      }
      const claimed = claimNode(task, owner, leaseMs, now)
      await this.#save(client, claimed)
      return claimed
    }
  }

  async heartbeat (id: string, token: ClaimToken, leaseMs: number): Promise<TaskNode> {
    return await inTransaction(this.#pool, async (c) => await this.heartbeatIn(c, id, token, leaseMs))
  }

  /** {@link PgTaskStore.heartbeat} on a client inside a transaction. */
  async heartbeatIn (client: pg.ClientBase, id: string, token: ClaimToken, leaseMs: number): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => heartbeatNode(task, token, leaseMs, now))
  }

  async complete (id: string, token: ClaimToken, outputs: JsonObject): Promise<TaskNode> {
    return await inTransaction(this.#pool, async (c) => await this.completeIn(c, id, token, outputs))
  }

  /** {@link PgTaskStore.complete} on a client inside a transaction. */
  async completeIn (client: pg.ClientBase, id: string, token: ClaimToken, outputs: JsonObject): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => completeNode(task, token, outputs, now))
  }

  async fail (id: string, token: ClaimToken, failure: TaskFailure): Promise<TaskNode> {
    return await inTransaction(this.#pool, async (c) => await this.failIn(c, id, token, failure))
  }

  /** {@link PgTaskStore.fail} on a client inside a transaction. */
  async failIn (client: pg.ClientBase, id: string, token: ClaimToken, failure: TaskFailure): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => failNode(task, token, failure, retryDelayMs(task.attempt, this.#retryBaseMs, this.#retryCapMs), now))
  }

  async release (id: string, token: ClaimToken): Promise<TaskNode> {
    return await inTransaction(this.#pool, async (c) => await this.releaseIn(c, id, token))
  }

  /** {@link PgTaskStore.release} on a client inside a transaction. */
  async releaseIn (client: pg.ClientBase, id: string, token: ClaimToken): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => releaseNode(task, token, now))
  }

  async cancel (id: string): Promise<TaskNode> {
    return await inTransaction(this.#pool, async (c) => await this.cancelIn(c, id))
  }

  /** {@link PgTaskStore.cancel} on a client inside a transaction. */
  async cancelIn (client: pg.ClientBase, id: string): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => cancelNode(task, now))
  }

  async reap (): Promise<TaskNode[]> {
    return await inTransaction(this.#pool, async (c) => await this.reapIn(c))
  }

  /**
   * {@link PgTaskStore.reap} on a client inside a transaction. It first takes the reaper's advisory
   * lock for the transaction, without waiting: while another instance reaps, this one reaps nothing
   * (returns []), so that one expired lease is counted as one failed attempt, not one per instance.
   */
  async reapIn (client: pg.ClientBase): Promise<TaskNode[]> {
    const { rows: [lock] } = await client.query<{ held: boolean }>({ name: 'tasks-reaper-lock', text: 'SELECT pg_try_advisory_xact_lock($1) AS held', values: [PG_LOCKS.reaper] })
    if (lock?.held !== true) return []
    const now = this.#now()
    const { rows } = await client.query<{ node: string }>({ name: 'tasks-expired', text: EXPIRED, values: [now.toISOString()] })
    const reaped: TaskNode[] = []
    for (const row of rows) {
      const task = JSON.parse(row.node) as TaskNode
      const next = retryOrFail(task, { reason: 'lease_expired', retryable: true, details: { owner: task.owner } }, retryDelayMs(task.attempt, this.#retryBaseMs, this.#retryCapMs), now)
      await this.#save(client, next)
      reaped.push(next)
    }
    return reaped
  }

  /** Leaves the pool open: it is its owner's to end. */
  async close (): Promise<void> {}

  /** Lock the task's row, apply `fn` (the rule, which throws to refuse), store what it made. */
  async #update (client: pg.ClientBase, id: string, fn: (task: TaskNode, now: Date) => TaskNode): Promise<TaskNode> {
    const { rows } = await client.query<{ node: string }>({ name: 'tasks-lock', text: LOCK, values: [id] })
    if (rows[0] === undefined) throw new AH_ERR_TASK_NOT_FOUND(id)
    const next = fn(JSON.parse(rows[0].node) as TaskNode, this.#now())
    await this.#save(client, next)
    return next
  }

  async #save (client: pg.ClientBase, task: TaskNode): Promise<void> {
    await client.query({ name: 'tasks-update', text: UPDATE, values: [task.id, task.status, task.owner, task.attempt, task.available_at, task.lease_expires_at, JSON.stringify(task)] })
  }
}
