import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { viewerOf } from '../../auth/scopes.js'
import { PushDeliveryPage, PushDeliveryState, type PushDelivery } from '../../protocol/a2a-push.js'
import { errorResponse, validationError } from '../../protocol/openapi.js'
import type { PushDeliveryRow } from '../../storage/a2a-push.js'

/** A stored delivery state as it is served. */
function pushDelivery (row: PushDeliveryRow): PushDelivery {
  return {
    seq: row.seq,
    config_id: row.id,
    task_id: row.task_id,
    agent_id: row.agent_id,
    url: row.url,
    state: row.state,
    delivered: row.delivered,
    pending: row.pending,
    attempts: row.attempts,
    last_status: row.last_status,
    last_error: row.last_error,
    next_attempt_at: row.state === 'active' ? new Date(row.next_attempt_at).toISOString() : null,
    created_at: new Date(row.created_at).toISOString()
  }
}

/**
 * The delivery state of A2A push notifications: per config, how many updates its receiver took,
 * how many wait, the failed attempts, the last status and error, when it is tried next (an A2A
 * config answer has no field for any of it). A caller sees the configs of its own tasks; a tenant's admin its tenant's; the host's admin all.
 */
const a2aPushRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/a2a/push-deliveries', {
    schema: {
      operationId: 'listPushDeliveries',
      tags: ['a2a'],
      summary: 'The delivery state of A2A push notification configs, oldest first',
      description: 'One line per push notification config of the caller\'s A2A tasks (a `tenant-admin`: its tenant\'s; an `admin`: everyone\'s): updates delivered and pending, failed attempts of the pending one, the last HTTP status and error, the next attempt, and the state (`active`, `done`, `failed`). Filter by `task_id` or `state`; page on with `after` (the previous page\'s `next`).',
      querystring: Type.Object({
        task_id: Type.Optional(Type.String({ minLength: 1, maxLength: 256, description: 'Only this A2A task\'s configs' })),
        state: Type.Optional(PushDeliveryState),
        after: Type.Optional(Type.Integer({ minimum: 0 })),
        limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 })
      }),
      response: { 200: PushDeliveryPage, 400: errorResponse('A query parameter is malformed', validationError('/querystring/limit', 'must be <= 1000')) }
    }
  }, async (request) => {
    const { task_id: taskId, state, after = 0, limit } = request.query
    const rows = await app.a2aPush.store.deliveries({ after, limit, viewer: viewerOf(request.identity), ...(taskId !== undefined ? { taskId: taskId.toLowerCase() } : {}), ...(state !== undefined ? { state } : {}) })
    return { deliveries: rows.map(pushDelivery), next: rows.at(-1)?.seq ?? after }
  })
}

export default a2aPushRoutes
