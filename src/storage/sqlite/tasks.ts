import { AH_ERR_TASK_NOT_FOUND } from '../../errors.js'
import { namedViewerSql } from '../tenants.js'
import type { Db } from './database.js'
import {
  claimable, claimNode, cancelNode, completeNode, createNodes, failNode, heartbeatNode, releaseNode, retryOrFail, waitNode, answerNode
} from '../tasks/task-graph.js'
import { retryDelayMs, type ClaimToken, type JsonObject, type NewTask, type TaskApprovalAnswer, type TaskFailure, type TaskNode, type TaskQuery, type TaskWait } from '../tasks/task.js'
import type { TaskStore, TaskStoreOptions } from '../tasks/task-store.js'

/**
 * The task graph in the SQLite database (`TASK_STORE=sqlite`): the same semantics as the file
 * store, each operation one `BEGIN IMMEDIATE` transaction, for throughput.
 */
export class SqliteTaskStore implements TaskStore {
  readonly #db: Db
  readonly #now: () => Date
  readonly #retryBaseMs: number
  readonly #retryCapMs: number
  readonly #get
  readonly #put
  readonly #candidates
  readonly #status
  readonly #expired

  constructor (db: Db, options: TaskStoreOptions = {}) {
    this.#db = db
    this.#now = options.now ?? (() => new Date())
    this.#retryBaseMs = options.retryBaseMs ?? 1000
    this.#retryCapMs = options.retryCapMs ?? 60_000
    this.#get = db.prepare('SELECT node FROM tasks WHERE id = ?').pluck()
    this.#put = db.prepare(`INSERT INTO tasks (id, type, status, priority, created_at, available_at, lease_expires_at, conversation_id, node)
      VALUES (@id, @type, @status, @priority, @created_at, @available_at, @lease_expires_at, @conversation_id, @node)
      ON CONFLICT (id) DO UPDATE SET status = excluded.status, available_at = excluded.available_at,
        lease_expires_at = excluded.lease_expires_at, node = excluded.node`)
    this.#candidates = db.prepare(`SELECT node FROM tasks WHERE type = ? AND status = 'PENDING' AND available_at <= ?
      ORDER BY priority DESC, created_at, id LIMIT ? OFFSET ?`).pluck()
    this.#status = db.prepare('SELECT status FROM tasks WHERE id = ?').pluck()
    this.#expired = db.prepare("SELECT node FROM tasks WHERE status = 'IN_PROGRESS' AND lease_expires_at <= ? ORDER BY created_at, rowid").pluck()
  }

  #save (task: TaskNode): void {
    const conversation = task.metadata.conversation_id
    this.#put.run({
      id: task.id,
      type: task.type,
      status: task.status,
      priority: task.priority,
      created_at: task.created_at,
      available_at: task.available_at,
      lease_expires_at: task.lease_expires_at,
      conversation_id: typeof conversation === 'string' ? conversation : null,
      node: JSON.stringify(task)
    })
  }

  #load (id: string): TaskNode {
    const node = this.#get.get(id) as string | undefined
    if (node === undefined) throw new AH_ERR_TASK_NOT_FOUND(id)
    return JSON.parse(node) as TaskNode
  }

  #immediate<T>(fn: (now: Date) => T): T {
    return this.#db.transaction(() => fn(this.#now())).immediate()
  }

  async create (batch: NewTask[]): Promise<TaskNode[]> {
    return this.#immediate((now) => {
      const nodes = createNodes(batch, (id) => this.#get.get(id) !== undefined, now)
      for (const node of nodes) this.#save(node)
      return nodes
    })
  }

  async get (id: string): Promise<TaskNode | undefined> {
    const node = this.#get.get(id) as string | undefined
    return node === undefined ? undefined : JSON.parse(node) as TaskNode
  }

  async list (query: TaskQuery = {}): Promise<TaskNode[]> {
    const where = ['1 = 1']
    if (query.status !== undefined) where.push('status = @status')
    if (query.type !== undefined) where.push('type = @type')
    if (query.conversation_id !== undefined) where.push('conversation_id = @conversation_id')
    const seen = namedViewerSql(query.viewer ?? { all: true }, "json_extract(node, '$.metadata.owner_key')")
    where.push(seen.sql)
    const { viewer: _viewer, ...filters } = query
    const rows = this.#db.prepare(`SELECT node FROM tasks WHERE ${where.join(' AND ')} ORDER BY created_at, rowid LIMIT @limit OFFSET @offset`).pluck()
      .all({ ...filters, ...seen.params, limit: query.limit ?? 100, offset: query.offset ?? 0 }) as string[]
    return rows.map((r) => JSON.parse(r) as TaskNode)
  }

  async claim (type: string, owner: string, leaseMs: number): Promise<TaskNode | undefined> {
    return this.#immediate((now) => {
      const status = (id: string): TaskNode['status'] | undefined => this.#status.get(id) as TaskNode['status'] | undefined
      for (let offset = 0; ; offset += 100) {
        const page = this.#candidates.all(type, now.toISOString(), 100, offset) as string[]
        for (const row of page) {
          const task = JSON.parse(row) as TaskNode
          if (!claimable(task, type, now, status)) continue
          const claimed = claimNode(task, owner, leaseMs, now)
          this.#save(claimed)
          return claimed
        }
        if (page.length < 100) return undefined
      }
    })
  }

  async #update (id: string, fn: (task: TaskNode, now: Date) => TaskNode): Promise<TaskNode> {
    return this.#immediate((now) => {
      const next = fn(this.#load(id), now)
      this.#save(next)
      return next
    })
  }

  async heartbeat (id: string, token: ClaimToken, leaseMs: number): Promise<TaskNode> {
    return await this.#update(id, (task, now) => heartbeatNode(task, token, leaseMs, now))
  }

  async complete (id: string, token: ClaimToken, outputs: JsonObject): Promise<TaskNode> {
    return await this.#update(id, (task, now) => completeNode(task, token, outputs, now))
  }

  async fail (id: string, token: ClaimToken, failure: TaskFailure): Promise<TaskNode> {
    return await this.#update(id, (task, now) => failNode(task, token, failure, retryDelayMs(task.attempt, this.#retryBaseMs, this.#retryCapMs), now))
  }

  async release (id: string, token: ClaimToken): Promise<TaskNode> {
    return await this.#update(id, (task, now) => releaseNode(task, token, now))
  }

  async wait (id: string, token: ClaimToken, wait: TaskWait): Promise<TaskNode> {
    return await this.#update(id, (task, now) => waitNode(task, token, wait, now))
  }

  async answer (id: string, approvalId: string, answer: Omit<TaskApprovalAnswer, 'at'>): Promise<TaskNode> {
    return await this.#update(id, (task, now) => answerNode(task, approvalId, answer, now))
  }

  async cancel (id: string): Promise<TaskNode> {
    return await this.#update(id, (task, now) => cancelNode(task, now))
  }

  async reap (): Promise<TaskNode[]> {
    return this.#immediate((now) => {
      const reaped: TaskNode[] = []
      for (const row of this.#expired.all(now.toISOString()) as string[]) {
        const task = JSON.parse(row) as TaskNode
        const next = retryOrFail(task, { reason: 'lease_expired', retryable: true, details: { owner: task.owner } }, retryDelayMs(task.attempt, this.#retryBaseMs, this.#retryCapMs), now)
        this.#save(next)
        reaped.push(next)
      }
      return reaped
    })
  }

  async close (): Promise<void> {}
}
