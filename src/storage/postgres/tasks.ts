import type pg from 'pg'
import { isDeepStrictEqual } from 'node:util'
import { AH_ERR_TASK_INVALID, AH_ERR_TASK_NOT_FOUND } from '../../errors.js'
import { viewerSql } from '../tenants.js'
import { inTransaction, PG_LOCKS } from './database.js'
import {
  claimable, claimNode, cancelNode, completeNode, createNodes, failNode, heartbeatNode, releaseNode, retryOrFail, waitNode, answerNode
} from '../tasks/task-graph.js'
import { retryDelayMs, type ClaimToken, type JsonObject, type NewTask, type TaskApprovalAnswer, type TaskFailure, type TaskNode, type TaskQuery, type TaskWait } from '../tasks/task.js'
import type { TaskStore, TaskStoreOptions } from '../tasks/task-store.js'

// Each statement is named, so that every connection parses and plans it once.
const GET = 'SELECT node FROM tasks WHERE id = $1'
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
// The claim in one statement: the best candidate (CANDIDATE's rules), locked SKIP LOCKED and
// updated as claimNode would (PENDING → IN_PROGRESS, owner, attempt + 1, lease, stamps; the times
// are the caller's, as text), returning the node before and after for the rule to check.
// With $7, the statement's own transaction commits without waiting for its WAL flush
// (synchronous_commit off for it alone): see PgTaskStore.claimIn.
const CLAIM = `WITH c AS (${CANDIDATE.replace('SELECT t.node,', 'SELECT t.id, t.node,')}
), claimed AS (
  SELECT c.id, c.node AS before, c.deps, c.node::jsonb || jsonb_build_object('status', 'IN_PROGRESS', 'owner', $4::text,
    'attempt', (c.node::jsonb->>'attempt')::integer + 1, 'lease_expires_at', $5::text, 'last_heartbeat_at', $6::text, 'updated_at', $6::text) AS after
  FROM c, (SELECT CASE WHEN $7::boolean THEN set_config('synchronous_commit', 'off', true) END) AS commit_mode
)
UPDATE tasks t SET status = 'IN_PROGRESS', owner = $4, attempt = (cl.after->>'attempt')::integer,
  lease_expires_at = (cl.after->>'lease_expires_at')::timestamptz, node = cl.after::text
FROM claimed cl WHERE t.id = cl.id
RETURNING cl.before, cl.deps, t.node AS after, t.xmin::text AS version`
// The completion in one statement: the task, if IN_PROGRESS under this claim (the fence), updated
// as completeNode would, returning the node before and after for the rule to check.
const COMPLETE = `WITH c AS (
  SELECT id, node FROM tasks WHERE id = $1 AND status = 'IN_PROGRESS' AND owner = $2 AND attempt = $3 FOR UPDATE
), done AS (
  SELECT c.id, c.node AS before, c.node::jsonb || jsonb_build_object('status', 'COMPLETED', 'outputs', $4::jsonb,
    'lease_expires_at', NULL, 'error', NULL, 'updated_at', $5::text) AS after
  FROM c
)
UPDATE tasks t SET status = 'COMPLETED', lease_expires_at = NULL, node = d.after::text FROM done d WHERE t.id = d.id
RETURNING d.before, t.node AS after, t.xmin::text AS version`
// a task's node and its row version: a write is applied only if the row is still that version
const READ = 'SELECT node, xmin::text AS version FROM tasks WHERE id = $1'
const SWAP = `UPDATE tasks SET status = $2, owner = $3, attempt = $4, available_at = $5, lease_expires_at = $6, node = $7
  WHERE id = $1 AND xmin::text = $8`
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
 *   never get the same task and never wait for each other's rows. It is one statement (one round
 *   trip, one commit), whose result the rules check.
 * - A completion is one statement fenced by the claim token (the task IN_PROGRESS under exactly
 *   that owner and attempt), whose result the rules check; any other write reads the task, applies
 *   the rule and stores the result only if the row is still the version it read. Either way a stale
 *   worker's write is refused (`AH_ERR_TASK_STALE_CLAIM`) and changes nothing.
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
    const inserted = await client.query<{ id: string }>({ name: 'tasks-insert', text: INSERT, values: [nodes.map((node) => JSON.stringify(node))] }).catch((err: unknown) => {
      // PostgreSQL's text cannot hold a NUL character, even escaped in JSON
      if ((err as { code?: string }).code === '22P05') throw new AH_ERR_TASK_INVALID('a string holding \\u0000 (NUL) cannot be stored: PostgreSQL text cannot hold it')
      throw err
    })
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
    if (query.viewer !== undefined) where.push(viewerSql(query.viewer, 'owner_key', (value) => `$${values.push(value)}`))
    values.push(query.limit ?? 100, query.offset ?? 0)
    const sql = `SELECT node FROM tasks ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
      ORDER BY created_at, created_seq LIMIT $${values.length - 1} OFFSET $${values.length}`
    const { rows } = await this.#pool.query<{ node: string }>(sql, values)
    return rows.map((r) => JSON.parse(r.node) as TaskNode)
  }

  async claim (type: string, owner: string, leaseMs: number): Promise<TaskNode | undefined> {
    return await this.claimIn(this.#pool, type, owner, leaseMs)
  }

  /**
   * {@link PgTaskStore.claim} on a client (or the pool: one statement, its own transaction). The
   * statement finds, locks and claims the best candidate at once; the rule (`claimable`,
   * `claimNode`) then checks what it did, and should they ever disagree the rule wins: its node is
   * stored (or the task's as it was, if it was not claimable) and the search goes on. Inside a
   * caller's transaction the claimed row stays locked until it ends.
   *
   * On the pool (its own transaction) the claim commits without waiting for its WAL to reach the
   * disk: a claim lost in a crash of the database is a lease that lapsed at once. The task is
   * PENDING again, the worker's heartbeat and completion are refused (its claim token is not the
   * task's), and the task is claimed and run again, as after any lapsed lease. The next durable
   * commit of anyone (a completion) flushes it with its own. Completions and failures wait for the
   * disk as ever.
   */
  async claimIn (client: pg.ClientBase | pg.Pool, type: string, owner: string, leaseMs: number): Promise<TaskNode | undefined> {
    const now = this.#now()
    const at = now.toISOString()
    const passed: string[] = []
    for (;;) {
      // (no stored node holds a \u0000, which jsonb refuses: createIn refuses such tasks)
      const { rows: [row] } = await client.query<{ before: string, after: string, version: string, deps: Record<string, TaskNode['status']> | null }>({
        name: 'tasks-claim',
        text: CLAIM,
        values: [type, at, passed, owner, new Date(now.getTime() + leaseMs).toISOString(), at, client === this.#pool]
      })
      if (row === undefined) return undefined
      const found = row
      const before = JSON.parse(found.before) as TaskNode
      const expected = claimable(before, type, now, (id) => found.deps?.[id]) ? claimNode(before, owner, leaseMs, now) : undefined
      if (expected !== undefined && isDeepStrictEqual(JSON.parse(found.after), expected)) return expected
      await this.#swap(client, expected ?? before, found.version)
      if (expected !== undefined) return expected
      passed.push(before.id)
    }
  }

  async heartbeat (id: string, token: ClaimToken, leaseMs: number): Promise<TaskNode> {
    return await this.heartbeatIn(this.#pool, id, token, leaseMs)
  }

  /** {@link PgTaskStore.heartbeat} on a client, or the pool (each statement its own transaction). */
  async heartbeatIn (client: pg.ClientBase | pg.Pool, id: string, token: ClaimToken, leaseMs: number): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => heartbeatNode(task, token, leaseMs, now))
  }

  async complete (id: string, token: ClaimToken, outputs: JsonObject): Promise<TaskNode> {
    return await this.completeIn(this.#pool, id, token, outputs)
  }

  /** {@link PgTaskStore.complete} on a client, or the pool (each statement its own transaction). */
  async completeIn (client: pg.ClientBase | pg.Pool, id: string, token: ClaimToken, outputs: JsonObject): Promise<TaskNode> {
    const now = this.#now()
    let row: { before: string, after: string, version: string } | undefined
    try {
      row = (await client.query<NonNullable<typeof row>>({ name: 'tasks-complete', text: COMPLETE, values: [id, token.owner, token.attempt, JSON.stringify(outputs), now.toISOString()] })).rows[0]
    } catch (err) {
      // a node or outputs PostgreSQL's jsonb cannot hold (a \u0000 in a string): completed by the rule alone
      if ((err as { code?: string }).code !== '22P05') throw err
    }
    if (row !== undefined) {
      const before = JSON.parse(row.before) as TaskNode
      let expected: TaskNode | undefined
      try {
        expected = completeNode(before, token, outputs, now)
      } catch {
        // the rule refuses what the statement did: undone, and the rule below says why
      }
      if (expected !== undefined && isDeepStrictEqual(JSON.parse(row.after), expected)) return expected
      if (await this.#swap(client, expected ?? before, row.version) && expected !== undefined) return expected
    }
    // not under this claim (the rule's error says how), or the statement could not: by the rule
    return await this.#update(client, id, (task, at) => completeNode(task, token, outputs, at))
  }

  async fail (id: string, token: ClaimToken, failure: TaskFailure): Promise<TaskNode> {
    return await this.failIn(this.#pool, id, token, failure)
  }

  /** {@link PgTaskStore.fail} on a client, or the pool (each statement its own transaction). */
  async failIn (client: pg.ClientBase | pg.Pool, id: string, token: ClaimToken, failure: TaskFailure): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => failNode(task, token, failure, retryDelayMs(task.attempt, this.#retryBaseMs, this.#retryCapMs), now))
  }

  async release (id: string, token: ClaimToken): Promise<TaskNode> {
    return await this.releaseIn(this.#pool, id, token)
  }

  /** {@link PgTaskStore.release} on a client, or the pool (each statement its own transaction). */
  async releaseIn (client: pg.ClientBase | pg.Pool, id: string, token: ClaimToken): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => releaseNode(task, token, now))
  }

  async wait (id: string, token: ClaimToken, wait: TaskWait): Promise<TaskNode> {
    return await this.waitIn(this.#pool, id, token, wait)
  }

  /** {@link PgTaskStore.wait} on a client, or the pool (each statement its own transaction): fenced as {@link PgTaskStore.release} is. */
  async waitIn (client: pg.ClientBase | pg.Pool, id: string, token: ClaimToken, wait: TaskWait): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => waitNode(task, token, wait, now))
  }

  async answer (id: string, approvalId: string, answer: Omit<TaskApprovalAnswer, 'at'>): Promise<TaskNode> {
    return await this.answerIn(this.#pool, id, approvalId, answer)
  }

  /** {@link PgTaskStore.answer} on a client, or the pool: stored only if the row is still the version read, so of two answers one wins. */
  async answerIn (client: pg.ClientBase | pg.Pool, id: string, approvalId: string, answer: Omit<TaskApprovalAnswer, 'at'>): Promise<TaskNode> {
    return await this.#update(client, id, (task, now) => answerNode(task, approvalId, answer, now))
  }

  async cancel (id: string): Promise<TaskNode> {
    return await this.cancelIn(this.#pool, id)
  }

  /** {@link PgTaskStore.cancel} on a client, or the pool (each statement its own transaction). */
  async cancelIn (client: pg.ClientBase | pg.Pool, id: string): Promise<TaskNode> {
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

  /**
   * Apply `fn` (the rule, which throws to refuse) to the task as it is and store what it made, only
   * if the row is still the version read (no lock is held across the round trips): when another
   * write came between, the rule is applied again to what that one left.
   */
  async #update (client: pg.ClientBase | pg.Pool, id: string, fn: (task: TaskNode, now: Date) => TaskNode): Promise<TaskNode> {
    for (;;) {
      const { rows } = await client.query<{ node: string, version: string }>({ name: 'tasks-read', text: READ, values: [id] })
      const row = rows[0]
      if (row === undefined) throw new AH_ERR_TASK_NOT_FOUND(id)
      const next = fn(JSON.parse(row.node) as TaskNode, this.#now())
      if (await this.#swap(client, next, row.version)) return next
    }
  }

  /** Store `task` if its row is still at `version`; whether it was. */
  async #swap (client: pg.ClientBase | pg.Pool, task: TaskNode, version: string): Promise<boolean> {
    const { rowCount } = await client.query({ name: 'tasks-swap', text: SWAP, values: [task.id, task.status, task.owner, task.attempt, task.available_at, task.lease_expires_at, JSON.stringify(task), version] })
    return rowCount === 1
  }

  async #save (client: pg.ClientBase, task: TaskNode): Promise<void> {
    await client.query({ name: 'tasks-update', text: UPDATE, values: [task.id, task.status, task.owner, task.attempt, task.available_at, task.lease_expires_at, JSON.stringify(task)] })
  }
}
