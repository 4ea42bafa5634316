import type { Transcript, TranscriptStream } from '../protocol/response.js'
import type { CloseReason, EventPayload, StreamError, StreamPacket } from '../protocol/packets.js'

/**
 * Collects everything a run emits into the lossless JSON transcript of CAP.md §4, in both delivery
 * modes (SSE runs keep it for the session history).
 */
export class TranscriptBuilder {
  text = ''
  readonly events: EventPayload[] = []
  readonly errors: StreamError[] = []
  readonly #streams = new Map<string, TranscriptStream>()

  /** Something the client could see was produced (errors alone do not count). */
  get produced (): boolean {
    return this.text.length > 0 || this.events.length > 0 || this.#streams.size > 0
  }

  event (payload: EventPayload, streamId: string): void {
    this.events.push(payload)
    if (payload.type === 'MARKDOWN_BLOCK') this.text += payload.data.content
    if (payload.type === 'STREAM_START') {
      const entry: TranscriptStream = { stream_id: streamId, text: '', state: 'closed' }
      if (payload.title !== undefined) entry.title = payload.title
      this.#streams.set(streamId, entry)
    }
  }

  delta (chunk: string, streamId: string): void {
    this.text += chunk
    const stream = this.#streams.get(streamId)
    if (stream !== undefined) stream.text += chunk
  }

  error (error: StreamError, streamId: string): void {
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

  /** Feed one packet (rebuilding a transcript from a journal). */
  add (packet: StreamPacket): void {
    switch (packet.op) {
      case 'DELTA': this.delta(packet.p, packet.stream_id); break
      case 'EVENT': this.event(packet.p, packet.stream_id); break
      case 'ERROR': this.error(packet.p, packet.stream_id); break
      case 'CLOSE': this.close(packet.p, packet.stream_id); break
    }
  }

  build (): Transcript {
    return { text: this.text, events: this.events, streams: [...this.#streams.values()], errors: this.errors }
  }
}
