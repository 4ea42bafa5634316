/**
 * The agent contract (seed 000, in TypeScript): what a drop-in agent implements and what the host
 * hands it. Agents import only types from here (and `defineAgent`), never Fastify.
 */
import type { ResolvedAgentRequest, SessionContext } from '../protocol/envelope.js'
import type { AgentDefinition, AgentCapability, AgentMetadata, ModelConfig } from '../protocol/manifest.js'
import type { Citation, MediaItem, PresentationEvent, StreamErrorSeverity } from '../protocol/packets.js'
import type { AgentHost } from '../backends/protocol.js'
import type { SessionHandle } from '../protocol/session.js'

export type { ResolvedAgentRequest as AgentRequest } from '../protocol/envelope.js'
export type { AgentDefinition } from '../protocol/manifest.js'
export type { Interaction, RecallHit, SessionHandle, SessionIdentity } from '../protocol/session.js'
export type { AgentHost } from '../backends/protocol.js'

/** A JSON object. */
export type JsonObject = Record<string, unknown>

/** What an agent asks with `response.interrupt()`. */
export interface InterruptRequest {
  /** `input`: a value matching `schema`; `approval`: approve or reject, with an optional comment. */
  kind: 'input' | 'approval'
  /** What to ask, for a person to read. */
  message: string
  /** For `input`: the JSON Schema the answer must match (default: any JSON value). */
  schema?: Record<string, unknown>
  /** Seconds the question may wait for its answer (default INTERRUPT_EXPIRES_S). */
  expires_in_s?: number
  /** Ask for credentials (A2A clients see `auth-required`). */
  auth?: boolean
}

/**
 * The handle of one stream made with `response.create_stream()`: Open → write* → close | abort.
 */
export interface StreamHandle {
  /** The stream's id (the `stream_id` of its packets). */
  readonly stream_id: string
  /** True until the stream is closed or aborted (or the whole response ended). */
  readonly is_active: boolean
  /** Send a text chunk (a DELTA packet). Throws `AH_ERR_STREAM_CLOSED` once the stream is no longer active. */
  write(chunk: string): Promise<void>
  /** End the stream normally (CLOSE `"done"`). Closing a closed stream is a no-op. */
  close(): Promise<void>
  /** End the stream with an error: ERROR `stream_aborted` (FATAL) then CLOSE `"aborted"`, on this stream only. */
  abort(reason: string): Promise<void>
}

/**
 * Internal system events: telemetry, logs and audit records. Never shown to the user as such.
 */
export interface EventSink {
  /**
   * Ingest an event. A {@link PresentationEvent} is sent to the client as an EVENT packet; any other
   * object (a CloudEvent, a graph event) is recorded as an internal event.
   */
  emit(event: PresentationEvent | JsonObject): Promise<void>
  /** Write a structured log line for this request. */
  log(level: LogLevel, message: string, metadata?: JsonObject): Promise<void>
  /** Record an audit entry (who did what to which resource, and whether it worked). */
  audit(actor: string, action: string, resource: string, success: boolean): Promise<void>
}

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal'

/**
 * What an agent uses to answer. Every method resolves once its packet has been handed to the
 * transport (for SSE: after the socket drained), so an agent that awaits its calls is paced by its
 * client. Calls after the response has ended reject with `AH_ERR_STREAM_CLOSED`.
 */
export interface ResponseHandler extends EventSink {
  /**
   * Fires when the agent should stop: the client disconnected or cancelled, the server is shutting
   * down, or the run already ended fatally. `signal.reason` says which.
   */
  readonly signal: AbortSignal
  /** A thinking step (THOUGHT_TRACE). */
  thought(content: string, status?: string): Promise<void>
  /** A markdown block (MARKDOWN_BLOCK); its content also goes into the JSON transcript's `text`. */
  markdown(content: string): Promise<void>
  /** Structured data (a DATA event). */
  data(data: JsonObject, title?: string, view_hint?: string): Promise<void>
  /** Sources behind the answer (CITATION_BLOCK). */
  citations(citations: Citation[]): Promise<void>
  /** Progress of a step (PROGRESS_INDICATOR); `percent` is a fraction 0..1. */
  progress(label: string, status?: 'running' | 'complete' | 'failed', percent?: number): Promise<void>
  /** Images or other media (MEDIA_CAROUSEL). */
  media(items: MediaItem[]): Promise<void>
  /**
   * Report an error. Recoverable: a WARNING and the run goes on. Otherwise FATAL: every open stream
   * and the response end with CLOSE `"aborted"`, the signal fires, and later calls reject.
   */
  error(message: string, details?: JsonObject, recoverable?: boolean): Promise<void>
  /**
   * The final answer (a RESULT event). In JSON mode the response's `output` is exactly `obj`.
   * It is validated against the capability's `outputs` schema.
   */
  result(obj: JsonObject): Promise<void>
  /** Open another stream; its first packet is EVENT `STREAM_START`. */
  create_stream(title?: string, metadata?: JsonObject): Promise<StreamHandle>
  /**
   * Report tokens a backend used and what they cost (our extension). Calls add up; the JSON
   * response's `metrics` carry the totals, and each call is an EVENT `{ type: "USAGE", data }` on
   * the main stream.
   */
  usage(usage: { input_tokens: number, output_tokens: number }, cost?: number): Promise<void>
  /**
   * Stop and ask a person (human in the loop). `kind: "input"` resolves with a value that matches
   * `schema`; `kind: "approval"` with `{ approved, comment? }`. The run does not wait in memory: once
   * the agent waits on its questions (several may be open at once, each with its own id), it sends
   * EVENT `INTERRUPT` and ends with CLOSE `"input_required"`, and the promise never settles in this
   * execution (the signal fires). When the caller answers, the host enters `assist()` again with the
   * same request, and replays: each `interrupt()` already answered resolves at once with its answer,
   * each backend `send`/`resume`, `host.tools.call`, `host.a2a.call` and `host.bus.publish` made before
   * gets its recorded answer without being made again, and packets already sent are not sent twice.
   * So an agent must reach its questions the same way each time: what it does outside `response`
   * and `host` (a clock, a random number, a file) must not change the path to them.
   * @throws AH_ERR_EVENT_INVALID when the request is malformed or the run cannot ask (a task)
   */
  interrupt(request: InterruptRequest & { kind: 'approval' }): Promise<{ approved: boolean, comment?: string }>
  interrupt<T = unknown>(request: InterruptRequest): Promise<T>
}

/**
 * A hosted agent. `manifest` is its served AgentDefinition; `assist` answers one request by calling
 * methods on `response` (it returns nothing). `startup()` runs before the server listens and
 * `shutdown()` when it closes.
 */
export interface Agent {
  readonly manifest: AgentDefinition
  /**
   * Backends the agent needs (names from `GET /v1/backends`). While one is not available the host
   * answers 503 `AH_ERR_BACKEND_UNAVAILABLE` before the agent runs.
   */
  readonly backends?: readonly string[]
  /** Backends one capability needs besides `backends`, by capability name: checked the same way, for a call of that capability. */
  readonly capabilityBackends?: Readonly<Record<string, readonly string[]>>
  assist(request: ResolvedAgentRequest, session: SessionHandle, response: ResponseHandler, host: AgentHost): Promise<void>
  startup?(): Promise<void> | void
  shutdown?(): Promise<void> | void
}

/** A capability as an author may write it: only `name` and `description` are required. */
export type CapabilitySpec = Partial<AgentCapability> & Pick<AgentCapability, 'name' | 'description'>

/** A manifest as an author may write it; {@link defineAgent} fills in the rest (CAP.md §7). */
export interface ManifestSpec extends Partial<Omit<AgentDefinition, 'metadata' | 'capabilities' | 'config' | 'dependencies'>> {
  metadata: Omit<AgentMetadata, 'requires_auth'> & { requires_auth?: boolean }
  capabilities?: CapabilitySpec[]
  config?: Partial<Omit<AgentDefinition['config'], 'model_config'>> & { model_config?: ModelConfig }
  dependencies?: Partial<AgentDefinition['dependencies']>
}

/** What an author passes to {@link defineAgent}. */
export interface AgentSpec {
  manifest: ManifestSpec
  backends?: Agent['backends']
  capabilityBackends?: Agent['capabilityBackends']
  assist: Agent['assist']
  startup?: Agent['startup']
  shutdown?: Agent['shutdown']
}

/** The session context an agent receives in `request.context`. */
export type { SessionContext }

/** Severity of an error reported by an agent. */
export type { StreamErrorSeverity }
