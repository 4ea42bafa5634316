import type { FastifyRateLimitStore } from '@fastify/rate-limit'

/** Keys one limit remembers at most; past it, the one counted least recently is forgotten. */
const MAX_KEYS = 10_000

type Callback = (error: Error | null, result?: { current: number, ttl: number }) => void

/**
 * The in-process @fastify/rate-limit store (give the plugin `store: MemoryRateLimitStore`): fixed
 * windows, as the plugin's own `LocalStore` keeps them, but each hit is answered with the count as
 * it stood after that hit. `LocalStore` answers every hit with its one live entry, which the plugin
 * reads after an await: hits of one key made together (the tool calls of an MCP batch) all read
 * the last count, so all of them were refused once it passed the limit, those within it too.
 */
export class MemoryRateLimitStore implements FastifyRateLimitStore {
  readonly #windows = new Map<string, { hits: number, start: number }>()

  incr (key: string, callback: Callback, timeWindow: number): void {
    const now = Date.now()
    let window = this.#windows.get(key)
    // re-inserted on each hit: the map's first key is the one counted least recently
    this.#windows.delete(key)
    if (window === undefined || window.start + timeWindow <= now) window = { hits: 0, start: now }
    window.hits++
    this.#windows.set(key, window)
    if (this.#windows.size > MAX_KEYS) this.#windows.delete(this.#windows.keys().next().value as string)
    callback(null, { current: window.hits, ttl: window.start + timeWindow - now })
  }

  /** Each limit `app.createRateLimit` makes counts apart. */
  child (): FastifyRateLimitStore {
    return new MemoryRateLimitStore()
  }
}
