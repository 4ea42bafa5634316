/**
 * Reads of one kind gathered into one query per turn of the event loop: every `load` made before
 * the turn ends joins one `fetch` of all their keys, so fifty requests looking up their run cost
 * one round trip to PostgreSQL, not fifty. A round trip is dear (a message each way and a wake-up
 * of the server's process); a turn's wait is not. Each caller gets its own key's value, or the
 * query's error.
 */
export class PgReadBatch<K, V> {
  readonly #fetch: (keys: K[]) => Promise<Map<string, V>>
  readonly #keyOf: (key: K) => string
  #waiting = new Map<string, { key: K, settle: Array<{ resolve: (value: V | undefined) => void, reject: (err: unknown) => void }> }>()
  #scheduled = false

  /**
   * @param fetch the values of `keys` (distinct), by each key's identity (`keyOf`); a key missing from the map has none
   * @param keyOf a key's identity: keys with the same identity are read once
   */
  constructor (fetch: (keys: K[]) => Promise<Map<string, V>>, keyOf: (key: K) => string = String) {
    this.#fetch = fetch
    this.#keyOf = keyOf
  }

  /** The value of `key`, read with every other key asked for in this turn; undefined when there is none. */
  async load (key: K): Promise<V | undefined> {
    return await new Promise<V | undefined>((resolve, reject) => {
      const id = this.#keyOf(key)
      const entry = this.#waiting.get(id)
      if (entry === undefined) this.#waiting.set(id, { key, settle: [{ resolve, reject }] })
      else entry.settle.push({ resolve, reject })
      if (!this.#scheduled) {
        this.#scheduled = true
        setImmediate(() => { this.#run() })
      }
    })
  }

  #run (): void {
    const batch = this.#waiting
    this.#waiting = new Map()
    this.#scheduled = false
    const entries = [...batch]
    this.#fetch(entries.map(([, e]) => e.key)).then((found) => {
      for (const [id, entry] of entries) for (const s of entry.settle) s.resolve(found.get(id))
    }, (err: unknown) => {
      for (const [, entry] of entries) for (const s of entry.settle) s.reject(err)
    })
  }
}
