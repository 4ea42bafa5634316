import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { SseWriter } from '../../http/sse-writer.js'
import { EventPage, PageQuery } from '../../protocol/records.js'
import { errorResponse, validationError } from '../../protocol/openapi.js'
import type { EventQuery } from '../../storage/events.js'

/** How often a follower looks for events written by other processes. */
const POLL_MS = 500

/**
 * `GET /v1/events`: the event log, filtered and paginated; with `follow=true` an SSE stream that
 * sends the matching events after `after` (or `Last-Event-ID`) and then tails new ones.
 */
const eventRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/events', {
    schema: {
      operationId: 'listEvents',
      tags: ['events'],
      summary: 'Stored events, oldest first; follow=true tails them as SSE (event: agent.event, id: seq)',
      description: 'Filtered by `session_id`, `request_id` and `type`; page on with `after` (the previous page\'s `next`). With `follow=true` the answer is a `text/event-stream` that sends the matching events after `after` (or `Last-Event-ID`) and then tails new ones; Swagger UI shows such a stream only when it ends, so follow it with `curl -N`.',
      querystring: Type.Object({
        session_id: Type.Optional(Type.String()),
        request_id: Type.Optional(Type.String()),
        type: Type.Optional(Type.String()),
        follow: Type.Boolean({ default: false }),
        ...PageQuery
      }),
      response: { 200: EventPage, 400: errorResponse('A query parameter is malformed', validationError('/querystring/follow', 'must be boolean')) }
    }
  }, async (request, reply) => {
    const { follow, limit = 100, ...filters } = request.query
    const query: EventQuery = { ...filters, limit }
    if (!follow) {
      const events = app.events.list(query)
      const last = events.at(-1)
      return events.length === limit && last !== undefined ? { events, next: last.seq } : { events }
    }
    const lastEventId = Number(request.headers['last-event-id'])
    let after = Number.isInteger(lastEventId) && lastEventId > 0 ? lastEventId : (query.after ?? 0)
    const release = app.limits.openStream(request, reply)
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
    let busy = false
    const pump = async (): Promise<void> => {
      if (busy || writer.finished) return
      busy = true
      try {
        for (;;) {
          const batch = app.events.list({ ...query, after, limit: 500 })
          for (const event of batch) {
            after = event.seq
            await writer.send('agent.event', String(event.seq), JSON.stringify(event))
          }
          if (batch.length < 500) break
        }
      } finally {
        busy = false
      }
    }
    const onAppend = (): void => { pump().catch((err: unknown) => { request.log.error({ err }, 'event follow failed') }) }
    const timer = setInterval(onAppend, POLL_MS).unref()
    const stop = (): void => {
      clearInterval(timer)
      app.events.appended.off('event', onAppend)
      app.runs.offClose(stop)
      writer.end()
    }
    app.events.appended.on('event', onAppend)
    app.runs.onClose(stop)
    await pump()
    return reply
  })
}

export default eventRoutes
