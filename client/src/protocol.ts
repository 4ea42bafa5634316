// GENERATED FILE: do not edit. The wire types of CAP (../../shared/spec/CAP.md), made by
// client/scripts/generate-types.ts from the server's TypeBox schemas in src/protocol/ (common.ts,
// envelope.ts, interrupts.ts, packets.ts, response.ts, manifest.ts), so they cannot drift from what the server
// validates and sends. After changing a schema, regenerate from the repository root with
//
//   TS_NODE_TRANSPILE_ONLY=1 node --import @tapjs/typescript/import client/scripts/generate-types.ts
//
// test/client/protocol.test.ts fails while this file differs from what the schemas generate.

/** An RFC 4122 UUID string. */
export type Uuid = string

/** An RFC 3339 date-time. We accept any offset and fraction; we emit UTC with `Z` and milliseconds. */
export type DateTime = string

/** Any JSON object, kept exactly as sent (agent arguments, metadata, JSON Schemas). */
export type JsonObject = Record<string, unknown>

/** A JSON Schema document, carried as an opaque object. */
export type JsonSchema = Record<string, unknown>

/** Who is asking: passed to the agent as `request.context.user` (CAP.md §2). */
export interface UserContext {
  /** Stable identifier of the end user. */
  user_id: string
  /** The user's e-mail address, when known. */
  email?: string
  /** Service tier of the user (for example `free`, `pro`). */
  tier: string
  /** BCP 47 locale, for example `en-US`. */
  locale: string
}

/** W3C-style trace identifiers that tie this request to a distributed trace. */
export interface TraceContext {
  trace_id: Uuid
  span_id: Uuid
  parent_id?: Uuid
}

/** The session the request belongs to and the agent it is for. */
export interface SessionContext {
  /** The conversation this request belongs to; must equal `payload.session_id`. */
  session_id: Uuid
  /** Selects the hosted agent by its manifest `metadata.id`. */
  agent_id: Uuid
  user: UserContext
  trace: TraceContext
  /** Permissions the caller claims (may be empty). */
  permissions: string[]
  created_at: DateTime
}

/** What the client can render; used to filter presentation events on the SSE wire. */
export interface ClientCapabilities {
  /** Presentation event types the client renders; empty means "all". */
  supported_events: string[]
  prefers_markdown: boolean
  image_resolution?: 'low' | 'high' | 'auto'
}

/**
 * `payload.metadata`: free-form, passed to the agent as is, except for the keys the host reads
 * itself, which must have these shapes.
 */
export interface RequestMetadata {
  /** Which of the agent's capabilities to run (default: its first). */
  capability?: string
  /** Stop the run after this many milliseconds (capped by RUN_TIMEOUT_MS). */
  timeout_ms?: number
  /** What happens to the run when its last client goes away (default: DISCONNECT_POLICY). */
  on_disconnect?: 'continue' | 'cancel'
}

/** The agent invocation itself: its arguments, lineage and client capabilities. */
export interface AgentRequest {
  /** Must equal `context.session_id`, else 400. */
  session_id: Uuid
  /** The agent's arguments, for example `{ "query": "..." }`; validated against the capability's `inputs`. */
  payload: JsonObject
  /** Defaults to a new UUID. */
  request_id?: Uuid
  /** Defaults to `request_id` when there is no parent. */
  root_request_id?: Uuid
  /** When present, `root_request_id` must be present too. */
  parent_request_id?: Uuid
  /** Defaults to now. */
  timestamp?: DateTime
  metadata?: RequestMetadata
  capabilities?: ClientCapabilities
}

/** The `POST /v1/assist` request envelope (CAP.md §2). */
export interface ServiceRequest {
  /** Id of this HTTP transaction; echoed in the response. */
  request_id: Uuid
  context: SessionContext
  payload: AgentRequest
}

/** One open question of a run, as every protocol shows it (CAP's `INTERRUPT` event and JSON answer, A2A's status message, MCP's elicitation). */
export interface Interrupt {
  id: Uuid
  kind: 'input' | 'approval'
  message: string
  schema?: JsonObject
  /** What an approval is of: a tool call `{ tool, action, args }`, or an A2A call `{ agent, capability, payload }`. */
  call?: JsonObject
  reason?: 'auth'
  expires_at: DateTime
}

/** The payload of the `INTERRUPT` EVENT an interrupted run sends last before its CLOSE `"input_required"`. */
export interface InterruptEvent {
  type: 'INTERRUPT'
  interrupts: Interrupt[]
}

/** An approval's answer. */
export interface ApprovalValue {
  approved: boolean
  comment?: string
}

/** One answer in a resume request's `payload.payload.resume`. */
export interface ResumeAnswer {
  interrupt_id: Uuid
  value: unknown
}

/** How bad a stream error is: FATAL (stream dead, do not retry), TRANSIENT (retry with backoff), WARNING (goes on). */
export type StreamErrorSeverity = 'FATAL' | 'TRANSIENT' | 'WARNING'

/** The `p` of an ERROR packet, and an entry of the JSON transcript's `errors`. */
export interface StreamError {
  /** Stable snake_case code, for example `agent_failed`. */
  code: string
  message: string
  severity: StreamErrorSeverity
  details?: JsonObject
}

/** Why a stream ended: the `p` of a CLOSE packet. */
export type CloseReason = 'done' | 'aborted' | 'cancelled' | 'shutdown' | 'input_required'

/** A thinking step: `response.thought(content, status)`. */
export interface ThoughtTraceEvent {
  id: Uuid
  timestamp: DateTime
  type: 'THOUGHT_TRACE'
  data: {
    thought: string
    status: string
  }
}

/** A block of markdown: `response.markdown(content)`. */
export interface MarkdownBlockEvent {
  id: Uuid
  timestamp: DateTime
  type: 'MARKDOWN_BLOCK'
  data: {
    content: string
  }
}

/** One cited source. */
export interface Citation {
  source_id: string
  uri: string
  title: string
  snippet?: string
  /** How sure the agent is that the source supports the claim, 0..1. */
  confidence: number
}

/** Sources behind an answer: `response.citations(list)`. */
export interface CitationBlockEvent {
  id: Uuid
  timestamp: DateTime
  type: 'CITATION_BLOCK'
  data: {
    citations: Citation[]
  }
}

/** Progress of a long step: `response.progress(label, status, percent?)`. */
export interface ProgressIndicatorEvent {
  id: Uuid
  timestamp: DateTime
  type: 'PROGRESS_INDICATOR'
  data: {
    label: string
    status: 'running' | 'complete' | 'failed'
    /** Fraction done, 0..1. */
    progress_percent?: number
  }
}

/** One image or other media item. */
export interface MediaItem {
  url: string
  mime_type: string
  alt_text?: string
}

/** A set of media items: `response.media(items)`. */
export interface MediaCarouselEvent {
  id: Uuid
  timestamp: DateTime
  type: 'MEDIA_CAROUSEL'
  data: {
    items: MediaItem[]
  }
}

/** The five presentation event types a CAP front end renders. */
export type PresentationEvent = ThoughtTraceEvent | MarkdownBlockEvent | CitationBlockEvent | ProgressIndicatorEvent | MediaCarouselEvent

/** Structured data: `response.data(data, title?, view_hint)`. */
export interface DataEvent {
  type: 'DATA'
  id: Uuid
  timestamp: DateTime
  title?: string
  view_hint: string
  data: JsonObject
}

/** The agent's final result: `response.result(obj)` (our extension). */
export interface ResultEvent {
  type: 'RESULT'
  data: JsonObject
}

/** The first packet of every stream made by `create_stream()`. */
export interface StreamStartEvent {
  type: 'STREAM_START'
  title?: string
  metadata?: JsonObject
}

/** Tokens a backend used and their cost: `response.usage()` (our extension). */
export interface UsageEvent {
  type: 'USAGE'
  data: {
    input_tokens: number
    output_tokens: number
    /** USD, from the configured price table. */
    cost?: number
  }
}

/** Everything this server ever puts in the `p` of an EVENT packet. */
export type EventPayload = PresentationEvent | DataEvent | ResultEvent | StreamStartEvent | UsageEvent | InterruptEvent

/** A text chunk. */
export interface DeltaPacket {
  /** The logical stream this packet belongs to. */
  stream_id: Uuid
  /** 1 for a stream's first packet, +1 for each next one, no gaps. */
  seq: number
  /** Emission time, UTC with `Z`. */
  t: DateTime
  op: 'DELTA'
  p: string
}

/** An event (presentation event, data, result or stream start). */
export interface EventPacket {
  /** The logical stream this packet belongs to. */
  stream_id: Uuid
  /** 1 for a stream's first packet, +1 for each next one, no gaps. */
  seq: number
  /** Emission time, UTC with `Z`. */
  t: DateTime
  op: 'EVENT'
  p: EventPayload
}

/** An error on a stream. */
export interface ErrorPacket {
  /** The logical stream this packet belongs to. */
  stream_id: Uuid
  /** 1 for a stream's first packet, +1 for each next one, no gaps. */
  seq: number
  /** Emission time, UTC with `Z`. */
  t: DateTime
  op: 'ERROR'
  p: StreamError
}

/** The end of a stream; exactly one per stream. */
export interface ClosePacket {
  /** The logical stream this packet belongs to. */
  stream_id: Uuid
  /** 1 for a stream's first packet, +1 for each next one, no gaps. */
  seq: number
  /** Emission time, UTC with `Z`. */
  t: DateTime
  op: 'CLOSE'
  p: CloseReason
}

/**
 * One frame of the SSE response (CAP.md §5). No other keys, ever; `p` always matches `op`.
 */
export type StreamPacket = DeltaPacket | EventPacket | ErrorPacket | ClosePacket

/** The SSE event name every packet is sent under. */
export const SSE_EVENT_NAME = 'stream.packet'

/** One stream opened with `create_stream()`, as the JSON transcript reports it. */
export interface TranscriptStream {
  stream_id: Uuid
  title?: string
  /** Every chunk written to the stream, concatenated. */
  text: string
  state: 'closed' | 'aborted'
  /** Why the stream was aborted, or the non-`done` close reason. */
  reason?: string
}

/** Everything an agent emitted, when it did not call `result()` (CAP.md §4). Nothing is lost. */
export interface Transcript {
  /** All markdown and stream text, in emission order. */
  text: string
  /** Every EVENT payload, in order. */
  events: EventPayload[]
  streams: TranscriptStream[]
  errors: StreamError[]
}

/** Token usage, when a backend reports it. */
export interface Usage {
  input_tokens: number
  output_tokens: number
}

/** Cost and size figures of one response. */
export interface ResponseMetrics {
  /** Time from request to response, in milliseconds. */
  latency_ms: number
  /** Packets the run produced (as they would have been streamed). */
  packets: number
  usage?: Usage
  cost?: number
}

/** The JSON response of `POST /v1/assist` (CAP.md §4). */
export interface ServiceResponse {
  request_id: Uuid
  created_at: DateTime
  /** Exactly the object passed to `result()`, or else the {@link Transcript}. */
  output: JsonObject
  /** The run stopped to ask: its open interrupts. Answer them with a new request in the same session (`payload.resume`). */
  interrupts?: Interrupt[]
  metrics?: ResponseMetrics
}

/** The body of every error answered before a stream starts (CAP.md §6). */
export interface ErrorBody {
  statusCode: number
  /** Stable code from the catalogue, for example `AH_ERR_VALIDATION`. */
  code: string
  /** The HTTP reason phrase. */
  error: string
  message: string
  /** For validation errors: `{ errors: [{ path, message }] }`. */
  details?: JsonObject
}

/** Semantic version 2.0.0. */
export type SemVer = string

/** How a capability answers: one JSON document, or an SSE stream of packets (CAP.md §3). */
export type DeliveryMode = 'request_response' | 'server_sent_events'

/** Identity and versioning of an agent. */
export interface AgentMetadata {
  /** The id clients put in `context.agent_id`. */
  id: Uuid
  version: SemVer
  name: string
  author: string
  created_at: DateTime
  requires_auth: boolean
}

/** An intermediate event a capability may produce. */
export interface EventSchema {
  name: string
  data_schema: JsonSchema
}

/** One mode of interaction with an agent. */
export interface AgentCapability {
  /** Unique within the agent. */
  name: string
  type: 'atomic' | 'streaming'
  description: string
  interface_id?: Uuid
  /** JSON Schema of `payload.payload`; the host validates requests against it. Required unless `interface_id`. */
  inputs?: JsonSchema
  /** JSON Schema of `result()`'s argument. Required unless `interface_id`. */
  outputs?: JsonSchema
  delivery_mode: DeliveryMode
  events: EventSchema[]
  injected_params: string[]
}

/** LLM parameters (wire name `model_config`). */
export interface ModelConfig {
  model: string
  temperature: number
  system_prompt?: string
}

/** How the agent runs. */
export interface AgentRuntimeConfig {
  nodes: JsonObject[]
  edges: JsonObject[]
  model_config: ModelConfig
  entry_point?: string
  system_prompt?: string
}

/** What the agent needs from outside. */
export interface AgentDependencies {
  tools: JsonObject[]
  libraries: string[]
}

/** Governance limits. */
export interface PolicyConfig {
  budget_caps: Record<string, number>
  human_in_the_loop: string[]
  allowed_domains: string[]
}

/** Tracing and retention preferences. */
export interface ObservabilityConfig {
  trace_level: 'full' | 'metadata_only' | 'none'
  retention_policy: string
  encryption_key_id?: string
}

/** A served agent manifest (CAP.md §7): what `GET /v1/agents` returns. No extra keys at any level. */
export interface AgentDefinition {
  metadata: AgentMetadata
  capabilities: AgentCapability[]
  config: AgentRuntimeConfig
  dependencies: AgentDependencies
  policy?: PolicyConfig
  observability?: ObservabilityConfig
  /** Host-specific additions live here, never as new top-level keys. */
  custom_metadata?: JsonObject
  status: 'draft' | 'published'
  /** SHA-256 of the agent's source, 64 hex characters; required when published. */
  integrity_hash?: string
}

/** `GET /v1/agents`. */
export interface AgentList {
  agents: AgentDefinition[]
}
