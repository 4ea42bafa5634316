import { randomUUID } from 'node:crypto'
import { Type, type Static } from 'typebox'
import type { ServiceRequest } from './envelope.js'

/**
 * What a front-end protocol's request may say to the host itself, beside the agent's arguments (the
 * AI SDK's body and AG-UI's `forwardedProps`, as `agent_host`): CAP's `payload.metadata` keys.
 */
export const HostOptions = Type.Object({
  capability: Type.Optional(Type.String({ minLength: 1, description: 'run this capability of the agent instead of its first' })),
  timeout_ms: Type.Optional(Type.Integer({ minimum: 1, description: 'stop the run after this long (RUN_TIMEOUT_MS is the ceiling)' })),
  on_disconnect: Type.Optional(Type.Union([Type.Literal('continue'), Type.Literal('cancel')], { description: 'what happens to the run when its client goes away' }))
}, { additionalProperties: false })
export type HostOptions = Static<typeof HostOptions>

/** Who makes a call through another protocol, as its CAP envelope names them. */
export interface BindingCaller {
  /** The hosted agent's manifest id. */
  agentId: string
  /** The caller's principal id: the envelope's `context.user.user_id`. */
  userId: string
  /** The W3C trace id of the HTTP request that carried the call (32 hex digits), so the run is in its trace. */
  traceId: string
}

/** What the call asks, in CAP's terms. */
export interface BindingCall {
  requestId: string
  sessionId: string
  payload: Record<string, unknown>
  /** `payload.metadata` (none: left out). */
  metadata?: Record<string, unknown>
  /** `payload.capabilities` (none: left out). */
  capabilities?: ServiceRequest['payload']['capabilities']
}

/** A W3C trace id (32 hex digits) in a CAP envelope's UUID form. */
export function traceUuid (traceId: string): string {
  return `${traceId.slice(0, 8)}-${traceId.slice(8, 12)}-${traceId.slice(12, 16)}-${traceId.slice(16, 20)}-${traceId.slice(20, 32)}`
}

/**
 * The CAP envelope of a call that came through another protocol (A2A, MCP, the AI SDK, AG-UI), as a
 * CAP client would send it: the caller as `context.user` (its `tier` the protocol's name), the HTTP
 * request's trace, a new span, the time now.
 */
export function bindingEnvelope (protocol: string, caller: BindingCaller, call: BindingCall): ServiceRequest {
  return {
    request_id: call.requestId,
    context: {
      session_id: call.sessionId,
      agent_id: caller.agentId,
      user: { user_id: caller.userId, tier: protocol, locale: 'en' },
      trace: { trace_id: traceUuid(caller.traceId), span_id: randomUUID() },
      permissions: [],
      created_at: new Date().toISOString()
    },
    payload: {
      session_id: call.sessionId,
      payload: call.payload,
      request_id: call.requestId,
      ...(call.metadata !== undefined ? { metadata: call.metadata } : {}),
      ...(call.capabilities !== undefined ? { capabilities: call.capabilities } : {})
    }
  } as ServiceRequest
}

/**
 * Whether two envelopes ask the same thing of the same agent (everything but their time and trace):
 * a call sent again with the same id is its run joined, with another ask a conflict.
 */
export function sameAsk (a: ServiceRequest, b: ServiceRequest): boolean {
  const ask = (e: ServiceRequest): string => JSON.stringify([e.context.agent_id, e.context.session_id, e.payload.payload, e.payload.metadata ?? {}])
  return ask(a) === ask(b)
}

/**
 * What to submit for a call sent with the id of an earlier one (`before`: that run's envelope, if
 * any): the earlier envelope when the call asks the same (the engine joins its run), else the new
 * one (a new run; with the id of a run that asked something else, the engine's 409).
 */
export function resentAs (fresh: ServiceRequest, before: ServiceRequest | undefined): ServiceRequest {
  return before !== undefined && sameAsk(before, fresh) ? before : fresh
}
