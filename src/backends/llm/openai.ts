import type OpenAI from 'openai'
import { AH_ERR_BACKEND_FAILED } from '../../errors.js'
import type { JsonObject, Message, StreamChunk, ToolRegistry } from '../protocol.js'
import { sdkOptions, type LlmTransport, type ProviderOptions, type Turn, type TurnRequest } from './transport.js'

/** Settings of the openai transport (`baseUrl` empty: the provider's public API). */
export type OpenAiOptions = ProviderOptions

function tools (registry: ToolRegistry | undefined): unknown[] | undefined {
  if (registry === undefined || Object.keys(registry).length === 0) return undefined
  return Object.entries(registry).map(([name, tool]) => ({ type: 'function', function: { name, description: tool.description, parameters: tool.parameters } }))
}

/**
 * Chat completions over the `openai` SDK, streaming (`stream_options.include_usage`, so the last
 * chunk carries the token counts). The SDK builds the request, retries connection failures, 429
 * and 5xx before the stream starts, and turns other statuses into errors.
 */
export class OpenAiTransport implements LlmTransport {
  readonly provider = 'openai'
  readonly model: string
  readonly #o: OpenAiOptions
  #client: Promise<OpenAI> | undefined

  constructor (options: OpenAiOptions) {
    this.#o = options
    this.model = options.model
  }

  /** The SDK's client, its module loaded on the first turn: a server with no agent on this provider never loads it (a tenth of a second of every start). */
  async #sdk (): Promise<OpenAI> {
    this.#client ??= import('openai').then(({ default: SDK }) => new SDK(sdkOptions(this.#o)))
    return await this.#client
  }

  missingSettings (): string[] {
    return this.#o.apiKey === '' && this.#o.baseUrl === '' ? ['OPENAI_API_KEY (for api.openai.com) or OPENAI_BASE_URL (for an OpenAI-compatible server)'] : []
  }

  formatMessages (messages: Message[], system?: string): JsonObject[] {
    const out: JsonObject[] = system !== undefined && system !== '' ? [{ role: 'system', content: system }] : []
    for (const m of messages) {
      if (m.role === 'tool') out.push({ role: 'tool', tool_call_id: m.toolCallId, content: m.content })
      else if (m.role === 'assistant' && m.toolCalls !== undefined && m.toolCalls.length > 0) {
        out.push({
          role: 'assistant',
          content: m.content === '' ? null : m.content,
          tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } }))
        })
      } else out.push({ role: m.role, content: m.content })
    }
    return out
  }

  async open (request: TurnRequest, signal: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    const body = {
      model: request.model,
      messages: this.formatMessages(request.messages, request.system),
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: this.#o.maxTokens,
      ...(tools(request.tools) !== undefined ? { tools: tools(request.tools) } : {})
    }
    const response = await (await this.#sdk()).chat.completions.create(body as unknown as OpenAI.ChatCompletionCreateParamsStreaming, {
      signal,
      ...(request.traceparent !== undefined ? { headers: { traceparent: request.traceparent } } : {})
    }).asResponse()
    if (response.body === null) throw new AH_ERR_BACKEND_FAILED('backend_failed', 'The provider sent no body', 'TRANSIENT')
    return response.body
  }

  fold (turn: Turn, message: JsonObject): StreamChunk[] {
    const chunk = message.data as {
      error?: { message?: string, type?: string, code?: unknown }
      choices?: Array<{ delta?: { content?: string | null, reasoning_content?: string | null, reasoning?: string | null, tool_calls?: Array<{ index?: number, id?: string, function?: { name?: string, arguments?: string } }> }, finish_reason?: string | null }>
      usage?: { prompt_tokens?: number, completion_tokens?: number } | null
    }
    if (chunk.error !== undefined) {
      const type = String(chunk.error.type ?? chunk.error.code ?? 'error')
      const retry = /overload|rate|server|timeout|unavailable/i.test(type)
      throw new AH_ERR_BACKEND_FAILED('backend_failed', `The provider failed mid-stream: ${chunk.error.message ?? type}`, retry ? 'TRANSIENT' : 'FATAL', { provider: 'openai', type })
    }
    const out: StreamChunk[] = []
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? {}
      const reasoning = delta.reasoning_content ?? delta.reasoning
      if (typeof reasoning === 'string' && reasoning !== '') out.push({ type: 'reasoning', text: reasoning })
      if (typeof delta.content === 'string' && delta.content !== '') {
        turn.content += delta.content
        out.push({ type: 'text', text: delta.content })
      }
      for (const call of delta.tool_calls ?? []) {
        const part: { id?: string, name?: string, args?: string } = {}
        if (call.id !== undefined) part.id = call.id
        if (call.function?.name !== undefined) part.name = call.function.name
        if (call.function?.arguments !== undefined) part.args = call.function.arguments
        turn.call(call.index ?? 0, part)
      }
      if (typeof choice.finish_reason === 'string') turn.stopReason = choice.finish_reason
    }
    if (chunk.usage !== undefined && chunk.usage !== null) {
      turn.usage = { input: chunk.usage.prompt_tokens ?? 0, output: chunk.usage.completion_tokens ?? 0 }
    }
    return out
  }
}
