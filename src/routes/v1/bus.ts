import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { viewerOf } from '../../auth/scopes.js'
import { AH_ERR_BUS_DEAD_LETTER_NOT_FOUND, AH_ERR_BUS_EVENT_INVALID, AH_ERR_BUS_REDRIVE_REFUSED } from '../../errors.js'
import { followsLog, tailAsSse } from '../tail.js'
import { BusDeadLetterPage, BusEventPage, BusPublished, BusSubscriptionRecord, type BusEventRecord } from '../../protocol/bus.js'
import { EventPublication } from '../../protocol/contract.js'
import { errorResponse, validationError } from '../../protocol/openapi.js'
import type { BusEvent } from '../../storage/bus.js'
import { cutText } from '../../storage/audit-text.js'

/** An event as it is served: times in RFC 3339, without whose it is (nor its owner's agent list). */
export function busEventRecord (event: BusEvent): BusEventRecord {
  const { owner_key: _owner, owner_agents: _agents, owner_scopes: _scopes, published_at: published, expires_at: expires, ...rest } = event
  return { ...rest, published_at: new Date(published).toISOString(), expires_at: new Date(expires).toISOString() }
}

const Patterns = Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { minItems: 1, maxItems: 20, default: ['**'] })

/**
 * The event bus over HTTP (seed 003 "Event Bus Contracts"): publish, the `a2a` events as a feed (a
 * page, or with `follow=true` an SSE stream resumable by `Last-Event-ID`), the subscriptions, and the
 * dead letters. A caller sees the events it (or a run or plan of its) published; a tenant's admin its tenant's; the host's admin all.
 */
const busRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post('/v1/bus/events', {
    schema: {
      operationId: 'publishBusEvent',
      tags: ['bus'],
      summary: 'Publish an event to the bus',
      description: 'Stored with one delivery per matching subscription, delivered at least once, highest `priority` first, never after `ttl` seconds. An event whose `key` is the key of one still alive is not stored again: the answer is that event, with `duplicate: true`. The typed common events (`research.complete`, `plan.ready`, `code.changed`, `evaluation.complete`, `security.alert`, `test.generated`) must carry their data.',
      body: EventPublication,
      response: {
        202: BusPublished,
        400: errorResponse('The publication is malformed, or a common event lacks its data (`AH_ERR_BUS_EVENT_INVALID`)', new AH_ERR_BUS_EVENT_INVALID('the data of a plan.ready event is invalid: /event/data must have required property \'plan\''))
      }
    }
  }, async (request, reply) => {
    const published = await app.bus.publish(request.body, { source: 'api', owner_key: request.identity.id, owner_agents: request.identity.agents === null ? null : [...request.identity.agents], owner_scopes: [...request.identity.scopes], trace_id: request.traceId })
    await app.audit.append({ actor: request.identity.id, action: 'bus.publish', resource: published.event.type, success: true, trace_id: request.traceId, details: { event: published.event.id, key: cutText(published.event.key, 256), duplicate: published.duplicate } })
    return await reply.code(202).send({ event: busEventRecord(published.event), duplicate: published.duplicate })
  })

  app.get('/v1/bus/events', {
    schema: {
      operationId: 'listBusEvents',
      tags: ['bus'],
      summary: 'The bus\'s a2a events, oldest first; follow=true (or Accept: text/event-stream) tails them as SSE (event: bus.event, id: seq)',
      description: 'Only live (not expired) events of `visibility: "a2a"` whose type matches one of the `pattern` globs (`*` one dotted segment, `**` any: `code.*`, `research.complete`, `**`). Page on with `after` (the previous page\'s `next`). With `follow=true` (or no `follow` and `Accept: text/event-stream`) the answer is a `text/event-stream` from `after` (or `Last-Event-ID`; without either, from now) that tails new events; follow it with `curl -N`.',
      querystring: Type.Object({
        pattern: Patterns,
        follow: Type.Optional(Type.Boolean({ description: 'true: tail as SSE; false: a page; absent: as `Accept` asks (`text/event-stream` alone tails)' })),
        after: Type.Optional(Type.Integer({ minimum: 0 })),
        limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 })
      }),
      headers: Type.Object({ 'last-event-id': Type.Optional(Type.String({ pattern: '^[0-9]{1,15}$' })) }),
      response: { 200: BusEventPage, 400: errorResponse('A query parameter is malformed', validationError('/querystring/limit', 'must be <= 1000')) }
    }
  }, async (request, reply) => {
    const { pattern, limit } = request.query
    const follow = followsLog(request, request.query.follow)
    const viewer = viewerOf(request.identity)
    const resumeAt = request.headers['last-event-id']
    let after = resumeAt !== undefined ? Number(resumeAt) : request.query.after ?? (follow ? await app.bus.head() : 0)
    if (!follow) {
      const page = await app.bus.feed({ after, patterns: pattern, limit, viewer })
      return { events: page.events.map(busEventRecord), next: page.next }
    }
    return await tailAsSse(app, request, reply, {
      source: app.bus.published,
      event: 'event',
      pollMs: app.config.BUS_POLL_MS,
      pump: async (writer) => {
        for (;;) {
          const page = await app.bus.feed({ after, patterns: pattern, limit: 500, viewer })
          for (const event of page.events) await writer.send('bus.event', String(event.seq), JSON.stringify(busEventRecord(event)))
          if (page.next === after) break
          after = page.next
        }
      }
    })
  })

  app.get('/v1/bus/subscriptions', {
    schema: {
      operationId: 'listBusSubscriptions',
      tags: ['bus'],
      summary: 'The durable subscriptions: who listens to which events',
      response: { 200: Type.Object({ subscriptions: Type.Array(BusSubscriptionRecord) }, { additionalProperties: false }) }
    }
  }, async () => ({ subscriptions: await app.bus.subscriptions() }))

  app.post('/v1/bus/dead-letters/:id/retry', {
    schema: {
      operationId: 'retryBusDeadLetter',
      tags: ['bus'],
      summary: 'Deliver a dead letter again: its delivery is back, due now, its attempts counted from zero',
      description: 'For a handler fixed since. Its event must still be live (within its `ttl`) and its subscription still there; the letter is removed. A caller may retry the dead letters of its own events; a `tenant-admin` its tenant\'s; an `admin` any.',
      params: Type.Object({ id: Type.Integer({ minimum: 1 }) }),
      response: {
        202: Type.Object({ retried: Type.Integer() }, { additionalProperties: false }),
        404: errorResponse('No such dead letter, or not the caller\'s', new AH_ERR_BUS_DEAD_LETTER_NOT_FOUND(7)),
        409: errorResponse('Its event expired, or its subscription is gone', new AH_ERR_BUS_REDRIVE_REFUSED(7, 'its event is past its time to live'))
      }
    }
  }, async (request, reply) => {
    await app.bus.redrive(request.params.id, viewerOf(request.identity))
    await app.audit.append({ actor: request.identity.id, action: 'bus.redrive', resource: `dead-letter:${request.params.id}`, success: true, trace_id: request.traceId })
    return await reply.code(202).send({ retried: request.params.id })
  })

  app.get('/v1/bus/dead-letters', {
    schema: {
      operationId: 'listBusDeadLetters',
      tags: ['bus'],
      summary: 'Deliveries whose handler failed every attempt, with their events, oldest first',
      description: 'A caller sees the dead letters of its own events; a `tenant-admin` its tenant\'s; an `admin` all. Page on with `after` (the previous page\'s `next`).',
      querystring: Type.Object({
        after: Type.Optional(Type.Integer({ minimum: 0 })),
        limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 })
      }),
      response: { 200: BusDeadLetterPage }
    }
  }, async (request) => {
    const { limit } = request.query
    const letters = await app.bus.deadLetters({ limit, ...(request.query.after !== undefined ? { after: request.query.after } : {}), viewer: viewerOf(request.identity) })
    const last = letters.at(-1)
    return {
      dead_letters: letters.map((d) => ({ ...d, event: busEventRecord(d.event), dead_at: new Date(d.dead_at).toISOString() })),
      ...(letters.length === limit && last !== undefined ? { next: last.id } : {})
    }
  })
}

export default busRoutes
