import { Type, type Static } from 'typebox'
import { DateTime, JsonObject, Uuid } from './common.js'

// Every object here has `additionalProperties: false` so that the validator drops unknown keys
// (CAP.md §2: unknown keys are ignored, never an error).
const closed = { additionalProperties: false } as const

/** Who is asking: passed to the agent as `request.context.user` (CAP.md §2). */
export const UserContext = Type.Object({
  /** Stable identifier of the end user. */
  user_id: Type.String({ minLength: 1 }),
  /** The user's e-mail address, when known. */
  email: Type.Optional(Type.String()),
  /** Service tier of the user (for example `free`, `pro`). */
  tier: Type.String(),
  /** BCP 47 locale, for example `en-US`. */
  locale: Type.String()
}, closed)
export type UserContext = Static<typeof UserContext>

/** W3C-style trace identifiers that tie this request to a distributed trace. */
export const TraceContext = Type.Object({
  trace_id: Uuid,
  span_id: Uuid,
  parent_id: Type.Optional(Uuid)
}, closed)
export type TraceContext = Static<typeof TraceContext>

/** The session the request belongs to and the agent it is for. */
export const SessionContext = Type.Object({
  /** The conversation this request belongs to; must equal `payload.session_id`. */
  session_id: Uuid,
  /** Selects the hosted agent by its manifest `metadata.id`. */
  agent_id: Uuid,
  user: UserContext,
  trace: TraceContext,
  /** Permissions the caller claims (may be empty). */
  permissions: Type.Array(Type.String()),
  created_at: DateTime
}, closed)
export type SessionContext = Static<typeof SessionContext>

/** What the client can render; used to filter presentation events on the SSE wire. */
export const ClientCapabilities = Type.Object({
  /** Presentation event types the client renders; empty means "all". */
  supported_events: Type.Array(Type.String(), { default: [] }),
  prefers_markdown: Type.Boolean({ default: true }),
  image_resolution: Type.Optional(Type.Union([Type.Literal('low'), Type.Literal('high'), Type.Literal('auto')]))
}, closed)
export type ClientCapabilities = Static<typeof ClientCapabilities>

/**
 * `payload.metadata`: free-form, passed to the agent as is, except for the keys the host reads
 * itself, which must have these shapes.
 */
export const RequestMetadata = Type.Object({
  /** Which of the agent's capabilities to run (default: its first). */
  capability: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  /** Stop the run after this many milliseconds (capped by RUN_TIMEOUT_MS). */
  timeout_ms: Type.Optional(Type.Integer({ minimum: 1 })),
  /** What happens to the run when its last client goes away (default: DISCONNECT_POLICY). */
  on_disconnect: Type.Optional(Type.Union([Type.Literal('continue'), Type.Literal('cancel')]))
}, { additionalProperties: true })
export type RequestMetadata = Static<typeof RequestMetadata>

/**
 * The headers `POST /v1/assist` reads itself. `Last-Event-ID` is a resume cursor (CAP.md §5):
 * a `stream_id`, optionally with the last `seq` the client has (`<stream_id>:<seq>`, our extension).
 */
export const AssistHeaders = Type.Object({
  'last-event-id': Type.Optional(Type.String({ pattern: '^$|^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(:[0-9]{1,15})?$' }))
})
export type AssistHeaders = Static<typeof AssistHeaders>

/** The agent invocation itself: its arguments, lineage and client capabilities. */
export const AgentRequest = Type.Object({
  /** Must equal `context.session_id`, else 400. */
  session_id: Uuid,
  /** The agent's arguments, for example `{ "query": "..." }`; validated against the capability's `inputs`. */
  payload: JsonObject,
  /** Defaults to a new UUID. */
  request_id: Type.Optional(Uuid),
  /** Defaults to `request_id` when there is no parent. */
  root_request_id: Type.Optional(Uuid),
  /** When present, `root_request_id` must be present too. */
  parent_request_id: Type.Optional(Uuid),
  /** Defaults to now. */
  timestamp: Type.Optional(DateTime),
  metadata: Type.Optional(RequestMetadata),
  capabilities: Type.Optional(ClientCapabilities)
}, closed)
export type AgentRequest = Static<typeof AgentRequest>

/** The `POST /v1/assist` request envelope (CAP.md §2). */
export const ServiceRequest = Type.Object({
  /** Id of this HTTP transaction; echoed in the response. */
  request_id: Uuid,
  context: SessionContext,
  payload: AgentRequest
}, { ...closed, title: 'ServiceRequest' })
export type ServiceRequest = Static<typeof ServiceRequest>

/**
 * The agent request after the host has applied CAP.md's defaults: every optional lineage field is
 * filled in, and the session context travels with it. This is what `assist()` receives.
 */
export interface ResolvedAgentRequest {
  session_id: string
  payload: Record<string, unknown>
  request_id: string
  root_request_id: string
  parent_request_id?: string
  timestamp: string
  metadata: RequestMetadata & Record<string, unknown>
  capabilities: ClientCapabilities
  /** The envelope's session context (user, trace, permissions). */
  context: SessionContext
}
