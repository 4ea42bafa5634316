/**
 * Where a long command reports how far it got. The CLI gives commands one only when stderr is a
 * terminal, so piped output carries nothing but results.
 */
export interface Progress {
  /** `done` of `total` units of `what` (`verifying audit rows`); may be called often: drawing is throttled. */
  update: (done: number, total: number, what: string) => void
  /** The work ended, either way: take the line away (nothing is written if nothing was drawn). */
  end: () => void
}

/** What {@link terminalProgress} draws on. */
export interface TerminalProgressOptions {
  /** The terminal's width: the line is cut to fit, or it would wrap and `\r` could not redraw it. Default 80. */
  columns?: number
  /** The least time between two redraws of the same `what` (a new `what` is drawn at once). Default 100 ms. */
  intervalMs?: number
  /** The clock (tests pass their own). */
  now?: () => number
}

const CLEAR_TO_END = '\x1b[K'

/**
 * One progress line on a terminal, redrawn in place with `\r`: `what: done/total (pct%)`, at most
 * every `intervalMs`, cleared by `end()`.
 * @param write writes text as is, without a newline (the CLI's is `process.stderr.write`)
 */
export function terminalProgress (write: (text: string) => void, options: TerminalProgressOptions = {}): Progress {
  const { intervalMs = 100, now = Date.now } = options
  const columns = options.columns !== undefined && options.columns > 1 ? options.columns : 80
  let drawnAt = -Infinity
  let drawnWhat: string | undefined
  let shown = false
  return {
    update (done, total, what) {
      const at = now()
      if (what === drawnWhat && at - drawnAt < intervalMs) return
      drawnAt = at
      drawnWhat = what
      const suffix = `: ${done}/${total}${total > 0 ? ` (${Math.floor(Math.min(done, total) * 100 / total)}%)` : ''}`
      // the last column is left empty: writing into it makes some terminals wrap
      const room = columns - 1 - suffix.length
      const label = what.length <= room ? what : `${what.slice(0, Math.max(0, room - 1))}…`
      write(`\r${label}${suffix}`.slice(0, columns) + CLEAR_TO_END)
      shown = true
    },
    end () {
      if (shown) write(`\r${CLEAR_TO_END}`)
      shown = false
      drawnWhat = undefined
      drawnAt = -Infinity
    }
  }
}
