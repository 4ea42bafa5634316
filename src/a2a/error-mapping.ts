import { A2AError, RequestMalformedError, TaskNotFoundError, UnsupportedOperationError } from '@a2a-js/sdk/errors'

/** HTTP statuses of CAP errors that stay HTTP answers on every A2A binding: who may call, and load. */
const HTTP_LEVEL = new Set([401, 403, 413, 429, 503])

/** CAP error codes that are the caller's mistake in the message: A2A's "invalid params". */
const MALFORMED = new Set(['AH_ERR_VALIDATION', 'AH_ERR_SESSION_NOT_FOUND', 'AH_ERR_BODY_MALFORMED', 'AH_ERR_INTERRUPT_ANSWER_INVALID'])

/** CAP error codes of an answer to a question the task no longer asks: A2A's "not found", or its error for a task that takes no more input. */
const NOT_FOUND = new Set(['AH_ERR_INTERRUPT_NOT_FOUND'])
const NO_MORE_INPUT = new Set(['AH_ERR_INTERRUPT_CLOSED', 'AH_ERR_INTERRUPT_EXPIRED'])

/** Whether `err` is a CAP refusal of the caller or of load (401, 403, 413, 429, 503): the HTTP answer itself, not an A2A error inside one. */
export function isHttpLevel (err: unknown): err is Error {
  const e = err as { statusCode?: unknown } | null
  return e !== null && typeof e === 'object' && typeof e.statusCode === 'number' && HTTP_LEVEL.has(e.statusCode)
}

/**
 * The A2A error for an error the engine raised (the mapping table is `docs/a2a.md`):
 * A2A errors as they are; a CAP refusal of who is calling or of load ({@link isHttpLevel}) as it
 * is too, for the transport to answer as HTTP with its `AH_ERR_*` body and headers; a validation
 * error, a wrong answer to a question, or a context that is not the caller's, as
 * `RequestMalformedError` (JSON-RPC -32602, HTTP+JSON 400) with the CAP code in its message (and
 * where the answer is wrong); a question that is not the caller's as `TaskNotFoundError`; one
 * answered already, or expired, as `UnsupportedOperationError` (the task takes no more input);
 * anything else as it is (an internal error).
 */
export function toA2AError (err: unknown): unknown {
  if (err instanceof A2AError || isHttpLevel(err)) return err
  const e = err as { code?: unknown, message?: unknown } | null
  if (e === null || typeof e !== 'object' || typeof e.code !== 'string') return err
  // the message of a wrong answer says where it is wrong
  const text = `${String(e.message)} (${e.code})`
  if (MALFORMED.has(e.code)) return new RequestMalformedError(text)
  if (NOT_FOUND.has(e.code)) return new TaskNotFoundError(text)
  if (NO_MORE_INPUT.has(e.code)) return new UnsupportedOperationError(text)
  return err
}

/** Where a call keeps the HTTP-level error its transport must answer with (the JSON-RPC transport maps every error it sees). */
export interface HttpErrorSlot {
  httpError?: Error
}

// the JSON-RPC transport turns every error it sees into a JSON-RPC error: an HTTP-level one is kept aside for the route
function translate (err: unknown, slot: HttpErrorSlot): unknown {
  if (isHttpLevel(err)) slot.httpError = err
  return toA2AError(err)
}

/** `fn`, its errors translated by {@link toA2AError}; an HTTP-level one is kept in `slot` too. */
export async function translated<T> (slot: HttpErrorSlot, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (err) {
    throw translate(err, slot)
  }
}

/** `events`, its errors translated by {@link toA2AError}; an HTTP-level one is kept in `slot` too. */
export async function * translatedStream<T> (slot: HttpErrorSlot, events: () => AsyncGenerator<T, void, undefined>): AsyncGenerator<T, void, undefined> {
  try {
    yield * events()
  } catch (err) {
    throw translate(err, slot)
  }
}
