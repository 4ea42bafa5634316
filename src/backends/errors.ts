/** The stream error codes a backend failure carries (documented in the README's stream error table). */
export type BackendStreamCode = 'backend_unavailable' | 'backend_timeout' | 'backend_failed'

/**
 * A backend failed: the provider answered with an error, stalled, or the local agent died. Its
 * message is safe to show (`expose`), and an agent that lets it propagate ends its response with
 * ERROR `{ code: streamCode, severity }`: TRANSIENT when a retry may help, else FATAL.
 */
export class BackendError extends Error {
  readonly expose = true
  readonly streamCode: BackendStreamCode
  readonly severity: 'FATAL' | 'TRANSIENT'
  readonly details?: Record<string, unknown>

  constructor (streamCode: BackendStreamCode, message: string, severity: 'FATAL' | 'TRANSIENT', details?: Record<string, unknown>) {
    super(message)
    this.name = 'BackendError'
    this.streamCode = streamCode
    this.severity = severity
    if (details !== undefined) this.details = details
  }
}
