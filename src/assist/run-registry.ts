import type { AssistRun } from './run.js'

/**
 * The runs in flight, by request id: what cancel finds and what shutdown ends.
 */
export class RunRegistry {
  readonly #runs = new Map<string, { run: AssistRun, settled: Promise<void> }>()
  readonly #closers = new Set<() => void>()
  #closing = false

  /** Call `fn` when shutdown begins (long-lived responses that are not runs, such as event tails). */
  onClose (fn: () => void): void { this.#closers.add(fn) }
  offClose (fn: () => void): void { this.#closers.delete(fn) }

  /** True once shutdown has begun: new runs are refused. */
  get closing (): boolean { return this.#closing }

  get size (): number { return this.#runs.size }

  has (requestId: string): boolean {
    return this.#runs.has(requestId)
  }

  get (requestId: string): AssistRun | undefined {
    return this.#runs.get(requestId)?.run
  }

  /** The runs in flight. */
  list (): AssistRun[] {
    return [...this.#runs.values()].map((e) => e.run)
  }

  /** Track `run` until `settled` (its agent's `assist()` has returned or thrown). A run tracked once closing has begun is shut down at once. */
  track (run: AssistRun, settled: Promise<void>): void {
    const entry = { run, settled: settled.finally(() => { if (this.#runs.get(run.requestId) === entry) this.#runs.delete(run.requestId) }) }
    this.#runs.set(run.requestId, entry)
    if (this.#closing) run.shutdown()
  }

  /** Refuse new runs from now on, and tell the long-lived responses ({@link onClose}); {@link shutdown} ends the runs. */
  close (): void {
    if (this.#closing) return
    this.#closing = true
    for (const fn of [...this.#closers]) fn()
  }

  /**
   * Begin shutdown: every open run gets its shutdown packets and its signal fires. Resolves when
   * every run is recorded and its agent has returned, or after half of `graceMs`, whichever is
   * first: the rest of the grace period is the server's, to close and to audit its shutdown.
   */
  async shutdown (graceMs: number): Promise<void> {
    this.close()
    const settled = [...this.#runs.values()].map(({ run, settled }) => { run.shutdown(); return settled })
    if (settled.length === 0) return
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      Promise.allSettled(settled),
      new Promise((resolve) => { timer = setTimeout(resolve, Math.floor(graceMs / 2)).unref() })
    ])
    clearTimeout(timer)
  }
}
