import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { followsLog, tailAsSse } from '../tail.js'
import { viewerOf } from '../../auth/scopes.js'
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
      summary: 'Stored events, oldest first; follow=true (or Accept: text/event-stream) tails them as SSE (event: agent.event, id: seq)',
      description: 'Filtered by `session_id`, `request_id` and `type`; page on with `after` (the previous page\'s `next`). With `follow=true` (or no `follow` and `Accept: text/event-stream`) the answer is a `text/event-stream` that sends the matching events after `after` (or `Last-Event-ID`) and then tails new ones; Swagger UI shows such a stream only when it ends, so follow it with `curl -N`.',
      querystring: Type.Object({
        session_id: Type.Optional(Type.String()),
        request_id: Type.Optional(Type.String()),
        type: Type.Optional(Type.String()),
        follow: Type.Optional(Type.Boolean({ description: 'true: tail as SSE; false: a page; absent: as `Accept` asks (`text/event-stream` alone tails)' })),
        ...PageQuery
      }),
      response: { 200: EventPage, 400: errorResponse('A query parameter is malformed', validationError('/querystring/follow', 'must be boolean')) }
    }
  }, async (request, reply) => {
    const { follow: asked, limit = 100, ...filters } = request.query
    const follow = followsLog(request, asked)
    const query: EventQuery = { ...filters, limit, viewer: viewerOf(request.identity) }
    if (!follow) {
      const events = await app.events.list(query)
      const last = events.at(-1)
      return events.length === limit && last !== undefined ? { events, next: last.seq } : { events }
    }
    const lastEventId = Number(request.headers['last-event-id'])
    let after = Number.isInteger(lastEventId) && lastEventId > 0 ? lastEventId : (query.after ?? 0)
    return await tailAsSse(app, request, reply, {
      source: app.events.appended,
      event: 'event',
      pollMs: POLL_MS,
      pump: async (writer) => {
        for (;;) {
          const batch = await app.events.list({ ...query, after, limit: 500 })
          for (const event of batch) {
            after = event.seq
            await writer.send('agent.event', String(event.seq), JSON.stringify(event))
          }
          if (batch.length < 500) break
        }
      }
    })
  })
}

export default eventRoutes
