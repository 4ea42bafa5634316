import type { EventEmitter } from 'node:events'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { chooseDeliveryMode } from '../http/negotiate.js'
import type { SseWriter } from '../http/sse-writer.js'
import { sendSse } from './sse.js'

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
  const stopped = new AbortController()
  const stop = (): void => { stopped.abort() }
  app.runs.onClose(stop)
  try {
    return await sendSse(app, request, reply, {
      source: wakeUps(options, stopped.signal),
      send: async (writer) => { await options.pump(writer) },
      onGone: stop
    })
  } finally {
    app.runs.offClose(stop)
  }
}

/** Now, then once after each burst of `event`s and every `pollMs`, until `signal` aborts. */
async function * wakeUps (options: TailOptions, signal: AbortSignal): AsyncGenerator<void> {
  let woken = true
  let wake: (() => void) | undefined
  const onWake = (): void => { woken = true; wake?.() }
  const timer = setInterval(onWake, options.pollMs).unref()
  options.source.on(options.event, onWake)
  signal.addEventListener('abort', onWake)
  try {
    while (!signal.aborted) {
      if (!woken) await new Promise<void>((resolve) => { wake = resolve })
      wake = undefined
      if (signal.aborted) return
      woken = false
      yield
    }
  } finally {
    clearInterval(timer)
    options.source.off(options.event, onWake)
    signal.removeEventListener('abort', onWake)
  }
}
