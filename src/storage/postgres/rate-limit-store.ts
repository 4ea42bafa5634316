import type pg from 'pg'
import type { FastifyRateLimitOptions, FastifyRateLimitStore, FastifyRateLimitStoreCtor } from '@fastify/rate-limit'
import { AH_ERR_CONFIG_INVALID } from '../../errors.js'

export interface PgRateLimitOptions {
  /** The name of this registration's limits in the table (default `rate`). */
  limit?: string
  /** How often this instance deletes the rows of windows that ended (ms; default 60 000). */
  pruneEveryMs?: number
  /** A prune that failed (never thrown: the next one retries). */
  onPruneError?: (err: Error) => void
}

/** What @fastify/rate-limit hands a store: its options, and for a route's own limit the route. */
interface StoreParams {
  nameSpace?: string
  continueExceeding?: boolean
  exponentialBackoff?: boolean
  /** Given to `child`: the route (empty for a limit of `app.createRateLimit`). */
  routeInfo?: { method?: string | string[], url?: string }
}

type Callback = (error: Error | null, result?: { current: number, ttl: number }) => void

// the database's clock, so that every instance agrees on when a window ends
const NOW = '(extract(epoch FROM statement_timestamp()) * 1000)::bigint'

// one round trip per request: a window starts at the first hit after the last one ended (as in the
// plugin's in-process store); the row lock orders concurrent hits from every instance
const INCR = `INSERT INTO rate_limits AS r (limit_name, key, window_start, expires_at, hits)
  VALUES ($1, $2, ${NOW}, ${NOW} + $3, 1)
  ON CONFLICT (limit_name, key) DO UPDATE SET
    hits = CASE WHEN r.expires_at <= EXCLUDED.window_start THEN 1 ELSE r.hits + 1 END,
    window_start = CASE WHEN r.expires_at <= EXCLUDED.window_start THEN EXCLUDED.window_start ELSE r.window_start END,
    expires_at = CASE WHEN r.expires_at <= EXCLUDED.window_start THEN EXCLUDED.expires_at ELSE r.expires_at END
  RETURNING hits, (expires_at - ${NOW})::float8 AS ttl`

const READ = `SELECT hits, (expires_at - ${NOW})::float8 AS ttl FROM rate_limits WHERE limit_name = $1 AND key = $2 AND expires_at > ${NOW}`

const PRUNE = `DELETE FROM rate_limits WHERE expires_at <= ${NOW}`

/** What the stores of one plugin registration share. */
interface Shared {
  pool: pg.Pool
  pruneEveryMs: number
  onPruneError: (err: Error) => void
  lastPrune: number
}

/**
 * A @fastify/rate-limit store over the `rate_limits` table, so that a limit of N per window is N
 * across every instance on the database, not N per instance. Give the plugin
 * `store: pgRateLimitStore(pool)`.
 *
 * Windows are fixed, as in the plugin's in-process store: one row per limit and key, its window
 * starting with the first hit after the previous one ended, timed by the database's clock. Each
 * counted request costs one statement (an upsert that returns the count); each instance deletes
 * the rows of ended windows every `pruneEveryMs` on the side. Limits are named by `options.limit`
 * (default `rate`), a route's own limit by its method and URL beside it, and one that
 * `app.createRateLimit` makes by the `nameSpace` it is given (`{ max, keyGenerator, nameSpace:
 * 'agent' }`); without one, the limits that `app.createRateLimit` makes share one count per key
 * (as with the plugin's Redis store), so their keys must differ.
 * `continueExceeding` and `exponentialBackoff` are refused: a fixed window does not move.
 */
export function pgRateLimitStore (pool: pg.Pool, options: PgRateLimitOptions = {}): FastifyRateLimitStoreCtor {
  const shared: Shared = {
    pool,
    pruneEveryMs: options.pruneEveryMs ?? 60_000,
    onPruneError: (err) => { options.onPruneError?.(err) },
    lastPrune: Date.now()
  }
  return class extends PgRateLimitStore {
    constructor (params: FastifyRateLimitOptions) {
      super(shared, options.limit ?? 'rate', params as StoreParams)
    }
  }
}

class PgRateLimitStore implements FastifyRateLimitStore {
  readonly #shared: Shared
  readonly #limit: string

  constructor (shared: Shared, limit: string, params: StoreParams) {
    if (params.continueExceeding === true || params.exponentialBackoff === true) {
      throw new AH_ERR_CONFIG_INVALID('the PostgreSQL rate-limit store keeps fixed windows: continueExceeding and exponentialBackoff are not supported')
    }
    this.#shared = shared
    this.#limit = limit
  }

  incr (key: string, callback: Callback, timeWindow: number, _max: number): void {
    this.#shared.pool.query<{ hits: number, ttl: number }>({ name: 'ah-rate-limit-incr', text: INCR, values: [this.#limit, key, timeWindow] }).then((result) => {
      const row = result.rows[0] as { hits: number, ttl: number }
      callback(null, { current: row.hits, ttl: row.ttl })
    }, (err: Error) => { callback(err) })
    this.#prune()
  }

  /** The count and time left of `key`'s window without counting a hit (`{ increment: false }`). */
  read (key: string, callback: Callback): void {
    this.#shared.pool.query<{ hits: number, ttl: number }>(READ, [this.#limit, key]).then((result) => {
      const row = result.rows[0]
      callback(null, row === undefined ? { current: 0, ttl: 0 } : { current: row.hits, ttl: row.ttl })
    }, (err: Error) => { callback(err) })
  }

  /** The store of a route's own limit (named by its method and URL) or of one `app.createRateLimit` made. */
  child (routeOptions: object): FastifyRateLimitStore {
    const params = routeOptions as StoreParams
    const { method, url } = params.routeInfo as NonNullable<StoreParams['routeInfo']>
    const name = url !== undefined
      ? `${this.#limit}:${[method].flat().join(',')} ${url}`
      : params.nameSpace !== undefined ? `${this.#limit}:${params.nameSpace}` : this.#limit
    return new PgRateLimitStore(this.#shared, name, params)
  }

  #prune (): void {
    const shared = this.#shared
    if (Date.now() - shared.lastPrune < shared.pruneEveryMs) return
    shared.lastPrune = Date.now()
    shared.pool.query(PRUNE).catch(shared.onPruneError)
  }
}
