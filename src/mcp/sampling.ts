import { randomUUID } from 'node:crypto'
import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import type {
  CreateMessageRequest, CreateMessageResult, CreateMessageResultWithTools, RequestId, SamplingMessage, SamplingMessageContentBlock, Tool as McpTool
} from '@modelcontextprotocol/sdk/types.js'
import { AH_ERR_BACKEND_FAILED, AH_ERR_BACKEND_UNAVAILABLE } from '../errors.js'
import {
  BaseProtocol, type Message, type ParseResult, type ParseState, type ProtocolContext, type ProtocolResponse, type StartConfig,
  type StreamChunk, type ToolCall, type ToolRegistry
} from '../backends/protocol.js'

/** The name agents ask for: `host.backend('mcp-sampling')`, `backends: ['mcp-sampling']`. */
export const MCP_SAMPLING = 'mcp-sampling'

/** Tokens one answer may take when the session does not say (`StartConfig.maxTokens`): LLM_MAX_TOKENS's default. */
export const DEFAULT_MAX_TOKENS = 1024

/** How long the client may take to answer one request (it may ask its user first); progress from the client restarts it. */
export const DEFAULT_SAMPLING_TIMEOUT_MS = 300_000

/** Requests per `send` before a tool loop is cut off (`stopReason: "max_turns"`): LLM_MAX_TURNS's default. */
export const DEFAULT_MAX_TURNS = 8

/** The SDK's `ErrorCode.RequestTimeout` (its enum is a value: importing it would load the SDK with this module's importers). */
const REQUEST_TIMEOUT = -32001

/** Settings of a {@link SamplingProtocol}. */
export interface SamplingOptions {
  /** The MCP session's server: its client is asked. */
  server: Pick<Server, 'createMessage' | 'getClientCapabilities'>
  /** The JSON-RPC id of the `tools/call` whose run asks: each request goes on that call's stream. */
  relatedRequestId: RequestId
  /** Stops a request when the agent passes no `ctx.signal` (the call's own: cancelled, or its client gone). */
  signal?: AbortSignal
  /** Default {@link DEFAULT_SAMPLING_TIMEOUT_MS}. */
  timeoutMs?: number
  /** Default {@link DEFAULT_MAX_TURNS}. */
  maxTurns?: number
}

interface SamplingSession {
  id: string
  system?: string
  model?: string
  maxTokens: number
  messages: Message[]
}

const MEMORY_KEY = `backend:${MCP_SAMPLING}`

/** Messages kept in a session's stored history, as the LLM backends keep them. */
const MAX_HISTORY = 200

const textBlock = (text: string): SamplingMessageContentBlock => ({ type: 'text', text })

/** A tool call the client's model cannot be shown as a `tool_use` block, in words. */
const calledText = (call: ToolCall): string => `[called the tool ${call.name} with ${JSON.stringify(call.arguments)}]`

/** A tool's answer the client's model cannot be shown as a `tool_result` block, in words. */
const answeredText = (name: string | undefined, content: string): string => `[${name === undefined ? 'a tool' : `the tool ${name}`} answered: ${content}]`

/**
 * A backend conversation as MCP sampling messages. System messages join the system prompt (after
 * the session's own). An assistant message's tool calls and the tool messages right after it become
 * `tool_use` blocks and a user message of `tool_result` blocks when `tools` (the client takes tools
 * in sampling) and every call has its one answer there; otherwise (a client without tools, a call
 * cut off, a result whose call the kept history lost) they are said as text, so the model still
 * reads what happened and the SDK's pairing rule for tool blocks always holds.
 */
export function samplingMessages (messages: readonly Message[], tools: boolean, system?: string): { systemPrompt?: string, messages: SamplingMessage[] } {
  const prompts = system === undefined ? [] : [system]
  const out: SamplingMessage[] = []
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i] as Message
    if (message.role === 'system') {
      prompts.push(message.content)
    } else if (message.role === 'user') {
      out.push({ role: 'user', content: textBlock(message.content) })
    } else {
      const results: Message[] = []
      while (messages[i + 1]?.role === 'tool') results.push(messages[++i] as Message)
      const calls = message.role === 'assistant' ? message.toolCalls ?? [] : []
      const paired = calls.length > 0 && calls.length === results.length && calls.every((c) => results.some((r) => r.toolCallId === c.id))
      if (tools && paired) {
        out.push({ role: 'assistant', content: [...(message.content !== '' ? [textBlock(message.content)] : []), ...calls.map((c): SamplingMessageContentBlock => ({ type: 'tool_use', id: c.id, name: c.name, input: c.arguments }))] })
        out.push({ role: 'user', content: results.map((r): SamplingMessageContentBlock => ({ type: 'tool_result', toolUseId: r.toolCallId as string, content: [{ type: 'text', text: r.content }] })) })
        continue
      }
      // a tool message with no assistant before it: its call was cut from the kept history
      if (message.role === 'tool') results.unshift(message)
      else out.push({ role: 'assistant', content: textBlock([message.content, ...calls.map(calledText)].filter((t) => t !== '').join('\n')) })
      if (results.length > 0) out.push({ role: 'user', content: textBlock(results.map((r) => answeredText(calls.find((c) => c.id === r.toolCallId)?.name, r.content)).join('\n')) })
    }
  }
  return { ...(prompts.length > 0 ? { systemPrompt: prompts.join('\n\n') } : {}), messages: out }
}

/** What the client's model answered, as a backend reads it: its text, its tool calls, and the kinds of content it had no place for. */
export function samplingAnswer (result: CreateMessageResult | CreateMessageResultWithTools): { content: string, toolCalls: ToolCall[], ignored: string[] } {
  const blocks = Array.isArray(result.content) ? result.content : [result.content]
  const content: string[] = []
  const toolCalls: ToolCall[] = []
  const ignored: string[] = []
  for (const block of blocks) {
    if (block.type === 'text') content.push(block.text)
    else if (block.type === 'tool_use') toolCalls.push({ id: block.id, name: block.name, arguments: block.input })
    else ignored.push(block.type)
  }
  return { content: content.join(''), toolCalls, ignored }
}

/** The agent's tools as sampling tools. */
function samplingTools (tools: ToolRegistry): McpTool[] {
  return Object.entries(tools).map(([name, tool]) => ({ name, description: tool.description, inputSchema: { ...tool.parameters, type: 'object' } }))
}

/**
 * The calling MCP client's model as a backend (`mcp-sampling`): each model call is a
 * `sampling/createMessage` request to the client of the MCP session whose `tools/call` started the
 * run, sent on that call's stream, which the client answers with its model (after asking its user,
 * if it does). The MCP binding lends it to the runs it starts (`PrepareOptions.lend`); it is
 * available while the client declares the `sampling` capability.
 *
 * As the LLM backends: the conversation is kept per session (and in `ctx.memory`, so a later tool
 * call of the same MCP session resumes it); the answer's text is the response's content, streamed as
 * one `text` chunk (sampling does not stream); with `ctx.tools` and a client that declares
 * `sampling.tools`, the model's tool calls are run and their results sent back until it stops asking
 * or `maxTurns` (a client without it is asked without the tools). The client's `model` and
 * `stopReason` are the response's; usage is null (MCP does not report it). A client that answers
 * with an error (its user declined) or not in time fails the call with a `BackendError`.
 */
export class SamplingProtocol extends BaseProtocol {
  readonly name = MCP_SAMPLING
  readonly #o: SamplingOptions
  readonly #sessions = new Map<string, SamplingSession>()

  constructor (options: SamplingOptions) {
    super()
    this.#o = options
  }

  transportType (): 'llm' { return 'llm' }

  override async available (): Promise<boolean> {
    return this.#o.server.getClientCapabilities()?.sampling !== undefined
  }

  override unavailableReason (): string {
    return 'mcp-sampling is the calling MCP client\'s model, and this client did not declare the `sampling` capability (sampling/createMessage)'
  }

  async start (config: StartConfig, ctx: ProtocolContext): Promise<string> {
    const session: SamplingSession = {
      id: config.sessionId ?? randomUUID(),
      maxTokens: config.maxTokens ?? DEFAULT_MAX_TOKENS,
      messages: [],
      ...(config.system !== undefined ? { system: config.system } : {}),
      ...(config.model !== undefined ? { model: config.model } : {})
    }
    this.#sessions.set(session.id, session)
    await this.#persist(session, ctx)
    return session.id
  }

  async send (sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<ProtocolResponse> {
    if (!await this.available()) throw new AH_ERR_BACKEND_UNAVAILABLE(this.unavailableReason())
    const session = await this.#load(sessionId, ctx)
    const before = session.messages.length
    try {
      return await this.#converse(session, messages, ctx)
    } catch (err) {
      // a failed exchange is not part of the conversation: the caller may send the same messages again
      session.messages.length = before
      throw err
    }
  }

  async resume (sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<{ sessionId: string, response: ProtocolResponse }> {
    return { sessionId, response: await this.send(sessionId, messages, ctx) }
  }

  async stop (sessionId: string): Promise<void> {
    this.#sessions.delete(sessionId)
  }

  /** The messages as `sampling/createMessage` takes them (system messages in `systemPrompt`), tool blocks only for a client that takes tools. */
  formatMessages (messages: Message[], _ctx?: ProtocolContext): { systemPrompt?: string, messages: SamplingMessage[] } {
    return samplingMessages(messages, this.#takesTools())
  }

  /** Sampling does not stream: the SDK reads the client's one answer. A chunk is such an answer, whole, as JSON. */
  parseStream (chunk: Uint8Array | string | null, state: ParseState): ParseResult[] {
    if (chunk === null) {
      state.ended = true
      return [{ type: 'eof' }]
    }
    try {
      return [{ type: 'message', message: JSON.parse(typeof chunk === 'string' ? chunk : state.decoder.decode(chunk)) as Record<string, unknown> }]
    } catch (err) {
      return [{ type: 'error', error: err as Error }]
    }
  }

  override async streamMessage (_sessionId: string, chunk: StreamChunk, ctx: ProtocolContext): Promise<void> {
    await ctx.onStreamMessage?.(chunk)
  }

  #takesTools (): boolean {
    return this.#o.server.getClientCapabilities()?.sampling?.tools !== undefined
  }

  async #converse (session: SamplingSession, messages: Message[], ctx: ProtocolContext): Promise<ProtocolResponse> {
    session.messages.push(...messages)
    const offered = ctx.tools !== undefined && Object.keys(ctx.tools).length > 0
    const tools = offered && this.#takesTools() ? ctx.tools : undefined
    if (offered && tools === undefined) ctx.log?.info({ backend: this.name }, 'the MCP client does not take tools in sampling: its model is asked without them')
    const maxTurns = this.#o.maxTurns ?? DEFAULT_MAX_TURNS
    const calls: ToolCall[] = []
    for (let turn = 1; ; turn++) {
      const response = await this.#call(session, tools, ctx)
      calls.push(...response.toolCalls)
      session.messages.push({ role: 'assistant', content: response.content, ...(response.toolCalls.length > 0 ? { toolCalls: response.toolCalls } : {}) })
      if (response.content !== '') await this.streamMessage(session.id, { type: 'text', text: response.content }, ctx)
      const done = response.toolCalls.length === 0 || tools === undefined || turn >= maxTurns
      if (done) {
        await this.#persist(session, ctx)
        const stopReason = response.toolCalls.length > 0 && tools !== undefined ? 'max_turns' : response.stopReason
        return { ...response, toolCalls: calls, stopReason, metadata: { ...response.metadata, turns: turn } }
      }
      for (const call of response.toolCalls) {
        const result = await this.#runTool(session.id, call, tools, ctx)
        await this.streamMessage(session.id, { type: 'tool_result', callId: call.id, name: call.name, content: result.content, isError: result.isError }, ctx)
        session.messages.push({ role: 'tool', toolCallId: call.id, content: result.content })
      }
    }
  }

  /** One `sampling/createMessage` request, on the tools/call's stream. */
  async #call (session: SamplingSession, tools: ToolRegistry | undefined, ctx: ProtocolContext): Promise<ProtocolResponse> {
    const signal = ctx.signal ?? this.#o.signal
    signal?.throwIfAborted()
    const timeout = this.#o.timeoutMs ?? DEFAULT_SAMPLING_TIMEOUT_MS
    const params: CreateMessageRequest['params'] = {
      ...samplingMessages(session.messages, tools !== undefined, session.system),
      maxTokens: session.maxTokens,
      ...(session.model !== undefined ? { modelPreferences: { hints: [{ name: session.model }] } } : {}),
      ...(tools !== undefined ? { tools: samplingTools(tools) } : {})
    }
    let result: CreateMessageResult | CreateMessageResultWithTools
    try {
      result = await this.#o.server.createMessage(params, {
        relatedRequestId: this.#o.relatedRequestId,
        timeout,
        resetTimeoutOnProgress: true,
        ...(signal !== undefined ? { signal } : {})
      })
    } catch (err) {
      signal?.throwIfAborted()
      const code = (err as { code?: unknown }).code
      const message = (err as Error)?.message ?? String(err)
      if (code === REQUEST_TIMEOUT) throw new AH_ERR_BACKEND_FAILED('backend_timeout', `The MCP client's model did not answer within ${timeout} ms`, 'TRANSIENT', { timeout_ms: timeout })
      // the SDK's McpError says "MCP error <code>: " before the client's own message
      if (typeof code === 'number') throw new AH_ERR_BACKEND_FAILED('backend_failed', `The MCP client refused to sample its model: ${message.replace(/^MCP error -?\d+: /, '')}`, 'FATAL', { code })
      throw new AH_ERR_BACKEND_FAILED('backend_failed', `The MCP client's answer to sampling/createMessage could not be used: ${message}`, 'FATAL')
    }
    const answer = samplingAnswer(result)
    return {
      content: answer.content,
      toolCalls: answer.toolCalls,
      usage: null,
      stopReason: result.stopReason ?? null,
      metadata: { model: result.model, provider: MCP_SAMPLING, ...(answer.ignored.length > 0 ? { ignored_content: answer.ignored } : {}) }
    }
  }

  async #runTool (sessionId: string, call: ToolCall, tools: ToolRegistry, ctx: ProtocolContext): Promise<{ content: string, isError: boolean }> {
    const tool = Object.hasOwn(tools, call.name) ? tools[call.name] : undefined
    if (tool === undefined) return { content: `Unknown tool "${call.name}"`, isError: true }
    await this.streamMessage(sessionId, { type: 'tool_call', call }, ctx)
    try {
      return { content: String(await tool.run(call.arguments, ctx.signal ?? this.#o.signal ?? new AbortController().signal)), isError: false }
    } catch (err) {
      if (ctx.signal?.aborted === true) throw ctx.signal.reason
      return { content: `Tool "${call.name}" failed: ${(err as Error)?.message ?? String(err)}`, isError: true }
    }
  }

  async #load (sessionId: string, ctx: ProtocolContext): Promise<SamplingSession> {
    const held = this.#sessions.get(sessionId)
    if (held !== undefined) return held
    const stored = await ctx.memory?.get<SamplingSession>(MEMORY_KEY)
    if (stored !== undefined && stored !== null && stored.id === sessionId && Array.isArray(stored.messages)) {
      this.#sessions.set(sessionId, stored)
      return stored
    }
    await this.start({ sessionId }, ctx)
    return this.#sessions.get(sessionId) as SamplingSession
  }

  async #persist (session: SamplingSession, ctx: ProtocolContext): Promise<void> {
    if (session.messages.length > MAX_HISTORY) {
      // never start the kept history with tool results whose call was cut off
      let from = session.messages.length - MAX_HISTORY
      while (from < session.messages.length && session.messages[from]?.role === 'tool') from++
      session.messages = session.messages.slice(from)
    }
    await ctx.memory?.store(MEMORY_KEY, session)
  }
}
