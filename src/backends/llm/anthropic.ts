import type Anthropic from '@anthropic-ai/sdk'
import { AH_ERR_BACKEND_FAILED } from '../../errors.js'
import type { JsonObject, Message, StreamChunk, ToolRegistry } from '../protocol.js'
import { sdkOptions, type LlmTransport, type ProviderOptions, type Turn, type TurnRequest } from './transport.js'

/** Settings of the anthropic transport (`baseUrl` empty: the provider's public API). */
export type AnthropicOptions = ProviderOptions

function tools (registry: ToolRegistry | undefined): unknown[] | undefined {
  if (registry === undefined || Object.keys(registry).length === 0) return undefined
  return Object.entries(registry).map(([name, tool]) => ({ name, description: tool.description, input_schema: tool.parameters }))
}

/**
 * The Messages API over the `@anthropic-ai/sdk` SDK, streaming. Tool results go back as
 * `tool_result` blocks in a user message (consecutive ones merged, as the API requires
 * alternating roles).
 */
export class AnthropicTransport implements LlmTransport {
  readonly provider = 'anthropic'
  readonly model: string
  readonly #o: AnthropicOptions
  #client: Promise<Anthropic> | undefined

  constructor (options: AnthropicOptions) {
    this.#o = options
    this.model = options.model
  }

  /** The SDK's client, its module loaded on the first turn: a server with no agent on this provider never loads it (a tenth of a second of every start). */
  async #sdk (): Promise<Anthropic> {
    this.#client ??= import('@anthropic-ai/sdk').then(({ default: SDK }) => new SDK(sdkOptions(this.#o)))
    return await this.#client
  }

  missingSettings (): string[] {
    return this.#o.apiKey === '' ? ['ANTHROPIC_API_KEY'] : []
  }

  formatMessages (messages: Message[]): JsonObject[] {
    const out: Array<{ role: string, content: JsonObject[] }> = []
    for (const m of messages) {
      if (m.role === 'system') continue
      const role = m.role === 'assistant' ? 'assistant' : 'user'
      const blocks: JsonObject[] = []
      if (m.role === 'tool') blocks.push({ type: 'tool_result', tool_use_id: m.toolCallId, content: m.content })
      else if (m.content !== '') blocks.push({ type: 'text', text: m.content })
      for (const c of m.toolCalls ?? []) blocks.push({ type: 'tool_use', id: c.id, name: c.name, input: c.arguments })
      const last = out.at(-1)
      if (last !== undefined && last.role === role) last.content.push(...blocks)
      else out.push({ role, content: blocks })
    }
    return out
  }

  async open (request: TurnRequest, signal: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    const system = [request.system, ...request.messages.filter((m) => m.role === 'system').map((m) => m.content)].filter((s) => s !== undefined && s !== '').join('\n\n')
    const body = {
      model: request.model,
      max_tokens: this.#o.maxTokens,
      messages: this.formatMessages(request.messages),
      stream: true,
      ...(system !== '' ? { system } : {}),
      ...(tools(request.tools) !== undefined ? { tools: tools(request.tools) } : {})
    }
    const response = await (await this.#sdk()).messages.create(body as unknown as Anthropic.MessageCreateParamsStreaming, {
      signal,
      ...(request.traceparent !== undefined ? { headers: { traceparent: request.traceparent } } : {})
    }).asResponse()
    if (response.body === null) throw new AH_ERR_BACKEND_FAILED('backend_failed', 'The provider sent no body', 'TRANSIENT')
    return response.body
  }

  fold (turn: Turn, message: JsonObject): StreamChunk[] {
    const data = message.data as {
      type?: string
      index?: number
      message?: { usage?: { input_tokens?: number, output_tokens?: number } }
      content_block?: { type?: string, id?: string, name?: string }
      delta?: { type?: string, text?: string, thinking?: string, partial_json?: string, stop_reason?: string | null }
      usage?: { input_tokens?: number, output_tokens?: number }
      error?: { type?: string, message?: string }
    }
    switch (data.type) {
      case 'message_start': {
        const usage = data.message?.usage
        turn.usage = { input: usage?.input_tokens ?? 0, output: usage?.output_tokens ?? 0 }
        return []
      }
      case 'content_block_start':
        if (data.content_block?.type === 'tool_use') turn.call(data.index ?? 0, { id: data.content_block.id ?? '', name: data.content_block.name ?? '' })
        return []
      case 'content_block_delta': {
        const delta = data.delta ?? {}
        if (delta.type === 'text_delta' && typeof delta.text === 'string') {
          turn.content += delta.text
          return [{ type: 'text', text: delta.text }]
        }
        if (delta.type === 'thinking_delta' && typeof delta.thinking === 'string') return [{ type: 'reasoning', text: delta.thinking }]
        if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string') turn.call(data.index ?? 0, { args: delta.partial_json })
        return []
      }
      case 'message_delta':
        if (typeof data.delta?.stop_reason === 'string') turn.stopReason = data.delta.stop_reason
        if (data.usage !== undefined) {
          turn.usage = {
            input: data.usage.input_tokens ?? turn.usage?.input ?? 0,
            output: data.usage.output_tokens ?? turn.usage?.output ?? 0
          }
        }
        return []
      case 'error': {
        const type = data.error?.type ?? 'error'
        const retry = type === 'overloaded_error' || type === 'api_error' || type === 'rate_limit_error'
        throw new AH_ERR_BACKEND_FAILED('backend_failed', `The provider failed mid-stream: ${data.error?.message ?? type}`, retry ? 'TRANSIENT' : 'FATAL', { provider: 'anthropic', type })
      }
      default:
        return []
    }
  }
}
