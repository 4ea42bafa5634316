import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { SseWriter } from '../http/sse-writer.js'

/** Aborted (`client_disconnected`) when the client goes away before its response is finished. */
export function clientSignal (reply: FastifyReply): AbortController {
  const controller = new AbortController()
  reply.raw.on('close', () => { if (!reply.raw.writableFinished) controller.abort('client_disconnected') })
  return controller
}

/** What one SSE answer sends, and how it ends. */
export interface SseStream<T> {
  /** The items, each written by {@link send}; the answer ends with them. Returned (`return()`) however the answer ends. */
  source: AsyncIterator<T>
  /** Write one item; a promise when the socket is full, which the loop awaits before the next. */
  send: (writer: SseWriter, item: T) => Promise<void> | undefined
  /** The stream slot already taken (a run's, before it started); otherwise one is taken here, or 429/503 refuses the answer. */
  release?: () => void
  /** `retry:` advertised to the client (default SSE_RETRY_MS; 0 for a protocol whose clients do not reconnect by SSE). */
  retryMs?: number
  /** Told the writer once the answer has started, before the first item (to cut a client that falls behind). */
  opened?: (writer: SseWriter) => void
  /** The client went away or stopped reading: stop what makes the items. */
  onGone?: (why: 'client_disconnected' | 'slow_consumer') => void
  /** The source failed once the answer had started: its last words, if the protocol has any (an `error` event; logged at warn, a failure without them at error). */
  failed?: (err: unknown, writer: SseWriter) => void
  /** Whether the answer ended whole; if not, the connection is cut, not ended, so a client that resumes knows to (default: whole). */
  whole?: () => boolean
}

/**
 * Answer with Server-Sent Events: the one loop of every SSE answer (`/v1/assist`, A2A's streaming
 * methods, the event and bus feeds). It takes the caller's stream slot (unless the stream holds
 * one), hijacks the reply, writes each item of the source with backpressure (the next item waits
 * for `drain`), and ends when the source does, the client goes away, or the source fails; the slot
 * is given back when the response is over, however it ended.
 */
export async function sendSse<T> (app: FastifyInstance, request: FastifyRequest, reply: FastifyReply, stream: SseStream<T>): Promise<FastifyReply> {
  const release = stream.release ?? await app.limits.openStream(request, reply)
  reply.hijack()
  const writer = new SseWriter(reply.raw, {
    headers: reply.getHeaders() as OutgoingHttpHeaders,
    heartbeatMs: app.config.SSE_HEARTBEAT_MS,
    retryMs: stream.retryMs ?? app.config.SSE_RETRY_MS,
    stallMs: app.config.SSE_STALL_TIMEOUT_MS,
    onGone: (why) => { stream.onGone?.(why) },
    metrics: app.metrics.sse,
    onFinished: release
  })
  stream.opened?.(writer)
  try {
    for (let next = await stream.source.next(); next.done !== true; next = await stream.source.next()) {
      const drained = stream.send(writer, next.value)
      if (drained !== undefined) await drained
      if (writer.finished) break
    }
  } catch (err) {
    // a protocol with last words (A2A's error event) tells the client: a warning; otherwise the stream is cut unexplained
    if (stream.failed === undefined) request.log.error({ err }, 'an SSE answer\'s source failed')
    else request.log.warn({ err }, 'an SSE answer\'s source failed; the client was told')
    if (!writer.finished) stream.failed?.(err, writer)
  } finally {
    await stream.source.return?.(undefined)?.catch(() => {})
  }
  if (stream.whole?.() ?? true) writer.end()
  else reply.raw.destroy()
  return reply
}
