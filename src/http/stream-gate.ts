/**
 * Counts open SSE responses, in total and per caller, against `MAX_STREAMS` and
 * `MAX_STREAMS_PER_CALLER` (0: no limit). A stream takes a slot before its response starts and
 * gives it back once when it ends, however it ends.
 */
export class StreamGate {
  readonly #max: number
  readonly #perCaller: number
  readonly #byCaller = new Map<string, number>()
  #open = 0

  constructor (max: number, perCaller: number) {
    this.#max = max
    this.#perCaller = perCaller
  }

  /** Streams open now. */
  get open (): number { return this.#open }

  /**
   * Take a slot for `caller`. Returns the function that gives it back (safe to call twice), or
   * which limit is full.
   */
  acquire (caller: string): (() => void) | 'caller' | 'total' {
    const held = this.#byCaller.get(caller) ?? 0
    if (this.#perCaller > 0 && held >= this.#perCaller) return 'caller'
    if (this.#max > 0 && this.#open >= this.#max) return 'total'
    this.#byCaller.set(caller, held + 1)
    this.#open++
    let released = false
    return () => {
      if (released) return
      released = true
      this.#open--
      const left = (this.#byCaller.get(caller) as number) - 1
      if (left === 0) this.#byCaller.delete(caller)
      else this.#byCaller.set(caller, left)
    }
  }
}
