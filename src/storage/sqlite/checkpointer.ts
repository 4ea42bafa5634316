import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'

// CommonJS run with `eval`: the worker needs no TypeScript loader, under tests or from dist/.
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads')
const Database = require(workerData.driver)
const db = new Database(workerData.file)
db.pragma('busy_timeout = 0')
const checkpoint = () => {
  try {
    const [row] = db.pragma('wal_checkpoint(PASSIVE)')
    parentPort.postMessage(row)
  } catch (err) {
    // a checkpoint by another process, or a writer mid-commit: the next tick goes on
  }
}
const timer = setInterval(checkpoint, workerData.intervalMs)
parentPort.on('message', (message) => {
  if (message !== 'stop') return
  clearInterval(timer)
  checkpoint()
  db.close()
  parentPort.close()
})
`

/** What one checkpoint did (SQLite's `wal_checkpoint` result). */
export interface CheckpointResult {
  /** 1 when the checkpoint could not run (another connection was checkpointing). */
  busy: number
  /** Frames in the WAL. */
  log: number
  /** Frames copied into the database file so far. */
  checkpointed: number
}

/**
 * Copies the WAL into the database file from a worker thread with its own connection, every
 * `intervalMs`, instead of inside whichever commit crosses SQLite's 1 000-page mark: the copy and
 * its fsync never run on the event loop, and a page written by many commits between two
 * checkpoints is copied once. The main connection runs with `wal_autocheckpoint = 0`.
 *
 * PASSIVE checkpoints never wait for readers or writers; several processes on one DATA_DIR may each
 * run one (SQLite lets one checkpoint run at a time).
 */
export class SqliteCheckpointer {
  readonly #worker: Worker
  readonly #exited: Promise<void>
  #last: CheckpointResult | undefined
  #closing = false

  /** @param onFailed told if the worker dies (the caller should let SQLite checkpoint again) */
  constructor (file: string, intervalMs: number, onFailed: (err: unknown) => void = () => {}) {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3')
    this.#worker = new Worker(WORKER, { eval: true, workerData: { file, driver, intervalMs } })
    this.#worker.on('message', (row: CheckpointResult) => { this.#last = row })
    // a failure once closing has begun is no one's to act on: the caller is closing the database
    this.#worker.on('error', (err) => { if (!this.#closing) onFailed(err) })
    this.#exited = new Promise<void>((resolve) => { this.#worker.once('exit', () => { resolve() }) })
    this.#worker.unref()
  }

  /** The latest checkpoint's result, if one has run. */
  get last (): CheckpointResult | undefined {
    return this.#last
  }

  /** Checkpoint once more and stop. */
  async close (): Promise<void> {
    this.#closing = true
    // unref'd so that it never holds the process open; while it finishes, it must
    this.#worker.ref()
    this.#worker.postMessage('stop')
    await this.#exited
  }
}
