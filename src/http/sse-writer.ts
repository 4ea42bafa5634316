import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { SseMetrics } from '../metrics.js'

/** Response headers of every SSE answer (CAP.md §5). */
export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
  connection: 'keep-alive'
} as const

/** One SSE event: `event:`, `id:` and `data:` lines and a blank line (`data` must be one line). */
export function formatEvent (event: string, id: string, data: string): string {
  return `event: ${event}\nid: ${id}\ndata: ${data}\n\n`
}

export interface SseWriterOptions {
  /** Extra headers already set on the reply (request id, CORS). */
  headers?: OutgoingHttpHeaders
  heartbeatMs: number
  /** `retry:` advertised once at the start; 0 for none. */
  retryMs: number
  /** How long the socket may stay full (the client reads nothing) before the client counts as too slow. */
  stallMs: number
  /** The client went away (`client_disconnected`) or stopped reading (`slow_consumer`). */
  onGone: (why: 'client_disconnected' | 'slow_consumer', writer: SseWriter) => void
  /** Counts opens, closes, events, heartbeats and disconnects (`GET /metrics`). */
  metrics?: SseMetrics
  /** Called once when the response is over, however it ended (frees its slot in the stream cap). */
  onFinished?: () => void
}

/**
 * Writes events to a raw HTTP response as Server-Sent Events. It sends `: ping` after
 * `heartbeatMs` of silence, reports backpressure to its producer (a promise that settles on
 * `drain`; producers wait for it, so the socket's buffer holds at most one event more than it
 * takes), notices a client that goes away (on the response, which is the socket's side that
 * closes), and ends a client who reads nothing for `stallMs` (so it cannot hold a run). A client
 * that falls too far behind a producer that does not wait is cut with {@link cut}.
 */
export class SseWriter {
  readonly #res: ServerResponse
  readonly #options: SseWriterOptions
  readonly #heartbeat: NodeJS.Timeout
  #drain: Promise<void> | undefined
  #finished = false

  constructor (res: ServerResponse, options: SseWriterOptions) {
    this.#res = res
    this.#options = options
    options.metrics?.opened()
    res.writeHead(200, { ...options.headers, ...SSE_HEADERS })
    res.flushHeaders()
    if (options.retryMs > 0) res.write(`retry: ${options.retryMs}\n\n`)
    this.#heartbeat = setTimeout(() => this.#ping(), options.heartbeatMs).unref()
    res.on('close', () => this.#gone('client_disconnected'))
    if (res.destroyed || res.socket === null || res.socket.destroyed) queueMicrotask(() => this.#gone('client_disconnected'))
  }

  /** True once the response has ended or the client has gone. */
  get finished (): boolean { return this.#finished }

  /** Send one event (a packet, a replayed journal frame, a stored event). */
  send (event: string, id: string, data: string): Promise<void> | undefined {
    return this.#write(formatEvent(event, id, data), 1)
  }

  /**
   * Send packets as events in one write, each with its stream id as the SSE `id:` (CAP.md §5). A
   * batch of a fast run's packets costs one socket write, not one each.
   */
  sendPackets (event: string, packets: ReadonlyArray<{ stream_id: string, json: string }>): Promise<void> | undefined {
    let text = ''
    for (const packet of packets) text += formatEvent(event, packet.stream_id, packet.json)
    return this.#write(text, packets.length)
  }

  /**
   * Send one event without an id: a `data:` line alone (a plain `message` event), or under an
   * `event:` name. A2A's streams are sent this way (the SDKs' own servers do the same).
   */
  sendData (data: string, event?: string): Promise<void> | undefined {
    return this.#write(`${event !== undefined ? `event: ${event}\n` : ''}data: ${data}\n\n`, 1)
  }

  /**
   * Send values as plain `message` events (`data:` lines, no id), in one write: a batch of a fast
   * run's chunks or events (the AI SDK and AG-UI streams) costs one socket write, not one each.
   */
  sendDataAll (values: readonly unknown[]): Promise<void> | undefined {
    if (values.length === 0) return undefined
    let text = ''
    for (const value of values) text += `data: ${JSON.stringify(value)}\n\n`
    return this.#write(text, values.length)
  }

  #write (text: string, events: number): Promise<void> | undefined {
    if (this.#finished) return undefined
    const ok = this.#res.write(text)
    this.#options.metrics?.packet(events)
    this.#heartbeat.refresh()
    if (ok) return undefined
    this.#drain ??= new Promise<void>((resolve) => {
      const stalled = setTimeout(() => {
        this.#gone('slow_consumer')
        this.#res.destroy()
      }, this.#options.stallMs).unref()
      const settle = (): void => {
        clearTimeout(stalled)
        this.#res.off('drain', settle)
        this.#res.off('close', settle)
        this.#drain = undefined
        resolve()
      }
      this.#res.on('drain', settle)
      this.#res.on('close', settle)
    })
    return this.#drain
  }

  end (): void {
    if (this.#finished) return
    this.#finished = true
    clearTimeout(this.#heartbeat)
    this.#options.metrics?.closed()
    this.#options.onFinished?.()
    this.#res.end()
  }

  /** Hang up on a client that fell too far behind (counted as `slow_consumer`). */
  cut (): void {
    this.#gone('slow_consumer')
    this.#res.destroy()
  }

  #ping (): void {
    if (this.#finished) return
    if (!this.#res.writableNeedDrain) {
      this.#res.write(': ping\n\n')
      this.#options.metrics?.heartbeat()
    }
    this.#heartbeat.refresh()
  }

  #gone (why: 'client_disconnected' | 'slow_consumer'): void {
    if (this.#finished) return
    this.#finished = true
    clearTimeout(this.#heartbeat)
    this.#options.metrics?.closed()
    this.#options.onFinished?.()
    this.#options.metrics?.gone(why)
    this.#options.onGone(why, this)
  }
}
