/**
 * Codes of the failures the client finds itself; errors the server answers carry the server's
 * own `AH_ERR_*` codes instead.
 *
 * - `network_error`: the request could not be sent or its answer not read (status 0).
 * - `aborted`: the caller's `AbortSignal` fired; `cause` is the signal's reason (status 0).
 * - `http_error`: a non-2xx answer without a CAP error body (a proxy's page, for instance).
 * - `invalid_response`: a 2xx answer that is not what CAP promises (not JSON, not an event stream).
 * - `stream_interrupted`: a stream dropped and could not be resumed within `resume.maxAttempts`;
 *   `cause` is the last failure (status 0).
 */
export type ClientErrorCode = 'network_error' | 'aborted' | 'http_error' | 'invalid_response' | 'stream_interrupted'

/** What an {@link AgentHostError} is made of. */
export interface AgentHostErrorOptions {
  /** The HTTP status, or 0 when no answer came. */
  status: number
  /** The server's `AH_ERR_*` code, or a {@link ClientErrorCode}. */
  code: string
  /** The server's `details` (validation errors list the failing paths here), or what the client saw. */
  details?: unknown
  /** The `request_id` of the envelope the call sent, when it sent one. */
  requestId?: string
  /** The underlying error, kept as `Error.cause`. */
  cause?: unknown
}

/**
 * Every failure of an {@link AgentHostClient} call. Answers of the server carry its error body
 * (CAP.md §6: `{ statusCode, code, error, message, details? }`): `status` is `statusCode`, `code`
 * the stable `AH_ERR_*` code (for example `AH_ERR_AGENT_NOT_FOUND`, `AH_ERR_VALIDATION`,
 * `AH_ERR_AUTH_REQUIRED`), `message` its message. Failures found by the client have a
 * {@link ClientErrorCode}.
 */
export class AgentHostError extends Error {
  /** The HTTP status, or 0 when no answer came. */
  readonly status: number
  /** The server's `AH_ERR_*` code, or a {@link ClientErrorCode}. */
  readonly code: string
  // `declare`: set only when given, so a missing one is absent rather than an own `undefined`
  /** The server's `details`, when it sent any. */
  declare readonly details?: unknown
  /** The `request_id` of the envelope the call sent. */
  declare readonly requestId?: string

  /** An error with `message`; `options.cause` becomes `Error.cause`. */
  constructor (message: string, options: AgentHostErrorOptions) {
    super(message, 'cause' in options ? { cause: options.cause } : undefined)
    this.name = 'AgentHostError'
    this.status = options.status
    this.code = options.code
    if (options.details !== undefined) this.details = options.details
    if (options.requestId !== undefined) this.requestId = options.requestId
  }
}

function isErrorBody (body: unknown): body is { code: string, message: string, details?: unknown } {
  return typeof body === 'object' && body !== null && typeof (body as { code?: unknown }).code === 'string' && typeof (body as { message?: unknown }).message === 'string'
}

/** The error a non-2xx answer stands for: its CAP error body, or `http_error` with the text it had. */
export async function errorFromResponse (response: Response, requestId?: string): Promise<AgentHostError> {
  const text = await response.text().catch(() => '')
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    body = undefined
  }
  const context = requestId === undefined ? {} : { requestId }
  if (isErrorBody(body)) return new AgentHostError(body.message, { status: response.status, code: body.code, details: body.details, ...context })
  return new AgentHostError(`HTTP ${response.status} without an error body`, { status: response.status, code: 'http_error', details: text.slice(0, 1000), ...context })
}

/**
 * What a failed `fetch` or body read becomes: `aborted` when the caller's signal fired,
 * `network_error` otherwise; an {@link AgentHostError} stays as it is.
 */
export function failureOf (err: unknown, signal: AbortSignal | undefined, requestId?: string): AgentHostError {
  if (err instanceof AgentHostError) return err
  const context = requestId === undefined ? {} : { requestId }
  if (signal?.aborted === true) return new AgentHostError('The call was aborted', { status: 0, code: 'aborted', cause: signal.reason, ...context })
  return new AgentHostError(`Could not reach the server: ${err instanceof Error ? err.message : String(err)}`, { status: 0, code: 'network_error', cause: err, ...context })
}
