import { randomUUID } from 'node:crypto'
import type pg from 'pg'
import { inTransaction, PG_LOCKS } from './database.js'

export interface PgStreamGateOptions {
  /** MAX_STREAMS: streams this instance serves at once (0: no limit). A per-instance capacity. */
  max: number
  /** MAX_STREAMS_PER_CALLER: streams one caller holds at once across every instance (0: no limit). */
  perCaller: number
  /** This instance's name, shown beside its lease in `stream_leases`. */
  instance: string
  /** How long this instance's slots outlive its last heartbeat (ms; default 15 000). It beats every third of that. */
  leaseMs?: number
  /** A heartbeat or a release that failed (never thrown: the next heartbeat repairs it). */
  onError?: (err: Error) => void
}

// the database's clock, so that every instance agrees on when a lease lapsed
const NOW = '(extract(epoch FROM clock_timestamp()) * 1000)::bigint'

// under the caller's lock: count the caller's slots held under live leases, and take one if the
// count allows and this instance's own lease is alive (else the slot would count for nobody)
const TAKE = `WITH mine AS (SELECT count(*)::int AS alive FROM stream_leases WHERE holder = $3 AND lease_expires_at > ${NOW}),
  held AS (SELECT count(*)::int AS n FROM stream_slots s JOIN stream_leases l ON l.holder = s.holder WHERE s.caller = $2 AND l.lease_expires_at > ${NOW}),
  taken AS (INSERT INTO stream_slots (id, holder, caller, acquired_at) SELECT $1, $3, $2, ${NOW} FROM mine, held WHERE mine.alive = 1 AND held.n < $4 RETURNING id)
  SELECT (SELECT alive FROM mine) AS alive, (SELECT count(*)::int FROM taken) AS taken`

const HELD = `SELECT count(*)::int AS n FROM stream_slots s JOIN stream_leases l ON l.holder = s.holder WHERE s.caller = $1 AND l.lease_expires_at > ${NOW}`

/**
 * The SSE stream caps with the per-caller quota shared by every instance on the database: the
 * contract of `http/stream-gate.ts:StreamGate` (a slot taken before a stream starts, given back once
 * when it ends, `caller` answered before `total` when both are full), with an async `acquire`.
 * `MAX_STREAMS_PER_CALLER` counts a caller's streams on every instance; `MAX_STREAMS` stays this
 * instance's own capacity, counted in memory.
 *
 * Each slot is a row of `stream_slots` held under this instance's lease (`stream_leases`), which a
 * heartbeat renews every `leaseMs / 3`: the slots of an instance that was killed stop counting once
 * its lease lapses, and any instance's heartbeat deletes them. An instance that finds its own lease
 * lapsed (it was paused, or the database was away) takes a new one and puts back the slots of the
 * streams it still serves, even past the quota: those streams are open already.
 * `start` takes the lease (`acquire` does it when needed); `close` gives every slot back.
 */
export class PgStreamGate {
  readonly #pool: pg.Pool
  readonly #max: number
  readonly #perCaller: number
  readonly #instance: string
  readonly #leaseMs: number
  readonly #onError: (err: Error) => void
  // this instance's slots: confirmed once their row is committed (a pending one is being taken)
  readonly #held = new Map<string, { caller: string, confirmed: boolean }>()
  #holder = randomUUID()
  #open = 0
  #started: Promise<void> | undefined
  #leasing: Promise<void> | undefined
  #beating: Promise<void> | undefined
  #timer: NodeJS.Timeout | undefined
  #closed = false

  constructor (pool: pg.Pool, options: PgStreamGateOptions) {
    this.#pool = pool
    this.#max = options.max
    this.#perCaller = options.perCaller
    this.#instance = options.instance
    this.#leaseMs = options.leaseMs ?? 15_000
    this.#onError = (err) => { options.onError?.(err) }
  }

  /** Streams open on this instance now. */
  get open (): number { return this.#open }

  /** Take this instance's lease and start its heartbeat (once; nothing to do without a per-caller quota). */
  async start (): Promise<void> {
    if (this.#perCaller <= 0) return
    this.#started ??= this.#lease().then(() => {
      this.#timer = setInterval(() => { this.heartbeat().catch(this.#onError) }, Math.max(1, Math.floor(this.#leaseMs / 3)))
      this.#timer.unref()
    }, (err: unknown) => {
      this.#started = undefined
      throw err
    })
    await this.#started
  }

  /**
   * Take a slot for `caller`. Resolves to the function that gives it back (safe to call twice), or
   * to which limit is full; a closed gate is full, and so is one that cannot keep its lease alive
   * long enough to take a slot under it (a `leaseMs` shorter than a round trip). Rejects when the
   * database cannot be reached.
   */
  async acquire (caller: string): Promise<(() => void) | 'caller' | 'total'> {
    if (this.#closed) return 'total'
    if (this.#max > 0 && this.#open >= this.#max) {
      return this.#perCaller > 0 && await this.held(caller) >= this.#perCaller ? 'caller' : 'total'
    }
    // counted before the first await, so that this instance's concurrent acquires cannot pass MAX_STREAMS
    this.#open++
    const id = randomUUID()
    if (this.#perCaller > 0) {
      this.#held.set(id, { caller, confirmed: false })
      let refused: 'caller' | 'total' | undefined
      try {
        refused = await this.#take(id, caller)
      } catch (err) {
        this.#held.delete(id)
        this.#open--
        throw err
      }
      if (refused !== undefined) {
        this.#held.delete(id)
        this.#open--
        return refused
      }
    }
    let released = false
    return () => {
      if (released) return
      released = true
      this.#open--
      if (!this.#held.delete(id)) return
      // on failure the row stays until the next heartbeat, which deletes the rows of slots no longer held
      this.#pool.query('DELETE FROM stream_slots WHERE id = $1', [id]).catch(this.#onError)
    }
  }

  /** How many streams `caller` holds now across every instance. */
  async held (caller: string): Promise<number> {
    const { rows } = await this.#pool.query<{ n: number }>(HELD, [caller])
    return (rows[0] as { n: number }).n
  }

  /**
   * Renew this instance's lease (a new one if it lapsed), delete the rows of slots it no longer
   * holds and the leases (with their slots) of instances that stopped beating. The timer calls it;
   * failures go to `onError`. Never two at once.
   */
  async heartbeat (): Promise<void> {
    this.#beating ??= this.#beat().catch(this.#onError).finally(() => { this.#beating = undefined })
    await this.#beating
  }

  /** Stop the heartbeat and give back every slot of this instance (its lease and its rows). */
  async close (): Promise<void> {
    this.#closed = true
    clearInterval(this.#timer)
    await this.#beating
    if (this.#started === undefined) return
    await this.#pool.query('DELETE FROM stream_leases WHERE holder = $1', [this.#holder])
  }

  /** Take slot `id` for `caller` in the database: undefined when taken, else which limit refused it. */
  async #take (id: string, caller: string): Promise<'caller' | 'total' | undefined> {
    await this.start()
    for (let attempt = 1; ; attempt++) {
      const holder = this.#holder
      const result = await inTransaction(this.#pool, async (client) => {
        // one acquire per caller at a time across every instance: two that both counted N-1 would make N+1
        await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [PG_LOCKS.streamQuota, caller])
        const { rows } = await client.query<{ alive: number, taken: number }>(TAKE, [id, caller, holder, this.#perCaller])
        return rows[0] as { alive: number, taken: number }
      })
      if (result.alive === 0) {
        if (attempt === 2) return 'total'
        // this instance's lease lapsed (it was paused, or the database was away): take a new one and try again
        await this.#relapse(holder)
        continue
      }
      if (result.taken === 0) return 'caller'
      const slot = this.#held.get(id)
      if (slot !== undefined) slot.confirmed = true
      // a new lease was taken while this slot was committed under the old one: move it
      if (holder !== this.#holder) {
        await this.#leasing
        await this.#pool.query('UPDATE stream_slots SET holder = $1 WHERE id = $2', [this.#holder, id])
      }
      return undefined
    }
  }

  async #beat (): Promise<void> {
    if (this.#started === undefined || this.#closed) return
    const holder = this.#holder
    const renewed = await this.#pool.query(`UPDATE stream_leases SET lease_expires_at = ${NOW} + $2 WHERE holder = $1 AND lease_expires_at > ${NOW}`, [holder, this.#leaseMs])
    if (renewed.rowCount === 0) await this.#relapse(holder)
    else await this.#pool.query('DELETE FROM stream_slots WHERE holder = $1 AND id <> ALL($2::text[])', [holder, [...this.#held.keys()]])
    await this.#pool.query(`DELETE FROM stream_leases WHERE lease_expires_at <= ${NOW}`)
  }

  /** A new lease in place of `lapsed` (once, however many found it lapsed), with the slots of the streams still open. */
  async #relapse (lapsed: string): Promise<void> {
    if (this.#holder === lapsed) {
      this.#holder = randomUUID()
      this.#leasing = undefined
    }
    await this.#lease()
  }

  /** Take the lease of the current holder, putting this instance's confirmed slots under it. */
  async #lease (): Promise<void> {
    this.#leasing ??= (async () => {
      const holder = this.#holder
      const slots = [...this.#held].filter(([, s]) => s.confirmed)
      await inTransaction(this.#pool, async (client) => {
        await client.query(`INSERT INTO stream_leases (holder, instance, lease_expires_at) VALUES ($1, $2, ${NOW} + $3)`, [holder, this.#instance, this.#leaseMs])
        if (slots.length > 0) {
          await client.query(`INSERT INTO stream_slots (id, holder, caller, acquired_at) SELECT id, $1, caller, ${NOW} FROM unnest($2::text[], $3::text[]) AS s(id, caller)
            ON CONFLICT (id) DO UPDATE SET holder = EXCLUDED.holder`, [holder, slots.map(([id]) => id), slots.map(([, s]) => s.caller)])
        }
      })
    })().catch((err: unknown) => {
      this.#leasing = undefined
      throw err
    })
    await this.#leasing
  }
}
