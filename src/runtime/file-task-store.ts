import { randomBytes, randomInt } from 'node:crypto'
import { open, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import lockfile from 'proper-lockfile'
import { AH_ERR_TASK_LOCK_COMPROMISED, AH_ERR_TASK_NOT_FOUND } from '../errors.js'
import {
  claimable, claimNode, claimOrder, cancelNode, completeNode, createNodes, failNode, heartbeatNode, leaseExpired, retryOrFail
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
 * read-modify-write holds a proper-lockfile lock on the file (`tasks.graph.json.lock`; while another
 * holder has it we wait in short randomised steps for up to `lockWaitMs`, any other failure such as
 * a missing directory is thrown at once; a lock left by a dead process is taken over once stale), and the new
 * content is written to a temporary file, fsynced and renamed over the old one, so a reader never
 * sees a partial file. Tools that take the same lock can share the file safely.
 */
export class FileTaskStore implements TaskStore {
  readonly file: string
  readonly #now: () => Date
  readonly #retryBaseMs: number
  readonly #retryCapMs: number
  readonly #staleMs: number
  readonly #lockWaitMs: number

  /**
   * @param options.staleMs age after which a lock whose holder stopped refreshing it is taken over
   * @param options.lockWaitMs how long an operation waits for a held lock before failing with ELOCKED
   */
  constructor (dataDir: string, options: TaskStoreOptions & { staleMs?: number, lockWaitMs?: number } = {}) {
    this.file = join(dataDir, TASK_GRAPH_FILE)
    this.#now = options.now ?? (() => new Date())
    this.#retryBaseMs = options.retryBaseMs ?? 1000
    this.#retryCapMs = options.retryCapMs ?? 60_000
    this.#staleMs = options.staleMs ?? 10_000
    this.#lockWaitMs = options.lockWaitMs ?? 30_000
    mkdirSync(dirname(this.file), { recursive: true })
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

  async #write (data: GraphFile): Promise<void> {
    const tmp = `${this.file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`
    try {
      await writeFile(tmp, JSON.stringify(data))
      const handle = await open(tmp, 'r+')
      try { await handle.sync() } finally { await handle.close() }
      await rename(tmp, this.file)
    } catch (err) {
      await rm(tmp, { force: true })
      throw err
    }
  }

  /**
   * Take the lock. proper-lockfile's own retries would also retry errors that cannot clear (a
   * deleted DATA_DIR is retried for minutes), so only a held lock (ELOCKED) is waited out here.
   */
  async #lock (onCompromised: (err: Error) => void): Promise<() => Promise<void>> {
    const deadline = Date.now() + this.#lockWaitMs
    for (let wait = 2; ; wait = Math.min(50, Math.ceil(wait * 1.5))) {
      try {
        return await lockfile.lock(this.file, { realpath: false, stale: this.#staleMs, onCompromised })
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ELOCKED' || Date.now() >= deadline) throw err
      }
      await sleep(randomInt(1, wait + 1))
    }
  }

  /** Run `change` on the graph under the lock; write the graph back when it says so. */
  async #locked<T>(change: (data: GraphFile, now: Date) => { result: T, write: boolean }): Promise<T> {
    let compromised: unknown
    const release = await this.#lock((err) => { compromised = err })
    try {
      const data = await this.#read()
      const { result, write } = change(data, this.#now())
      if (write) {
        if (compromised !== undefined) throw new AH_ERR_TASK_LOCK_COMPROMISED(this.file, { cause: compromised })
        await this.#write(data)
      }
      return result
    } finally {
      await release().catch(() => {})
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
