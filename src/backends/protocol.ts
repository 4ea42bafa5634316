/**
 * The agent protocol behaviour (seed 004): what a backend an agent thinks with must do. A
 * *protocol* owns the session lifecycle, parses what the backend streams and delegates tool calls;
 * a *transport* (see `llm/`) does the wire-level HTTP of one provider.
 */
import type { EventPublication } from '../protocol/contract.js'
import type { A2ACaller } from '../protocol/a2a-client.js'
import type { ToolCall as McpToolCall, ToolResponse as McpToolResponse } from '../protocol/tools.js'

/** Any JSON object. */
export type JsonObject = Record<string, unknown>

/** A tool call the model asked for. `arguments` is the parsed JSON the model sent. */
export interface ToolCall {
  id: string
  name: string
  arguments: JsonObject
}

/**
 * One conversation message, protocol-neutral. `assistant` messages may carry `toolCalls`; a `tool`
 * message answers the call named by `toolCallId`.
 */
export interface Message {
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string
  toolCalls?: ToolCall[]
  toolCallId?: string
}

/** Tokens a response used, as the provider counted them. */
export interface TokenUsage {
  input: number
  output: number
}

/** What `send`/`resume` return (seed 004 `protocol_response`). */
export interface ProtocolResponse {
  content: string
  toolCalls: ToolCall[]
  usage: TokenUsage | null
  /** Why the backend stopped: `end_turn`, `tool_use`, `max_tokens`, ... as the backend says it. */
  stopReason: string | null
  metadata: JsonObject
}

/** One piece of a response as it streams (what `streamMessage` receives). */
export type StreamChunk =
  | { type: 'text', text: string }
  | { type: 'reasoning', text: string }
  | { type: 'tool_call', call: ToolCall }
  | { type: 'tool_result', callId: string, name: string, content: string, isError: boolean }
  /** `model`: the model that used the tokens, when the backend knows it (the LLM backends do). */
  | { type: 'usage', usage: TokenUsage, cost: number, model?: string }

/** What `parseStream` makes of the bytes received so far. */
export type ParseResult =
  | { type: 'message', message: JsonObject }
  | { type: 'partial' }
  | { type: 'eof' }
  | { type: 'error', error: Error }

/**
 * The unfinished tail of a stream between `parseStream` calls. One per stream: bytes split
 * anywhere (even inside a UTF-8 character) are carried over, never lost. The SSE parser keys
 * its own reader (the event being read) by this object.
 */
export class ParseState {
  readonly decoder = new TextDecoder('utf-8')
  /** Line parsers ({@link takeLines}): the unfinished last line. */
  pending = ''
  /** The input was ended (`parseStream(null, state)`). */
  ended = false
}

/** A tool the model may call; `run` gets the parsed arguments and returns the result text. */
export interface Tool {
  description: string
  /** JSON Schema of the arguments. */
  parameters: JsonObject
  run(args: JsonObject, signal: AbortSignal): Promise<string> | string
}

/** The tools an agent supplies, by name. */
export type ToolRegistry = Record<string, Tool>

/** Durable per-session memory (the CAP session's values): history kept here survives restarts. */
export interface SessionMemory {
  get<T = unknown>(key: string, fallback?: T): Promise<T | undefined>
  store(key: string, value: unknown): Promise<void>
}

/** The minimal logger protocols write to (pino's shape). */
export interface ProtocolLog {
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
}

/** What the caller lends a protocol for one call (seed 004's `Agentic.Loop.Context`). */
export interface ProtocolContext {
  /** Cancels the call: the provider request or the subprocess is stopped. */
  signal?: AbortSignal
  /** Where the session's history is kept; without it history lives only in this process. */
  memory?: SessionMemory
  /** Receives each streamed chunk (`context.callbacks[:on_stream_message]` in the seed). */
  onStreamMessage?: (chunk: StreamChunk) => Promise<void> | void
  tools?: ToolRegistry
  /** W3C trace context of the request, passed on to the backend. */
  traceparent?: string
  log?: ProtocolLog
}

/** Per-session options of `start` (seed 004 `start_opts` plus the backend config). */
export interface StartConfig {
  /** Reuse this id (for example the CAP session id); a new UUID otherwise. */
  sessionId?: string
  /** A system prompt the session starts with. */
  system?: string
  /** Override the configured model. */
  model?: string
  userId?: string
  /** The most tokens one response may take, for backends that take it per session (`mcp-sampling`; the LLM backends take LLM_MAX_TOKENS). */
  maxTokens?: number
}

/** Usage counted for one session so far. */
export interface SessionUsage {
  input: number
  output: number
  cost: number
  turns: number
}

/** `llm`: an API behind HTTP. `local_agent`: a command-line agent run as a subprocess. */
export type TransportType = 'llm' | 'local_agent'

/**
 * The agent protocol behaviour of seed 004, in TypeScript naming. Every method is required here;
 * {@link BaseProtocol} supplies the seed's defaults for the optional ones.
 */
export interface AgentProtocol {
  /** The name agents ask for and `/v1/backends` lists. */
  readonly name: string
  /** Whether the backend can be used: credentials configured (LLM) or the binary present (local). */
  available(): Promise<boolean>
  /** When not available: the settings to set, for the 503 message. */
  unavailableReason(): string
  /** Start a session; returns its id. */
  start(config: StartConfig, ctx: ProtocolContext): Promise<string>
  /** Send `messages` (appended to the session's history) and get the response, streaming as it comes. */
  send(sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<ProtocolResponse>
  /** Continue a session, loading its history from `ctx.memory` when this process does not hold it. */
  resume(sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<{ sessionId: string, response: ProtocolResponse }>
  /** End a session and free what it holds (history stays in memory for a later resume). */
  stop(sessionId: string): Promise<void>
  /** The provider's wire form of `messages`. */
  formatMessages(messages: Message[], ctx: ProtocolContext): unknown
  /**
   * Parse streamed bytes. Returns every complete message in `chunk` plus the tail carried in
   * `state`; `partial` when nothing completed; `eof` once the stream's end marker is seen
   * (`chunk === null` flushes at end of input).
   */
  parseStream(chunk: Uint8Array | string | null, state: ParseState): ParseResult[]
  /** Push one streamed chunk to the client (default: no-op; the host's protocols call `ctx.onStreamMessage`). */
  streamMessage(sessionId: string, chunk: StreamChunk, ctx: ProtocolContext): Promise<void>
  /** Cost of a response (default 0). */
  estimateCost(response: ProtocolResponse): number
  /** Usage of a session so far, or null when it is not tracked (default). */
  getUsage(sessionId: string): SessionUsage | null
  transportType(): TransportType
}

/** The seed's defaults for the optional callbacks. */
export abstract class BaseProtocol implements AgentProtocol {
  abstract readonly name: string
  async available (): Promise<boolean> { return true }
  unavailableReason (): string { return `backend "${this.name}" is not available` }
  abstract start (config: StartConfig, ctx: ProtocolContext): Promise<string>
  abstract send (sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<ProtocolResponse>
  abstract resume (sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<{ sessionId: string, response: ProtocolResponse }>
  abstract stop (sessionId: string): Promise<void>
  abstract formatMessages (messages: Message[], ctx: ProtocolContext): unknown
  abstract parseStream (chunk: Uint8Array | string | null, state: ParseState): ParseResult[]
  async streamMessage (_sessionId: string, _chunk: StreamChunk, _ctx: ProtocolContext): Promise<void> {}
  estimateCost (_response: ProtocolResponse): number { return 0 }
  getUsage (_sessionId: string): SessionUsage | null { return null }
  abstract transportType (): TransportType
}

/**
 * Split decoded text into complete lines, keeping the unfinished tail in `state`.
 * @param chunk bytes or text; `null` ends the input (the tail, if any, is returned as a last line)
 */
export function takeLines (chunk: Uint8Array | string | null, state: ParseState): string[] {
  if (chunk === null) {
    state.pending += state.decoder.decode()
    state.ended = true
    const rest = state.pending
    state.pending = ''
    return rest === '' ? [] : [rest]
  }
  state.pending += typeof chunk === 'string' ? chunk : state.decoder.decode(chunk, { stream: true })
  const lines = state.pending.split('\n')
  state.pending = lines.pop() ?? ''
  return lines.map((l) => l.endsWith('\r') ? l.slice(0, -1) : l)
}

/**
 * A W3C `traceparent` for a CAP trace context: the trace id's 32 hex digits and the span id's
 * first 16 (both are UUIDs on the wire), sampled.
 */
export function traceparentOf (trace: { trace_id: string, span_id: string }): string {
  return `00-${trace.trace_id.replace(/-/g, '').toLowerCase()}-${trace.span_id.replace(/-/g, '').slice(0, 16).toLowerCase()}-01`
}

/** What the host lends an agent besides the request: its configured backends (see `GET /v1/backends`). */
export interface AgentHost {
  /**
   * The backend protocol named `name` (`llm`, `openai`, `anthropic`, `local`, ...).
   * @throws AH_ERR_BACKEND_UNAVAILABLE when it is not configured
   */
  backend(name: string): AgentProtocol
  /** The event bus, where the host has one: events published here belong to the caller of the run or task. */
  readonly bus?: BusPublisher
  /**
   * The MCP tools the operator registered (MCP_SERVERS_FILE, `GET /v1/tools`), where the host lends
   * them (runs of `/v1/assist`, and tasks: a task agent's `context.host`): `host.tools.call({ tool, action, args, timeout,
   * retry_on_failure })` answers with the seed's `ToolResponse`. The rules hold before a call reaches
   * a server; the run's (or task's) signal aborts it; each call is recorded in its events and the audit log.
   */
  readonly tools?: ToolCaller
  /**
   * External A2A agents the operator configured (A2A_AGENTS_FILE), where the host lends them (runs of
   * `/v1/assist`, and tasks): `host.a2a.call(agent, capability, payload, { timeout, signal, onUpdate })`
   * answers with the seed's `A2AResponse`. Calls are checked against the file, recorded in the run's
   * (or task's) events and the audit log, and given up (their remote tasks cancelled) when it ends.
   */
  readonly a2a?: A2ACaller
}

/**
 * The run or task a call the host lends an agent serves (`host.tools`, `host.a2a`): who calls, on
 * whose behalf, and what stops it. Such calls are recorded in its events and audit rows. A run's
 * calls name its request and session; a task's name the task (`taskId`) instead.
 */
export interface HostCallContext {
  /** The calling agent's manifest name (checked against the tool's `agents`, the remote's `callers`). */
  agent: string
  /** The principal that called the run or created the task: the owner of its events, the actor of its audit rows. */
  owner: string
  /** The run's request id, as its caller sent it (a task's call has none: `taskId`). */
  requestId?: string
  rootRequestId?: string
  /** The run's session (a task has none). */
  sessionId?: string
  /** The task whose agent calls (`context.host` of `handleTask`), where a run's call names its request. */
  taskId?: string
  /** The trace the calls belong to (a task has one only when it was made with `context.trace_id`). */
  traceId?: string
  /** Who the run's envelope says it is for (a claim). */
  user?: string
  /** The run's (or task's) signal: calls in flight are given up when it fires (remote tasks cancelled), and none starts after. */
  signal: AbortSignal
  /**
   * Why the owner may not have this agent call on its behalf (a task whose owner lacks
   * `assist:invoke`, or whose agent list leaves this agent out: `assist/task-host.ts`): every call is
   * refused with it (`forbidden: <why>`) before anything else is checked, and recorded as every refusal.
   */
  forbidden?: string
}

/** Publishing to the event bus (seed 003 `EventPublication`); see `GET /v1/bus/events`. */
export interface BusPublisher {
  /**
   * Publish one event; an event with the same `key` still alive makes this a duplicate, stored once.
   * @throws AH_ERR_BUS_EVENT_INVALID when the publication or a common event's `data` is invalid
   */
  publish(publication: EventPublication): Promise<{ duplicate: boolean, event: { id: string, seq: number } }>
}

/** Calling MCP tools (seed 003 `ToolCall` → `ToolResponse`); `GET /v1/tools` lists them. */
export interface ToolCaller {
  /**
   * Call `action` of `tool` with `args`. Before the server sees it, the host checks that the tool is
   * registered, that this agent may use it, that the action is allowed and that its scopes hold (path
   * globs by real path, a branch pattern); a refusal is `success: false` with an `error` that starts
   * with the rule (`unknown_tool`, `agent_not_allowed`, `action_not_allowed`, `scope_violation`;
   * `approval_rejected`, `approval_required` for a tool marked `require_approval`, whose call first
   * asks the run's caller for an approval and reaches the server only once approved). The
   * call then gets `timeout` seconds (default: the tool's, else 30), starting the server included;
   * after a transport failure (a crashed server, a lost connection) it is made once more unless
   * `retry_on_failure` is false. `result` is the MCP `CallToolResult` (`content`, `structuredContent`).
   * Refusals and failures resolve; nothing here rejects but a malformed call.
   * @throws AH_ERR_TOOL_CALL_INVALID when `call` is not a ToolCall
   */
  call(call: McpToolCall): Promise<McpToolResponse>
}
