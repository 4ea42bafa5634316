import { setTimeout as sleep } from 'node:timers/promises'
import { AH_ERR_STORAGE_BUSY } from '../errors.js'

/** Whether `err` is SQLite saying another connection holds the lock it needs (SQLITE_BUSY or SQLITE_LOCKED, any variant). */
export function isBusy (err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'))
}

/**
 * Run a write, and while another process holds the database's write lock, try again
 * later without blocking the event loop (each try waits at most the connection's short busy
 * timeout), backing off from 5 ms to 200 ms.
 * @param budgetMs how long to keep trying before giving up
 * @throws AH_ERR_STORAGE_BUSY (503) once the budget is spent; any other error at once
 */
export async function retryBusy<T> (write: () => T | Promise<T>, budgetMs: number): Promise<T> {
  const deadline = Date.now() + budgetMs
  for (let wait = 5; ; wait = Math.min(wait * 2, 200)) {
    try {
      return await write()
    } catch (err) {
      if (!isBusy(err)) throw err
      if (Date.now() + wait > deadline) throw new AH_ERR_STORAGE_BUSY(budgetMs, { cause: err })
    }
    await sleep(wait)
  }
}

/**
 * Whether `err` is PostgreSQL (or the way to it) being unavailable rather than the request being
 * wrong: the connection refused, reset or timed out, the server shutting down or starting up, too
 * many connections (SQLSTATE classes 08 and 57P, and 53300).
 */
export function isUnavailable (err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code !== 'string') return /^Connection terminated|timeout exceeded when trying to connect|connection error and is not queryable/.test(String((err as { message?: unknown } | null)?.message))
  // 25P03: the server ended a session left idle in a transaction (a frozen process's)
  return code.startsWith('08') || code.startsWith('57P') || code === '53300' || code === '25P03' || ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN'].includes(code)
}
