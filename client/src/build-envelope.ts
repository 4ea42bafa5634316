import type { RequestMetadata, ServiceRequest, TraceContext } from './protocol.js'
import { randomUuid, uuidOf } from './random-uuid.js'

/** What {@link buildEnvelope} needs to make a `POST /v1/assist` envelope; the rest it fills in. */
export interface EnvelopeInput {
  /** The agent's manifest `metadata.id` (a UUID; `GET /v1/agents` lists them). */
  agentId: string
  /** Becomes `payload.payload.query` (merged over `input`). */
  query?: string
  /** The agent's arguments (`payload.payload`), checked by the server against the capability's `inputs`. */
  input?: Record<string, unknown>
  /** The conversation to continue; a new one (a random UUID) when absent. */
  sessionId?: string
  /** This call's id; a random UUID when absent. Reusing it with the same envelope joins that run. */
  requestId?: string
  /** Who is asking; default `{ user_id: 'anonymous', tier: 'free', locale: <the platform's> }`. */
  user?: { user_id: string, tier?: string, locale?: string, email?: string }
  /** Permissions the caller claims (the server keeps only those its key also holds); default `[]`. */
  permissions?: string[]
  /** `payload.metadata`: for example `{ capability: 'other', on_disconnect: 'cancel', timeout_ms: 30000 }`. */
  metadata?: RequestMetadata
  /**
   * A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`) to continue: its trace id becomes
   * `context.trace.trace_id` and its span the `parent_id` (both as UUIDs). Default: a new trace.
   */
  traceparent?: string
}

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/

/** The locale of the page (`navigator.language`), else of the platform (`Intl`). */
export function defaultLocale (scope: { navigator?: { language?: string } } = globalThis as { navigator?: { language?: string } }): string {
  return scope.navigator?.language ?? new Intl.DateTimeFormat().resolvedOptions().locale
}

function traceOf (traceparent: string | undefined): TraceContext {
  if (traceparent === undefined) return { trace_id: randomUuid(), span_id: randomUuid() }
  const match = TRACEPARENT.exec(traceparent.trim().toLowerCase())
  if (match === null || /^0+$/.test(match[1] as string)) {
    throw new TypeError(`traceparent must be a W3C traceparent, 00-<32 hex>-<16 hex>-<2 hex> with a non-zero trace id; got ${JSON.stringify(traceparent)}`)
  }
  return { trace_id: uuidOf(match[1] as string), span_id: randomUuid(), parent_id: uuidOf(`${match[2] as string}${'0'.repeat(16)}`) }
}

/**
 * A complete, valid CAP envelope (CAP.md §2) from the few things a caller knows: new ids for the
 * request, session (unless given) and trace span, `created_at` now, `payload.session_id` equal to
 * `context.session_id`. Keep the result to retry or resume the same request: the server joins a
 * run only when the whole envelope is the same (a different one with the same `request_id` is a
 * 409).
 * @throws TypeError when `traceparent` is not a valid W3C traceparent
 */
export function buildEnvelope (input: EnvelopeInput): ServiceRequest {
  const sessionId = input.sessionId ?? randomUuid()
  const user = input.user
  return {
    request_id: input.requestId ?? randomUuid(),
    context: {
      session_id: sessionId,
      agent_id: input.agentId,
      user: {
        user_id: user?.user_id ?? 'anonymous',
        ...(user?.email === undefined ? {} : { email: user.email }),
        tier: user?.tier ?? 'free',
        locale: user?.locale ?? defaultLocale()
      },
      trace: traceOf(input.traceparent),
      permissions: [...(input.permissions ?? [])],
      created_at: new Date().toISOString()
    },
    payload: {
      session_id: sessionId,
      payload: input.query === undefined ? { ...input.input } : { ...input.input, query: input.query },
      ...(input.metadata === undefined ? {} : { metadata: input.metadata })
    }
  }
}

/** A W3C `traceparent` header for an envelope's trace (its trace id, and its span id's first 16 hex digits), as the server's own logs read it. */
export function traceparentOf (trace: TraceContext): string {
  return `00-${trace.trace_id.replace(/-/g, '').toLowerCase()}-${trace.span_id.replace(/-/g, '').slice(0, 16).toLowerCase()}-01`
}
