import type pg from 'pg'

/**
 * Where a write stands in the order of cluster-wide locks: `plain` takes none (row locks only),
 * `events` the event log's (`PG_LOCKS.events`), `audit` the audit chain's (`PG_LOCKS.audit`,
 * possibly after the event log's).
 */
export const WRITE_RANK = { plain: 0, events: 1, audit: 2 } as const
export type WriteRank = typeof WRITE_RANK[keyof typeof WRITE_RANK]

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
 * WAL flush) instead of fifty. While a transaction is in flight the next turn's writes wait for it.
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
  #inflight: Promise<void> | undefined
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
    while (this.#inflight !== undefined || this.#queue.length > 0) {
      this.#schedule()
      await (this.#inflight ?? new Promise<void>((resolve) => setImmediate(resolve)))
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
      this.#inflight = this.#commit(batch).finally(() => {
        this.#inflight = undefined
        if (this.#queue.length > 0) this.#schedule()
      })
    })
  }

  async #commit (batch: Entry[]): Promise<void> {
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
        const committed = await this.#alone(client, batch[0] as Entry)
        this.#onCommit?.({ writes: 1, failed: committed ? 0 : 1 })
        return
      }
      const values: unknown[] = []
      try {
        await client.query('BEGIN')
        for (const entry of batch) values.push(await entry.op(client))
        await client.query('COMMIT')
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
  async #alone (client: pg.PoolClient, entry: Entry): Promise<boolean> {
    try {
      await client.query('BEGIN')
      const value = await entry.op(client)
      await client.query('COMMIT')
      entry.resolve(value)
      return true
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {})
      entry.reject(err)
      return false
    }
  }
}
