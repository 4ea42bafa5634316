import type { EventEmitter } from 'node:events'
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { chooseDeliveryMode } from '../http/negotiate.js'
import { SseWriter } from '../http/sse-writer.js'

/** What {@link tailAsSse} needs: where wake-ups come from, how often to look anyway, and what to send. */
export interface TailOptions {
  /** Emits `event` when this process stored something the stream may want. */
  source: EventEmitter
  event: string
  /** How often to look anyway, for what other processes stored. */
  pollMs: number
  /** Send whatever is new (it keeps its own cursor); it may assume it never runs twice at once. */
  pump: (writer: SseWriter) => Promise<void>
}

/**
 * Whether a log's `GET` follows it as SSE: `follow=true`, or, with no `follow` given, an `Accept`
 * that asks for `text/event-stream` alone (as `curl -H 'Accept: text/event-stream'` does). `Accept`
 * with both types, or with wildcards only, is a JSON page.
 */
export function followsLog (request: FastifyRequest, follow: boolean | undefined): boolean {
  return follow ?? chooseDeliveryMode(request.headers.accept, 'request_response') === 'server_sent_events'
}

/**
 * Answer with an SSE stream that follows a log: `pump` runs now, at every wake-up and every
 * `pollMs`, one run at a time (a wake-up during a run makes it run once more, so nothing waits for
 * the next poll). The stream ends when the client goes away, the server closes, or `pump` fails.
 */
export async function tailAsSse (app: FastifyInstance, request: FastifyRequest, reply: FastifyReply, options: TailOptions): Promise<FastifyReply> {
  const release = await app.limits.openStream(request, reply)
  reply.hijack()
  const writer = new SseWriter(reply.raw, {
    headers: reply.getHeaders() as OutgoingHttpHeaders,
    heartbeatMs: app.config.SSE_HEARTBEAT_MS,
    retryMs: app.config.SSE_RETRY_MS,
    stallMs: app.config.SSE_STALL_TIMEOUT_MS,
    onGone: () => { stop() },
    metrics: app.metrics.sse,
    onFinished: release
  })
  let pumping = false
  let again = false
  const wake = (): void => {
    if (pumping) { again = true; return }
    pumping = true
    ;(async () => {
      do {
        again = false
        if (writer.finished) return
        await options.pump(writer)
      } while (again)
    })().catch((err: unknown) => { request.log.error({ err }, 'following failed'); stop() }).finally(() => { pumping = false })
  }
  const timer = setInterval(wake, options.pollMs).unref()
  const stop = (): void => {
    clearInterval(timer)
    options.source.off(options.event, wake)
    app.runs.offClose(stop)
    writer.end()
  }
  options.source.on(options.event, wake)
  app.runs.onClose(stop)
  wake()
  return reply
}
