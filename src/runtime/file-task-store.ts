import { readFile } from 'node:fs/promises'
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { AH_ERR_TASK_LOCK_COMPROMISED, AH_ERR_TASK_NOT_FOUND } from '../errors.js'
import { GraphLock } from './graph-lock.js'
import {
  claimable, claimNode, claimOrder, cancelNode, releaseNode, completeNode, createNodes, failNode, heartbeatNode, leaseExpired, retryOrFail
} from './task-graph.js'
import { retryDelayMs, type ClaimToken, type JsonObject, type NewTask, type TaskFailure, type TaskNode, type TaskQuery } from './task.js'
import type { TaskStore, TaskStoreOptions } from './task-store.js'

/** The file's name inside DATA_DIR. */
export const TASK_GRAPH_FILE = 'tasks.graph.json'

interface GraphFile { tasks: TaskNode[] }

function filter (tasks: TaskNode[], query: TaskQuery): TaskNode[] {
  const found = tasks.filter((t) => (query.status === undefined || t.status === query.status) &&
    (query.type === undefined || t.type === query.type) &&
    (query.conversation_id === undefined || t.metadata.conversation_id === query.conversation_id))
  const offset = query.offset ?? 0
  return found.slice(offset, offset + (query.limit ?? 100))
}

/**
 * The task graph in `DATA_DIR/tasks.graph.json`, shaped `{ "tasks": [...] }`. Every
 * read-modify-write holds the file's lock (`graph-lock.ts`: the directory `tasks.graph.json.lock`,
 * as proper-lockfile makes it; while another holder has it we wait in short randomised steps for up
 * to `lockWaitMs`; a lock whose holder stopped refreshing it for `staleMs` is taken over), and the
 * new content replaces the file by an atomic rename that is fenced by the lock: a process whose lock
 * was taken over (paused or frozen past `staleMs`) writes nothing, re-reads the graph and tries its
 * change again. A reader never sees a partial file.
 */
export class FileTaskStore implements TaskStore {
  readonly file: string
  readonly #now: () => Date
  readonly #retryBaseMs: number
  readonly #retryCapMs: number
  readonly #lock: GraphLock
  readonly #swept: Promise<void>

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
    mkdirSync(dirname(this.file), { recursive: true })
    this.#swept = this.#lock.sweep()
  }

  async #read (): Promise<GraphFile> {
    let text: string
    try {
      text = await readFile(this.file, 'utf8')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { tasks: [] }
      throw err
    }
    const data = JSON.parse(text) as GraphFile
    if (data === null || typeof data !== 'object' || !Array.isArray(data.tasks)) throw new Error(`${this.file} is not {"tasks": [...]}`)
    return data
  }

  /**
   * Run `change` on the graph under the lock; write the graph back when it says so. When the lock
   * was taken over meanwhile nothing is written, and the change runs again on the graph as it is
   * now (a claim picks again, a completion checks its claim again), a few times at most.
   */
  async #locked<T>(change: (data: GraphFile, now: Date) => { result: T, write: boolean }): Promise<T> {
    await this.#swept
    for (let attempt = 1; ; attempt++) {
      const held = await this.#lock.acquire()
      let committed = false
      try {
        const data = await this.#read()
        const { result, write } = change(data, this.#now())
        if (!write) return result
        committed = true
        await held.commit(JSON.stringify(data))
        return result
      } catch (err) {
        if (!(err instanceof AH_ERR_TASK_LOCK_COMPROMISED) || attempt >= 3) throw err
      } finally {
        if (!committed) await held.release()
      }
    }
  }

  #find (data: GraphFile, id: string): number {
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
    return (await this.#read()).tasks.find((t) => t.id === id)
  }

  async list (query: TaskQuery = {}): Promise<TaskNode[]> {
    return filter((await this.#read()).tasks, query)
  }

  async claim (type: string, owner: string, leaseMs: number): Promise<TaskNode | undefined> {
    return await this.#locked((data, now) => {
      const status = new Map(data.tasks.map((t) => [t.id, t.status]))
      const candidates = data.tasks.filter((t) => claimable(t, type, now, (id) => status.get(id))).sort(claimOrder)
      const chosen = candidates[0]
      if (chosen === undefined) return { result: undefined, write: false }
      const claimed = claimNode(chosen, owner, leaseMs, now)
      data.tasks[this.#find(data, chosen.id)] = claimed
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

  async close (): Promise<void> {}
}
