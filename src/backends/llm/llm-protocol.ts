import { randomUUID } from 'node:crypto'
import { AH_ERR_BACKEND_FAILED } from '../../errors.js'
import {
  BaseProtocol, ParseState, type Message, type ParseResult, type ProtocolContext, type ProtocolResponse,
  type SessionUsage, type StartConfig, type StreamChunk, type TokenUsage, type ToolCall
} from '../protocol.js'
import { parseSse } from './sse.js'
import { Turn, type LlmTransport } from './transport.js'

/** Price of a model in USD per million tokens. */
export interface ModelPrice {
  input: number
  output: number
}

/** Settings of an {@link LlmProtocol}. */
export interface LlmProtocolOptions {
  name: string
  transport: LlmTransport
  /** Prices by model name; a model without a price costs 0. */
  prices: Record<string, ModelPrice>
  /** How long the provider may send nothing (before the first byte, or between chunks). */
  timeoutMs: number
  /** Model calls per `send` before a tool loop is cut off. */
  maxTurns: number
  /** Messages kept in a session's stored history (the system prompt is kept apart). */
  maxHistory?: number
}

interface LlmSession {
  id: string
  system?: string
  model: string
  messages: Message[]
  usage: SessionUsage
}

const MEMORY_PREFIX = 'backend:'

/**
 * The LLM protocol (seed 004): stateless HTTP calls to a provider, with the conversation kept per
 * session (and in `ctx.memory`, so a session resumes after a restart). `send` streams each model
 * call through `parseStream`, runs the tool calls the model makes with the agent's tools and calls
 * the model again with their results, until it stops asking or `maxTurns` is reached.
 */
export class LlmProtocol extends BaseProtocol {
  readonly name: string
  readonly transport: LlmTransport
  readonly #o: LlmProtocolOptions
  readonly #sessions = new Map<string, LlmSession>()

  constructor (options: LlmProtocolOptions) {
    super()
    this.name = options.name
    this.transport = options.transport
    this.#o = options
  }

  transportType (): 'llm' { return 'llm' }

  override async available (): Promise<boolean> {
    return this.transport.missingSettings().length === 0
  }

  override unavailableReason (): string {
    const missing = this.transport.missingSettings()
    return missing.length === 0 ? '' : `the ${this.transport.provider} backend needs ${missing.join(', ')} to be set`
  }

  async start (config: StartConfig, ctx: ProtocolContext): Promise<string> {
    const session: LlmSession = {
      id: config.sessionId ?? randomUUID(),
      model: config.model ?? this.transport.model,
      messages: [],
      usage: { input: 0, output: 0, cost: 0, turns: 0 }
    }
    if (config.system !== undefined) session.system = config.system
    this.#sessions.set(session.id, session)
    await this.#persist(session, ctx)
    return session.id
  }

  async send (sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<ProtocolResponse> {
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

  async #converse (session: LlmSession, messages: Message[], ctx: ProtocolContext): Promise<ProtocolResponse> {
    session.messages.push(...messages)
    const calls: ToolCall[] = []
    let usage = null as TokenUsage | null
    for (let turn = 1; ; turn++) {
      const response = await this.#call(session, ctx)
      if (response.usage !== null) usage = { input: (usage?.input ?? 0) + response.usage.input, output: (usage?.output ?? 0) + response.usage.output }
      calls.push(...response.toolCalls)
      session.messages.push({ role: 'assistant', content: response.content, ...(response.toolCalls.length > 0 ? { toolCalls: response.toolCalls } : {}) })
      const tools = ctx.tools
      const done = response.toolCalls.length === 0 || tools === undefined || turn >= this.#o.maxTurns
      if (!done) {
        for (const call of response.toolCalls) {
          const result = await this.#runTool(session.id, call, ctx)
          await this.streamMessage(session.id, { type: 'tool_result', callId: call.id, name: call.name, content: result.content, isError: result.isError }, ctx)
          session.messages.push({ role: 'tool', toolCallId: call.id, content: result.content })
        }
      }
      await this.#persist(session, ctx)
      if (done) {
        const stopReason = response.toolCalls.length > 0 && tools !== undefined ? 'max_turns' : response.stopReason
        const final: ProtocolResponse = { ...response, toolCalls: calls, usage, stopReason, metadata: { ...response.metadata, turns: turn } }
        return final
      }
    }
  }

  async resume (sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<{ sessionId: string, response: ProtocolResponse }> {
    return { sessionId, response: await this.send(sessionId, messages, ctx) }
  }

  async stop (sessionId: string): Promise<void> {
    this.#sessions.delete(sessionId)
  }

  formatMessages (messages: Message[], _ctx?: ProtocolContext): unknown {
    return this.transport.formatMessages(messages)
  }

  parseStream (chunk: Uint8Array | string | null, state: ParseState): ParseResult[] {
    return parseSse(chunk, state)
  }

  override async streamMessage (_sessionId: string, chunk: StreamChunk, ctx: ProtocolContext): Promise<void> {
    await ctx.onStreamMessage?.(chunk)
  }

  override estimateCost (response: ProtocolResponse): number {
    const model = typeof response.metadata.model === 'string' ? response.metadata.model : this.transport.model
    const price = this.#o.prices[model]
    if (price === undefined || response.usage === null) return 0
    return (response.usage.input * price.input + response.usage.output * price.output) / 1_000_000
  }

  override getUsage (sessionId: string): SessionUsage | null {
    const usage = this.#sessions.get(sessionId)?.usage
    return usage === undefined ? null : { ...usage }
  }

  /** Usage summed over the sessions this process holds. */
  totalUsage (): SessionUsage & { sessions: number } {
    const total = { input: 0, output: 0, cost: 0, turns: 0, sessions: this.#sessions.size }
    for (const s of this.#sessions.values()) {
      total.input += s.usage.input
      total.output += s.usage.output
      total.cost += s.usage.cost
      total.turns += s.usage.turns
    }
    return total
  }

  async #load (sessionId: string, ctx: ProtocolContext): Promise<LlmSession> {
    const held = this.#sessions.get(sessionId)
    if (held !== undefined) return held
    const stored = await ctx.memory?.get<LlmSession>(MEMORY_PREFIX + this.name)
    if (stored !== undefined && stored !== null && stored.id === sessionId && Array.isArray(stored.messages)) {
      this.#sessions.set(sessionId, stored)
      return stored
    }
    await this.start({ sessionId }, ctx)
    return this.#sessions.get(sessionId) as LlmSession
  }

  async #persist (session: LlmSession, ctx: ProtocolContext): Promise<void> {
    const max = this.#o.maxHistory ?? 200
    if (session.messages.length > max) {
      // never start the kept history with tool results whose call was cut off
      let from = session.messages.length - max
      while (from < session.messages.length && session.messages[from]?.role === 'tool') from++
      session.messages = session.messages.slice(from)
    }
    await ctx.memory?.store(MEMORY_PREFIX + this.name, session)
  }

  async #runTool (sessionId: string, call: ToolCall, ctx: ProtocolContext): Promise<{ content: string, isError: boolean }> {
    const tool = ctx.tools?.[call.name]
    if (tool === undefined) return { content: `Unknown tool "${call.name}"`, isError: true }
    await this.streamMessage(sessionId, { type: 'tool_call', call }, ctx)
    try {
      return { content: String(await tool.run(call.arguments, ctx.signal ?? new AbortController().signal)), isError: false }
    } catch (err) {
      if (ctx.signal?.aborted === true) throw ctx.signal.reason
      return { content: `Tool "${call.name}" failed: ${(err as Error)?.message ?? String(err)}`, isError: true }
    }
  }

  /** One streamed model call. Aborts the HTTP request on cancel, and when the provider goes quiet. */
  async #call (session: LlmSession, ctx: ProtocolContext): Promise<ProtocolResponse> {
    const outer = ctx.signal
    if (outer?.aborted === true) throw outer.reason
    const controller = new AbortController()
    const onAbort = (): void => { controller.abort(outer?.reason) }
    outer?.addEventListener('abort', onAbort, { once: true })
    let timer: NodeJS.Timeout | undefined
    const timeout = new AH_ERR_BACKEND_FAILED('backend_timeout', `The ${this.transport.provider} backend sent nothing for ${this.#o.timeoutMs} ms`, 'TRANSIENT', { timeout_ms: this.#o.timeoutMs })
    const arm = (): void => {
      clearTimeout(timer)
      timer = setTimeout(() => { controller.abort(timeout) }, this.#o.timeoutMs)
    }
    const turn = new Turn()
    arm()
    try {
      const body = await this.transport.open({
        model: session.model,
        messages: session.messages,
        ...(session.system !== undefined ? { system: session.system } : {}),
        ...(ctx.tools !== undefined ? { tools: ctx.tools } : {}),
        ...(ctx.traceparent !== undefined ? { traceparent: ctx.traceparent } : {})
      }, controller.signal)
      const state = new ParseState()
      for await (const bytes of body) {
        arm()
        for (const result of this.parseStream(bytes, state)) {
          if (await this.#apply(session, turn, result, ctx)) break
        }
        if (turn.done) break
      }
      if (!turn.done) {
        for (const result of this.parseStream(null, state)) await this.#apply(session, turn, result, ctx)
      }
      if (!turn.done) throw new AH_ERR_BACKEND_FAILED('backend_failed', `The ${this.transport.provider} stream ended before the response was complete`, 'TRANSIENT')
    } catch (err) {
      throw this.#failure(err, controller.signal, outer)
    } finally {
      clearTimeout(timer)
      outer?.removeEventListener('abort', onAbort)
      controller.abort()
    }
    const response: ProtocolResponse = {
      content: turn.content,
      toolCalls: turn.toolCalls(),
      usage: turn.usage,
      stopReason: turn.stopReason,
      metadata: { model: session.model, provider: this.transport.provider }
    }
    const cost = this.estimateCost(response)
    response.metadata.cost = cost
    session.usage.turns++
    if (turn.usage !== null) {
      session.usage.input += turn.usage.input
      session.usage.output += turn.usage.output
      session.usage.cost += cost
      await this.streamMessage(session.id, { type: 'usage', usage: turn.usage, cost, model: session.model }, ctx)
    }
    return response
  }

  /** Apply one parse result; true when the stream is finished. */
  async #apply (session: LlmSession, turn: Turn, result: ParseResult, ctx: ProtocolContext): Promise<boolean> {
    switch (result.type) {
      case 'message':
        for (const chunk of this.transport.fold(turn, result.message)) await this.streamMessage(session.id, chunk, ctx)
        return false
      case 'eof':
        turn.done = true
        return true
      case 'error':
        throw new AH_ERR_BACKEND_FAILED('backend_failed', `The ${this.transport.provider} stream could not be read: ${result.error.message}`, 'FATAL')
      default:
        return false
    }
  }

  #failure (err: unknown, signal: AbortSignal, outer: AbortSignal | undefined): unknown {
    if (outer?.aborted === true) return outer.reason
    if (signal.aborted && signal.reason instanceof AH_ERR_BACKEND_FAILED) return signal.reason
    if (err instanceof AH_ERR_BACKEND_FAILED) return err
    const status = (err as { status?: unknown }).status
    const provider = this.transport.provider
    if (typeof status === 'number') {
      const retry = status === 408 || status === 409 || status === 429 || status >= 500
      return new AH_ERR_BACKEND_FAILED('backend_failed', `The ${provider} backend answered ${status}: ${(err as Error).message}`, retry ? 'TRANSIENT' : 'FATAL', { provider, status })
    }
    return new AH_ERR_BACKEND_FAILED('backend_failed', `The ${provider} backend could not be reached: ${(err as Error)?.message ?? String(err)}`, 'TRANSIENT', { provider })
  }
}
