import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { sees } from '../tenants.js'
import { AH_ERR_TASK_LOCK_COMPROMISED, AH_ERR_TASK_NOT_FOUND } from '../../errors.js'
import { GraphFile } from './graph-file.js'
import { GraphLock } from './graph-lock.js'
import {
  claimable, claimNode, claimOrder, cancelNode, releaseNode, completeNode, createNodes, waitNode, answerNode, failNode, heartbeatNode, leaseExpired, retryOrFail
} from '../tasks/task-graph.js'
import { ownerOf, retryDelayMs, type ClaimToken, type JsonObject, type NewTask, type TaskApprovalAnswer, type TaskFailure, type TaskNode, type TaskQuery, type TaskWait } from '../tasks/task.js'
import type { TaskStore, TaskStoreOptions } from '../tasks/task-store.js'

/** The file's name inside DATA_DIR. */
export const TASK_GRAPH_FILE = 'tasks.graph.json'

interface Graph { tasks: TaskNode[] }

/**
 * One operation's change to the graph, run under the lock with the others of its batch. It mutates
 * `data.tasks` (replacing nodes, never changing one in place) and says whether to write; when it
 * throws it must have changed nothing.
 */
type Change<T> = (data: Graph, now: Date) => { result: T, write: boolean }

interface Pending { change: Change<unknown>, resolve: (value: unknown) => void, reject: (err: unknown) => void }

function filter (tasks: TaskNode[], query: TaskQuery): TaskNode[] {
  const found = tasks.filter((t) => (query.status === undefined || t.status === query.status) &&
    (query.type === undefined || t.type === query.type) &&
    (query.conversation_id === undefined || t.metadata.conversation_id === query.conversation_id) &&
    (query.viewer === undefined || sees(query.viewer, ownerOf(t))))
  const offset = query.offset ?? 0
  return found.slice(offset, offset + (query.limit ?? 100))
}

/**
 * The task graph in `DATA_DIR/tasks.graph.json`, shaped `{ "tasks": [...] }` with one task per
 * line. Every read-modify-write holds the file's lock (`graph-lock.ts`: the directory
 * `tasks.graph.json.lock`, as proper-lockfile makes it; while another holder has it we wait in short
 * randomised steps for up to `lockWaitMs`; a lock whose holder stopped refreshing it for `staleMs`
 * is taken over), and the new content replaces the file by an atomic rename that is fenced by the
 * lock: a process whose lock was taken over (paused or frozen past `staleMs`) writes nothing,
 * re-reads the graph and tries its change again. A reader never sees a partial file.
 *
 * Changes this process makes while one write is under way wait and then share the next one (one
 * lock, one read, one fsynced write for a batch of claims, heartbeats and completions); each
 * resolves once the write holding it is durable. The graph is read only when another process
 * replaced it, and then only its changed lines are parsed (`graph-file.ts`).
 */
export class FileTaskStore implements TaskStore {
  readonly file: string
  readonly #now: () => Date
  readonly #retryBaseMs: number
  readonly #retryCapMs: number
  readonly #lock: GraphLock
  readonly #graph: GraphFile
  readonly #swept: Promise<void>
  #queue: Pending[] = []
  #flushing: Promise<void> | undefined
  #writes = 0

  /**
   * @param options.staleMs age after which a lock whose holder stopped refreshing it is taken over (TASK_LOCK_STALE_MS)
   * @param options.updateMs how often a holder refreshes its lock (default: a fifth of `staleMs`)
   * @param options.lockWaitMs how long an operation waits for a held lock before failing with ELOCKED
   */
  constructor (dataDir: string, options: TaskStoreOptions & { staleMs?: number, updateMs?: number, lockWaitMs?: number } = {}) {
    this.file = join(dataDir, TASK_GRAPH_FILE)
    this.#now = options.now ?? (() => new Date())
    this.#retryBaseMs = options.retryBaseMs ?? 1000
    this.#retryCapMs = options.retryCapMs ?? 60_000
    const staleMs = options.staleMs ?? 5000
    this.#lock = new GraphLock(this.file, { staleMs, updateMs: options.updateMs ?? Math.max(50, Math.floor(staleMs / 5)), waitMs: options.lockWaitMs ?? 30_000 })
    this.#graph = new GraphFile(this.file)
    mkdirSync(dirname(this.file), { recursive: true })
    this.#swept = this.#lock.sweep()
  }

  /** How many times this store has replaced the file: once per batch of changes that wrote. */
  get writes (): number {
    return this.#writes
  }

  /** Queue `change` for the next batch; resolves with (a copy of) its result once that batch is stored. */
  async #locked<T>(change: Change<T>): Promise<T> {
    const result = await new Promise<unknown>((resolve, reject) => {
      this.#queue.push({ change, resolve, reject })
      this.#flushing ??= this.#flush()
    })
    return structuredClone(result) as T
  }

  async #flush (): Promise<void> {
    try {
      await this.#swept
      while (this.#queue.length > 0) await this.#apply(this.#queue.splice(0))
    } finally {
      this.#flushing = undefined
    }
  }

  /**
   * Run a batch of changes on the graph under the lock and write the graph back once if any says so;
   * settle each. When the lock was taken over meanwhile nothing is written, and the batch runs
   * again on the graph as it is now (a claim picks again, a completion checks its claim again), a
   * few times at most.
   */
  async #apply (batch: Pending[]): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      let held
      try {
        held = await this.#lock.acquire()
      } catch (err) {
        for (const p of batch) p.reject(err)
        return
      }
      let committed = false
      try {
        const data = { tasks: await this.#graph.read() }
        const now = this.#now()
        let write = false
        const outcomes = batch.map((p) => {
          try {
            const outcome = p.change(data, now)
            write ||= outcome.write
            return { ok: true, value: outcome.result }
          } catch (err) {
            return { ok: false, value: err }
          }
        })
        if (write) {
          committed = true
          await this.#graph.written(await held.commit(this.#graph.encode(data.tasks)), data.tasks)
          this.#writes++
        }
        outcomes.forEach((o, i) => { if (o.ok) batch[i]?.resolve(o.value); else batch[i]?.reject(o.value) })
        return
      } catch (err) {
        if (!(err instanceof AH_ERR_TASK_LOCK_COMPROMISED) || attempt >= 3) {
          for (const p of batch) p.reject(err)
          return
        }
      } finally {
        if (!committed) await held.release()
      }
    }
  }

  #find (data: Graph, id: string): number {
    const index = data.tasks.findIndex((t) => t.id === id)
    if (index < 0) throw new AH_ERR_TASK_NOT_FOUND(id)
    return index
  }

  async create (batch: NewTask[]): Promise<TaskNode[]> {
    return await this.#locked((data, now) => {
      const ids = new Set(data.tasks.map((t) => t.id))
      const nodes = createNodes(batch, (id) => ids.has(id), now)
      data.tasks.push(...nodes)
      return { result: nodes, write: true }
    })
  }

  async get (id: string): Promise<TaskNode | undefined> {
    const found = (await this.#graph.read()).find((t) => t.id === id)
    return found === undefined ? undefined : structuredClone(found)
  }

  async list (query: TaskQuery = {}): Promise<TaskNode[]> {
    return structuredClone(filter(await this.#graph.read(), query))
  }

  async claim (type: string, owner: string, leaseMs: number): Promise<TaskNode | undefined> {
    return await this.#locked((data, now) => {
      let status: Map<string, TaskNode['status']> | undefined
      const statusOf = (id: string): TaskNode['status'] | undefined => (status ??= new Map(data.tasks.map((t) => [t.id, t.status]))).get(id)
      let chosen: number | undefined
      data.tasks.forEach((task, i) => {
        if (claimable(task, type, now, statusOf) && (chosen === undefined || claimOrder(task, data.tasks[chosen] as TaskNode) < 0)) chosen = i
      })
      if (chosen === undefined) return { result: undefined, write: false }
      const claimed = claimNode(data.tasks[chosen] as TaskNode, owner, leaseMs, now)
      data.tasks[chosen] = claimed
      return { result: claimed, write: true }
    })
  }

  async #update (id: string, fn: (task: TaskNode, now: Date) => TaskNode): Promise<TaskNode> {
    return await this.#locked((data, now) => {
      const index = this.#find(data, id)
      const next = fn(data.tasks[index] as TaskNode, now)
      data.tasks[index] = next
      return { result: next, write: true }
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
    return await this.#locked((data, now) => {
      const reaped: TaskNode[] = []
      data.tasks = data.tasks.map((task) => {
        if (!leaseExpired(task, now)) return task
        const next = retryOrFail(task, { reason: 'lease_expired', retryable: true, details: { owner: task.owner } }, retryDelayMs(task.attempt, this.#retryBaseMs, this.#retryCapMs), now)
        reaped.push(next)
        return next
      })
      return { result: reaped, write: reaped.length > 0 }
    })
  }

  /** Wait for the changes queued so far, then let go of the file. */
  async close (): Promise<void> {
    await this.#flushing
    await this.#graph.close()
  }
}
