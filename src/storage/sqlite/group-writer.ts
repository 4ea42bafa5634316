import { SpanStatusCode, type Tracer } from '@opentelemetry/api'
import { ATTR_DB_SYSTEM_NAME, ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions'
import { AH_ERR_STORAGE_BUSY } from '../../errors.js'
import { isBusy } from '../busy.js'
import type Database from 'better-sqlite3'
import type { Db } from './database.js'

interface Entry {
  op: () => unknown
  resolve: (value: unknown) => void
  reject: (err: unknown) => void
  /** When the caller stops waiting for another process's lock (ms since epoch). */
  deadline: number
  budgetMs: number
  outcome?: { ok: true, value: unknown } | { ok: false, error: unknown }
}

/** What one commit did (for metrics and benchmarks). */
export interface CommitStats {
  /** Writes in the transaction. */
  writes: number
  /** Writes that failed on their own (rolled back to their savepoint; the others committed). */
  failed: number
}

export interface GroupWriterOptions {
  /** DB_WRITE_BUDGET_MS: how long a write may wait for a lock held by another process. */
  budgetMs: number
  /** Told after every commit. */
  onCommit?: (stats: CommitStats) => void
}

/** The commit span's own attributes (no convention fits them). */
export const COMMIT_ATTRIBUTES = {
  writes: 'agent_host.storage.writes',
  failed: 'agent_host.storage.failed_writes',
  busyRetries: 'agent_host.storage.busy_retries'
} as const

/**
 * Group commit: the one way the run engine writes. Every write queued during one turn of the event
 * loop runs in one immediate transaction, each in its own savepoint (a write that throws is rolled
 * back alone and its caller gets the error), and every caller's promise settles only after the
 * commit that holds its write, so nothing is acknowledged before it is durable.
 *
 * Why: a commit is the expensive part of a SQLite write (WAL frames for every page touched, the
 * lock, the fsync policy). Fifty concurrent runs each committing their run row, journal batch,
 * session value, interaction and audit row paid for ~4 commits a request; batched, pages shared by
 * those writes (index roots, the audit head, the search index) are written once per turn.
 *
 * While another process holds the write lock the batch is retried without blocking the loop
 * (5 ms doubling to 200 ms); writes whose budget runs out first fail with 503 `AH_ERR_STORAGE_BUSY`.
 */
export class SqliteGroupWriter {
  readonly #options: GroupWriterOptions
  readonly #commit: Database.Transaction<(batch: Entry[]) => void>
  readonly #savepoint: (op: () => unknown) => unknown
  #queue: Entry[] = []
  #scheduled: NodeJS.Immediate | NodeJS.Timeout | undefined
  #backoffMs = 0
  #closed = false
  #committing = false
  #tracer: Tracer | undefined
  /** Tries since the last commit that found the lock held by another process. */
  #busyTries = 0

  constructor (db: Db, options: GroupWriterOptions) {
    this.#options = options
    // called inside #commit's transaction, better-sqlite3 makes this a SAVEPOINT
    this.#savepoint = db.transaction((op: () => unknown) => op())
    this.#commit = db.transaction((batch: Entry[]) => {
      for (const entry of batch) {
        try {
          entry.outcome = { ok: true, value: this.#savepoint(entry.op) }
        } catch (error) {
          entry.outcome = { ok: false, error }
        }
      }
    })
  }

  /**
   * Queue `op` (synchronous database work, no transaction of its own needed) for this turn's
   * commit. Resolves with its result once committed.
   * @param budgetMs how long to wait for another process's lock (default DB_WRITE_BUDGET_MS)
   * @throws (rejects) what `op` threw; AH_ERR_STORAGE_BUSY past the budget
   */
  async write<T>(op: () => T, budgetMs = this.#options.budgetMs): Promise<T> {
    if (this.#closed) return this.#savepoint(op) as T
    return await new Promise<T>((resolve, reject) => {
      this.#queue.push({ op, resolve: resolve as (value: unknown) => void, reject, deadline: Date.now() + budgetMs, budgetMs })
      this.#schedule()
    })
  }

  /**
   * Trace every transaction as a `storage.commit` span: the writes it held, those rolled back alone,
   * and how many tries before it found the lock held elsewhere. Each is a root span of its own: one
   * commit serves the writes of many runs at once, so it is the child of none of them.
   */
  trace (tracer: Tracer | undefined): void {
    this.#tracer = tracer
  }

  /** Writes queued and not yet committed. */
  get pending (): number {
    return this.#queue.length
  }

  /**
   * Commit what is queued now, then write synchronously (closing: the database is about to be
   * closed, and nothing will come back for a later turn).
   */
  close (): void {
    this.#closed = true
    if (this.#scheduled !== undefined) { clearImmediate(this.#scheduled as NodeJS.Immediate); clearTimeout(this.#scheduled as NodeJS.Timeout) }
    this.#scheduled = undefined
    this.#run(true)
  }

  /**
   * Commit what is queued in this call instead of at the end of the turn (a producer that does not
   * wait must not pile its output up). Returns whether everything queued is now committed: false
   * while another process holds the lock (the queue waits for its retry) or when the commit failed.
   */
  commitNow (): boolean {
    if (this.#backoffMs > 0 || this.#committing) return false
    if (this.#scheduled !== undefined) clearImmediate(this.#scheduled as NodeJS.Immediate)
    return this.#run(false)
  }

  #schedule (): void {
    if (this.#scheduled === undefined && this.#backoffMs === 0) this.#scheduled = setImmediate(() => { this.#run(false) })
  }

  /** Commit the queue; returns whether it committed. */
  #run (final: boolean): boolean {
    this.#scheduled = undefined
    const batch = this.#queue
    this.#queue = []
    if (batch.length === 0) return true
    this.#committing = true
    const started = this.#tracer === undefined ? 0 : performance.now()
    try {
      this.#commit.immediate(batch)
    } catch (err) {
      if (isBusy(err) && !final) { this.#busyTries++; this.#retryLater(batch, err); return false }
      if (this.#tracer !== undefined) this.#span(started, batch.length, 0, err)
      for (const entry of batch) entry.reject(err)
      return false
    } finally {
      this.#committing = false
    }
    this.#backoffMs = 0
    let failed = 0
    for (const entry of batch) {
      const outcome = entry.outcome as NonNullable<Entry['outcome']>
      if (outcome.ok) entry.resolve(outcome.value)
      else { failed++; entry.reject(outcome.error) }
    }
    if (this.#tracer !== undefined) this.#span(started, batch.length, failed, undefined)
    this.#options.onCommit?.({ writes: batch.length, failed })
    if (this.#queue.length > 0) this.#schedule()
    return true
  }

  /** Record a transaction that ended (committed, or failed as a whole with `error`) as a span, from `started` to now. */
  #span (started: number, writes: number, failed: number, error: unknown): void {
    const span = (this.#tracer as Tracer).startSpan('storage.commit', {
      root: true,
      startTime: started,
      attributes: {
        [ATTR_DB_SYSTEM_NAME]: 'sqlite',
        [COMMIT_ATTRIBUTES.writes]: writes,
        [COMMIT_ATTRIBUTES.failed]: failed,
        [COMMIT_ATTRIBUTES.busyRetries]: this.#busyTries
      }
    })
    this.#busyTries = 0
    if (error !== undefined) {
      span.setAttribute(ATTR_ERROR_TYPE, String((error as { code?: unknown } | null)?.code ?? 'error'))
      span.setStatus({ code: SpanStatusCode.ERROR, message: String((error as { message?: unknown } | null)?.message ?? error) })
    }
    span.end(performance.now())
  }

  /** Another process holds the lock: fail the writes out of budget, try the rest again later. */
  #retryLater (batch: Entry[], cause: unknown): void {
    const now = Date.now()
    this.#backoffMs = Math.min(Math.max(this.#backoffMs * 2, 5), 200)
    const waiting = batch.filter((entry) => {
      if (now + this.#backoffMs <= entry.deadline) return true
      entry.reject(new AH_ERR_STORAGE_BUSY(entry.budgetMs, { cause }))
      return false
    })
    this.#queue = [...waiting, ...this.#queue]
    if (this.#queue.length === 0) { this.#backoffMs = 0; return }
    this.#scheduled = setTimeout(() => { this.#run(false) }, this.#backoffMs)
  }
}
