/** How a dropped stream is resumed: attempts in a row without progress, and the backoff between them. */
export interface ResumeOptions {
  /** Re-POSTs in a row that bring no new packet before giving up with `stream_interrupted` (default 5). */
  maxAttempts?: number
  /** The first wait, doubled at each further attempt (default 250 ms). */
  baseDelayMs?: number
  /** The longest wait (default 5000 ms). */
  maxDelayMs?: number
}

/** {@link ResumeOptions} with every default filled in. */
export type ResumePolicy = Required<ResumeOptions>

/** The defaults of {@link ResumeOptions}. */
export const DEFAULT_RESUME: ResumePolicy = { maxAttempts: 5, baseDelayMs: 250, maxDelayMs: 5000 }

/**
 * The wait before resume attempt `attempt` (1, 2, ...): `baseDelayMs` doubled per attempt up to
 * `maxDelayMs`, then jittered into its upper half, so clients cut off together do not come back
 * together.
 */
export function resumeDelay (attempt: number, policy: ResumePolicy, random: () => number = Math.random): number {
  const cap = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1))
  return cap / 2 + random() * cap / 2
}

/** Resolves after `ms`, or rejects with the signal's reason once `signal` fires. */
export async function sleep (ms: number, signal: AbortSignal): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal.addEventListener('abort', onAbort, { once: true })
  })
}
