import type { JsonObject, Message, StreamChunk, TokenUsage, ToolCall, ToolRegistry } from '../protocol.js'

/** One model call: what to send. */
export interface TurnRequest {
  model: string
  system?: string
  messages: Message[]
  tools?: ToolRegistry
  traceparent?: string
}

/** A tool call whose arguments are still arriving. */
interface PartialCall {
  id: string
  name: string
  args: string
}

/**
 * What one streamed model call has produced so far. Transports fold provider events into it;
 * the protocol reads the response out of it when the stream ends.
 */
export class Turn {
  content = ''
  usage: TokenUsage | null = null
  stopReason: string | null = null
  /** The provider's end marker was seen. */
  done = false
  readonly #calls = new Map<string | number, PartialCall>()

  /** Start or extend the tool call at `key` (a stream index or block index). */
  call (key: string | number, part: { id?: string, name?: string, args?: string }): void {
    const call = this.#calls.get(key) ?? { id: '', name: '', args: '' }
    if (part.id !== undefined && part.id !== '') call.id = part.id
    if (part.name !== undefined && part.name !== '') call.name = part.name
    if (part.args !== undefined) call.args += part.args
    this.#calls.set(key, call)
  }

  /**
   * The finished tool calls, arguments parsed. Arguments that are not a JSON object are kept
   * under `_raw` so the tool (and the model, through its result) can see what went wrong.
   */
  toolCalls (): ToolCall[] {
    return [...this.#calls.values()].map((c, i) => {
      let args: JsonObject
      try {
        const parsed: unknown = JSON.parse(c.args === '' ? '{}' : c.args)
        args = typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? parsed as JsonObject : { _raw: c.args }
      } catch {
        args = { _raw: c.args }
      }
      return { id: c.id === '' ? `call_${i}` : c.id, name: c.name, arguments: args }
    })
  }
}

/**
 * The wire-level side of one LLM provider: builds and opens the streaming HTTP request (through
 * the provider's SDK) and folds the provider's stream events into a {@link Turn}.
 */
export interface LlmTransport {
  /** `openai` or `anthropic`. */
  readonly provider: string
  /** The configured model. */
  readonly model: string
  /** Settings that must be set before this transport can be used; empty when it is usable. */
  missingSettings(): string[]
  /** The provider's form of the conversation. */
  formatMessages(messages: Message[], system?: string): unknown
  /** Send the request; resolves with the SSE body once the provider has accepted it (non-2xx rejects). */
  open(request: TurnRequest, signal: AbortSignal): Promise<ReadableStream<Uint8Array>>
  /**
   * Fold one parsed stream event into `turn`; returns the chunks to stream on (text, reasoning).
   * @throws BackendError when the event is a provider error
   */
  fold(turn: Turn, message: JsonObject): StreamChunk[]
}

/** Settings every provider transport takes. */
export interface ProviderOptions {
  /** Empty: the provider's public API. */
  baseUrl: string
  apiKey: string
  model: string
  maxTokens: number
  maxRetries: number
  timeoutMs: number
}

/** The SDK client options for `options` (both SDKs take the same four). */
export function sdkOptions (options: ProviderOptions): { apiKey: string, baseURL?: string, maxRetries: number, timeout: number } {
  return {
    // local servers need no key, but the SDKs insist on one
    apiKey: options.apiKey === '' ? 'unused' : options.apiKey,
    ...(options.baseUrl !== '' ? { baseURL: options.baseUrl } : {}),
    maxRetries: options.maxRetries,
    timeout: options.timeoutMs
  }
}
