import type { FinishReason, UIMessageChunk } from 'ai'
import { addUsage, type CloseReason, type EventPayload, type StreamError, type StreamPacket, type UsageEvent } from '../protocol/packets.js'
import { answerChunks, interruptChunks, type KindedAnswer } from './interrupts.js'

/** What a front end can link to: the message's `metadata` (sent in `start`, completed in `finish`). */
export interface ChatMessageMetadata {
  /** The CAP request id of the run the stream follows (the run and session routes know it). */
  request_id: string
  /** The CAP session: the chat. */
  session_id: string
  /** The agent's name. */
  agent: string
  /** How the run ended (`finish` only): its main stream's CLOSE. */
  end_reason?: CloseReason
  /** The tokens and cost the run reported (`finish` only, when it reported any). */
  usage?: UsageEvent['data']
}

/** The AI SDK finish reason of each way a run ends. */
const FINISH_REASONS: Record<CloseReason, FinishReason> = {
  done: 'stop',
  input_required: 'tool-calls',
  cancelled: 'other',
  aborted: 'error',
  shutdown: 'error'
}

/** The message an `error` chunk carries. */
function errorText (error: StreamError): string {
  return `${error.message} (${error.code})`
}

/**
 * One assistant message made from runs' packets, as the AI SDK's UI message stream (the mapping
 * table is `docs/ai-sdk.md`): {@link start} once, then for each run {@link beginRun} and
 * {@link apply} to each of its packets, then {@link finish}. It holds the text parts open (one per
 * CAP stream that wrote a DELTA), so each gets its `text-start` and `text-end` once.
 *
 * - DELTA: `text-start` (a stream's first), `text-delta`; the stream's CLOSE is its `text-end`.
 * - THOUGHT_TRACE: a reasoning part (`reasoning-start`, `-delta`, `-end`); MARKDOWN_BLOCK: a text part.
 * - CITATION_BLOCK: one `source-url` per citation; MEDIA_CAROUSEL: one `file` per item.
 * - PROGRESS_INDICATOR, DATA, RESULT, USAGE: `data-progress-indicator` (one per label, updated in
 *   place), `data-data`, `data-result`, `data-usage` (the run's totals so far).
 * - INTERRUPT: tool parts the client answers (`interrupts.ts`).
 * - ERROR: on the main stream, unless a warning, the `error` chunk; else `data-error`.
 * - The main stream's CLOSE: what is open ends, `finish-step`; then {@link finish}: `finish` (a
 *   cancelled run: `abort` first; a failed one: `error` first, unless an ERROR said it).
 */
export class UiChunkProjection {
  readonly #messageId: string
  readonly #metadata: ChatMessageMetadata
  #main = ''
  /** The text parts open: CAP streams that wrote a DELTA and have not closed. */
  readonly #open = new Set<string>()
  readonly #titles = new Map<string, string>()
  #usage: NonNullable<ChatMessageMetadata['usage']> | undefined
  #reason: CloseReason | undefined
  #failed = false

  /** `messageId`: the assistant message's id (the chat keeps it); `metadata`: the run followed. */
  constructor (messageId: string, metadata: ChatMessageMetadata) {
    this.#messageId = messageId
    this.#metadata = metadata
  }

  /** Whether the run taken now has closed its main stream. */
  get ended (): boolean {
    return this.#reason !== undefined
  }

  /** The message's first chunk. */
  start (): UIMessageChunk[] {
    return [{ type: 'start', messageId: this.#messageId, messageMetadata: { ...this.#metadata } }]
  }

  /** A run begins a step of the message: the answers it carried settle their tool parts first. */
  beginRun (mainStreamId: string, answers: readonly KindedAnswer[] = []): UIMessageChunk[] {
    this.#main = mainStreamId
    this.#reason = undefined
    this.#failed = false
    return [...answerChunks(answers), { type: 'start-step' }]
  }

  /** Take one packet (parsed from its journaled JSON); the chunks it makes, in order. */
  apply (packet: StreamPacket): UIMessageChunk[] {
    switch (packet.op) {
      case 'DELTA': {
        const id = packet.stream_id
        const chunks: UIMessageChunk[] = []
        if (!this.#open.has(id)) {
          this.#open.add(id)
          const title = this.#titles.get(id)
          chunks.push({ type: 'text-start', id, ...(title !== undefined ? { providerMetadata: { agentHost: { title } } } : {}) })
        }
        chunks.push({ type: 'text-delta', id, delta: packet.p })
        return chunks
      }
      case 'EVENT':
        return this.#event(packet.stream_id, packet.p)
      case 'ERROR':
        if (packet.stream_id === this.#main && packet.p.severity !== 'WARNING') {
          this.#failed = true
          return [{ type: 'error', errorText: errorText(packet.p) }]
        }
        return [{ type: 'data-error', data: { stream_id: packet.stream_id, ...packet.p } }]
      case 'CLOSE':
        return this.#close(packet.stream_id, packet.p)
    }
  }

  /** The message's last chunks, once the last run has ended. */
  finish (): UIMessageChunk[] {
    const reason = this.#reason ?? 'aborted'
    const chunks: UIMessageChunk[] = []
    if (reason === 'cancelled') chunks.push({ type: 'abort', reason: 'cancelled' })
    if (FINISH_REASONS[reason] === 'error' && !this.#failed) {
      chunks.push({ type: 'error', errorText: reason === 'shutdown' ? 'The server shut down before the run ended (shutting_down)' : 'The run ended before its answer (aborted)' })
    }
    const metadata: ChatMessageMetadata = { ...this.#metadata, end_reason: reason, ...(this.#usage !== undefined ? { usage: { ...this.#usage } } : {}) }
    chunks.push({ type: 'finish', finishReason: FINISH_REASONS[reason], messageMetadata: metadata })
    return chunks
  }

  #event (streamId: string, event: EventPayload): UIMessageChunk[] {
    switch (event.type) {
      case 'STREAM_START':
        if (event.title !== undefined) this.#titles.set(streamId, event.title)
        return []
      case 'THOUGHT_TRACE':
        return [
          { type: 'reasoning-start', id: event.id },
          { type: 'reasoning-delta', id: event.id, delta: event.data.thought },
          { type: 'reasoning-end', id: event.id }
        ]
      case 'MARKDOWN_BLOCK':
        return [
          { type: 'text-start', id: event.id },
          { type: 'text-delta', id: event.id, delta: event.data.content },
          { type: 'text-end', id: event.id }
        ]
      case 'CITATION_BLOCK':
        return event.data.citations.map((citation) => ({
          type: 'source-url',
          sourceId: citation.source_id,
          url: citation.uri,
          title: citation.title,
          providerMetadata: { agentHost: { confidence: citation.confidence, ...(citation.snippet !== undefined ? { snippet: citation.snippet } : {}) } }
        }))
      case 'MEDIA_CAROUSEL':
        return event.data.items.map((item) => ({
          type: 'file',
          url: item.url,
          mediaType: item.mime_type,
          ...(item.alt_text !== undefined ? { providerMetadata: { agentHost: { alt_text: item.alt_text } } } : {})
        }))
      case 'PROGRESS_INDICATOR':
        return [{ type: 'data-progress-indicator', id: event.data.label, data: event.data }]
      case 'DATA':
        return [{ type: 'data-data', id: event.id, data: { ...(event.title !== undefined ? { title: event.title } : {}), view_hint: event.view_hint, data: event.data } }]
      case 'RESULT':
        return [{ type: 'data-result', id: 'result', data: event.data }]
      case 'USAGE':
        this.#usage = addUsage(this.#usage, event.data)
        return [{ type: 'data-usage', id: 'usage', data: { ...this.#usage } }]
      case 'INTERRUPT':
        return interruptChunks(event.interrupts)
    }
  }

  #close (streamId: string, reason: CloseReason): UIMessageChunk[] {
    if (streamId !== this.#main) {
      if (!this.#open.delete(streamId)) return []
      return [{ type: 'text-end', id: streamId }]
    }
    // the run is over: whatever it left open ends with it
    const chunks: UIMessageChunk[] = [...this.#open].map((id) => ({ type: 'text-end', id }))
    this.#open.clear()
    this.#reason = reason
    chunks.push({ type: 'finish-step' })
    return chunks
  }
}
