import type pg from 'pg'
import { isUnavailable } from '../busy.js'

/**
 * Where a write stands in the order of cluster-wide locks: `plain` takes none (row locks only),
 * `events` the event log's (`PG_LOCKS.events`), `audit` the audit chain's (`PG_LOCKS.audit`,
 * possibly after the event log's).
 */
export const WRITE_RANK = { plain: 0, events: 1, audit: 2 } as const
export type WriteRank = typeof WRITE_RANK[keyof typeof WRITE_RANK]

/** Transactions whose COMMIT may be awaited at once while the next one runs (each holds a pooled connection). */
const MAX_COMMITTING = 2

/** One write: statements on a client that is inside a transaction. */
export type PgWrite<T> = (client: pg.ClientBase) => Promise<T>

interface Entry {
  op: PgWrite<unknown>
  rank: number
  resolve: (value: unknown) => void
  reject: (err: unknown) => void
}

/**
 * Group commit on PostgreSQL: the writes queued during one turn of the event loop run in one
 * transaction on one connection, and each caller's promise settles only after that commit, so
 * nothing is acknowledged before it is durable and fifty runs' journal batches cost one commit (one
 * WAL flush) instead of fifty. While a transaction runs its statements the next turn's writes wait;
 * once it has sent its COMMIT, the next turn runs on another connection while that COMMIT waits for
 * its WAL flush. The first transaction's row and advisory locks are held until its COMMIT, so
 * wherever the two touch the same rows or locks the second waits for the first and sees it
 * committed, as if they had run one after the other.
 *
 * A write that throws aborts the whole transaction in PostgreSQL, so the batch is rolled back and
 * each of its writes is then run alone, in its own transaction: the one that failed fails alone.
 * Writes must therefore be safe to run twice (they are: the first run was rolled back).
 *
 * Writes that take cluster-wide advisory locks (held until the commit) say so by their `rank`, and a
 * transaction runs its writes in rank order: every instance then takes those locks in one order (the
 * event log's before the audit chain's), so two instances' transactions never wait for each other in
 * a cycle, and the locks are held for the shortest part of the transaction.
 */
export class PgGroupWriter {
  readonly #pool: pg.Pool
  #queue: Entry[] = []
  #scheduled = false
  /** The transaction running its statements: the next one starts when this one sends its COMMIT. */
  #inflight: Promise<void> | undefined
  /** Transactions whose COMMIT is on its way (their callers settle when it is acknowledged). */
  readonly #committing = new Set<Promise<void>>()
  /** Told after every transaction (writes, and whether it committed as one). */
  readonly #onCommit: ((stats: { writes: number, failed: number }) => void) | undefined

  constructor (pool: pg.Pool, options: { onCommit?: (stats: { writes: number, failed: number }) => void } = {}) {
    this.#pool = pool
    this.#onCommit = options.onCommit
  }

  /**
   * Queue `op` for this turn's transaction. Resolves with its result once committed.
   * @param rank the last advisory lock `op` takes (see {@link WRITE_RANK})
   * @throws (rejects) what `op` threw, or the connection's error
   */
  async write<T>(op: PgWrite<T>, rank: WriteRank = WRITE_RANK.plain): Promise<T> {
    return await new Promise<T>((resolve, reject) => {
      this.#queue.push({ op, rank, resolve: resolve as (value: unknown) => void, reject })
      this.#schedule()
    })
  }

  /** Writes queued and not yet committed. */
  get pending (): number {
    return this.#queue.length
  }

  /** Wait until everything queued so far is committed (or failed). */
  async drain (): Promise<void> {
    while (this.#inflight !== undefined || this.#queue.length > 0 || this.#committing.size > 0) {
      this.#schedule()
      await (this.#inflight ?? [...this.#committing][0] ?? new Promise<void>((resolve) => setImmediate(resolve)))
    }
  }

  #schedule (): void {
    if (this.#scheduled || this.#inflight !== undefined) return
    this.#scheduled = true
    setImmediate(() => {
      this.#scheduled = false
      if (this.#queue.length === 0 || this.#inflight !== undefined) return
      // stable: writes of one rank keep their order
      const batch = this.#queue.sort((a, b) => a.rank - b.rank)
      this.#queue = []
      let sent!: () => void
      const statementsDone = new Promise<void>((resolve) => { sent = resolve })
      const whole = this.#commit(batch, sent).finally(() => {
        sent()
        this.#committing.delete(whole)
      })
      this.#committing.add(whole)
      this.#inflight = statementsDone.then(async () => {
        // a COMMIT waits for its WAL flush: the next turn runs its statements meanwhile, on another
        // connection (PostgreSQL may flush both commits at once), but never more than a few at a time
        while (this.#committing.size > MAX_COMMITTING) await Promise.race(this.#committing)
      }).finally(() => {
        this.#inflight = undefined
        if (this.#queue.length > 0) this.#schedule()
      })
    })
  }

  /**
   * Run `batch` in one transaction and settle its callers. `sent()` is called once its statements
   * have run and its COMMIT is sent (or it ended otherwise): its row and advisory locks are held
   * until that COMMIT, so a next transaction's writes that touch the same rows or take the same
   * locks wait for it and come after it, as they would if it ran only after the commit.
   */
  async #commit (batch: Entry[], sent: () => void): Promise<void> {
    let client: pg.PoolClient
    try {
      client = await this.#pool.connect()
    } catch (err) {
      for (const entry of batch) entry.reject(err)
      return
    }
    let broken: unknown
    try {
      if (batch.length === 1) {
        const committed = await this.#alone(client, batch[0] as Entry, sent)
        this.#onCommit?.({ writes: 1, failed: committed ? 0 : 1 })
        return
      }
      const values: unknown[] = []
      try {
        await client.query('BEGIN')
        for (const entry of batch) values.push(await entry.op(client))
        const commit = client.query('COMMIT')
        sent()
        await commit
      } catch (err) {
        await client.query('ROLLBACK').catch((rollback: unknown) => { broken = rollback })
        if (broken !== undefined) {
          for (const entry of batch) entry.reject(err)
          return
        }
        let failed = 0
        for (const entry of batch) if (!await this.#alone(client, entry)) failed++
        this.#onCommit?.({ writes: batch.length, failed })
        return
      }
      batch.forEach((entry, i) => { entry.resolve(values[i]) })
      this.#onCommit?.({ writes: batch.length, failed: 0 })
    } finally {
      // a connection that failed mid-transaction is closed, not given back to the pool
      client.release(broken instanceof Error ? broken : undefined)
    }
  }

  /** Run one write in a transaction of its own; settles its caller. Returns whether it committed. */
  async #alone (client: pg.PoolClient, entry: Entry, sent?: () => void): Promise<boolean> {
    try {
      await client.query('BEGIN')
      const value = await entry.op(client)
      const commit = client.query('COMMIT')
      sent?.()
      await commit
      entry.resolve(value)
      return true
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {})
      entry.reject(err)
      return false
    }
  }
}

/** A batch of {@link PgBatch}: its items, its write, and, once it failed, each item's write alone. */
interface Batch<I, R> { items: I[], done: Promise<R[]>, alone?: Array<Promise<R[]>> }

/**
 * Writes of one kind gathered into one statement per transaction: every item added while the
 * group writer has not yet run the batch joins it, so a turn of fifty writes is one round trip,
 * not fifty. When a batch of several fails for a reason other than a lost database (it was rolled
 * back), each item is run again alone, so the one at fault fails alone.
 */
export class PgBatch<I, R> {
  readonly #writer: PgGroupWriter
  readonly #run: (client: pg.ClientBase, items: readonly I[]) => Promise<R[]>
  readonly #rank: WriteRank
  #open: Batch<I, R> | undefined

  /** @param run writes `items` on a client inside a transaction, returning one result per item, in order */
  constructor (writer: PgGroupWriter, run: (client: pg.ClientBase, items: readonly I[]) => Promise<R[]>, rank: WriteRank = WRITE_RANK.plain) {
    this.#writer = writer
    this.#run = run
    this.#rank = rank
  }

  /** Add `item` to the batch to come; resolves with its result once committed. */
  async add (item: I): Promise<R> {
    let batch = this.#open
    if (batch === undefined) {
      const items: I[] = []
      const opened: Batch<I, R> = {
        items,
        done: this.#writer.write(async (client) => {
          if (this.#open === opened) this.#open = undefined
          return await this.#run(client, items)
        }, this.#rank)
      }
      this.#open = batch = opened
    }
    const i = batch.items.push(item) - 1
    try {
      return (await batch.done)[i] as R
    } catch (err) {
      if (batch.items.length === 1 || isUnavailable(err)) throw err
      batch.alone ??= batch.items.map((one) => this.#writer.write(async (client) => await this.#run(client, [one]), this.#rank))
      return (await batch.alone[i] as R[])[0] as R
    }
  }
}
