import type { ResponseHandler, StreamHandle } from './contract.js'
import type { StreamChunk } from '../backends/protocol.js'

/** What {@link capBridge} gives an agent: the `onStreamMessage` to pass to a protocol, and `finish`. */
export interface CapBridge {
  /** Pass as `ctx.onStreamMessage`. */
  onStreamMessage(chunk: StreamChunk): Promise<void>
  /** Flush pending reasoning and close the text stream (if one was opened). */
  finish(): Promise<void>
  /** End the text stream with `stream.abort(reason)` (after a backend failure). */
  abort(reason: string): Promise<void>
  /** The text streamed so far. */
  readonly text: string
}

/**
 * Stream a backend's output into CAP packets: text deltas → DELTAs on one stream (opened at the
 * first text), reasoning → THOUGHT_TRACE (gathered until the text or a tool call starts, so a
 * client sees whole thoughts rather than one event per token), tool calls → PROGRESS_INDICATOR,
 * usage and cost → `response.usage()` (the response metrics).
 */
export function capBridge (response: ResponseHandler, title = 'Answer'): CapBridge {
  let stream: StreamHandle | undefined
  let reasoning = ''
  let text = ''
  const flushReasoning = async (): Promise<void> => {
    if (reasoning.trim() === '') { reasoning = ''; return }
    const thought = reasoning
    reasoning = ''
    await response.thought(thought)
  }
  return {
    get text () { return text },
    async onStreamMessage (chunk) {
      switch (chunk.type) {
        case 'reasoning':
          reasoning += chunk.text
          return
        case 'text':
          await flushReasoning()
          stream ??= await response.create_stream(title)
          text += chunk.text
          await stream.write(chunk.text)
          return
        case 'tool_call':
          await flushReasoning()
          await response.progress(`Calling tool ${chunk.call.name}`, 'running')
          return
        case 'tool_result':
          await response.progress(`Calling tool ${chunk.name}`, chunk.isError ? 'failed' : 'complete')
          return
        case 'usage':
          await response.usage({ input_tokens: chunk.usage.input, output_tokens: chunk.usage.output }, chunk.cost)
      }
    },
    async finish () {
      await flushReasoning()
      await stream?.close()
    },
    async abort (reason) {
      await stream?.abort(reason)
    }
  }
}
