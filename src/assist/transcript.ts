import type { JsonObject } from '../agents/contract.js'
import type { Transcript, TranscriptStream } from '../protocol/response.js'
import type { CloseReason, EventPayload, StreamError, StreamOpCode, StreamPacket } from '../protocol/packets.js'

/**
 * Collects what a run emits into the JSON transcript of CAP.md §4. With a budget it is a bounded
 * summary: past `budgetBytes` it stops keeping text and events (and says so with `truncated`),
 * since the journal holds the whole output; without one it is lossless (rebuilding an answer).
 */
export class TranscriptBuilder {
  text = ''
  readonly events: EventPayload[] = []
  readonly errors: StreamError[] = []
  readonly #streams = new Map<string, TranscriptStream>()
  readonly #budget: number
  #used = 0
  #truncated = false
  #produced = false
  #lastError: StreamError | undefined

  /** @param budgetBytes how much to keep (0: everything) */
  constructor (budgetBytes = 0) {
    this.#budget = budgetBytes
  }

  /** Something the client could see was produced (errors alone do not count). */
  get produced (): boolean { return this.#produced }
  /** True when the budget ran out: this is a summary, and the journal has the rest. */
  get truncated (): boolean { return this.#truncated }
  /** The last StreamError, kept even past the budget. */
  get lastError (): StreamError | undefined { return this.#lastError }

  /** Feed one packet; `size` is its JSON's length (what it costs against the budget). */
  add (packet: { stream_id: string, op: StreamOpCode, p: StreamPacket['p'] }, size = 0): void {
    if (packet.op === 'ERROR') this.#lastError = packet.p as StreamError
    if (packet.op === 'DELTA' || (packet.op === 'EVENT')) this.#produced = true
    if (this.#budget > 0) {
      // stream text is kept twice (the whole text, and its stream's)
      this.#used += packet.op === 'DELTA' ? size + (packet.p as string).length : size
      if (this.#used > this.#budget && packet.op !== 'CLOSE') { this.#truncated = true; return }
    }
    switch (packet.op) {
      case 'DELTA': this.delta(packet.p as string, packet.stream_id); break
      case 'EVENT': this.event(packet.p as EventPayload, packet.stream_id); break
      case 'ERROR': this.error(packet.p as StreamError, packet.stream_id); break
      case 'CLOSE': this.close(packet.p as CloseReason, packet.stream_id); break
    }
  }

  event (payload: EventPayload, streamId: string): void {
    this.#produced = true
    this.events.push(payload)
    if (payload.type === 'MARKDOWN_BLOCK') this.text += payload.data.content
    if (payload.type === 'STREAM_START') {
      const entry: TranscriptStream = { stream_id: streamId, text: '', state: 'closed' }
      if (payload.title !== undefined) entry.title = payload.title
      this.#streams.set(streamId, entry)
    }
  }

  delta (chunk: string, streamId: string): void {
    this.#produced = true
    this.text += chunk
    const stream = this.#streams.get(streamId)
    if (stream !== undefined) stream.text += chunk
  }

  error (error: StreamError, streamId: string): void {
    this.#lastError = error
    this.errors.push(error)
    const stream = this.#streams.get(streamId)
    if (stream !== undefined && error.code === 'stream_aborted') {
      stream.state = 'aborted'
      stream.reason = error.message
    }
  }

  close (reason: CloseReason, streamId: string): void {
    const stream = this.#streams.get(streamId)
    if (stream === undefined || reason === 'done') return
    stream.state = 'aborted'
    stream.reason ??= reason
  }

  build (): Transcript {
    return { text: this.text, events: this.events, streams: [...this.#streams.values()], errors: this.errors }
  }

  /** {@link build}, marked `truncated: true` when the budget ran out (what a session records). */
  summary (): JsonObject {
    return this.#truncated ? { ...this.build(), truncated: true } : this.build()
  }
}
