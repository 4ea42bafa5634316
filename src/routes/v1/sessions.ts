import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { FastifyRequest } from 'fastify'
import { viewerOf } from '../../auth/scopes.js'
import { sees } from '../../storage/tenants.js'
import { AH_ERR_SESSION_NOT_FOUND } from '../../errors.js'
import { Uuid } from '../../protocol/common.js'
import { EXAMPLE_SESSION_ID, documented, errorResponse, validationError } from '../../protocol/openapi.js'
import { HistoryPage } from '../../protocol/records.js'

const Params = Type.Object({ session_id: documented(Uuid, { description: 'The session (`context.session_id` of the requests)', examples: [EXAMPLE_SESSION_ID] }) })
const invalidId = errorResponse('`session_id` is not a UUID', validationError('/params/session_id', 'must match format "uuid"'))
const notFound = errorResponse('No stored session has this id, or it is one the caller does not see (another key\'s; another tenant\'s)', new AH_ERR_SESSION_NOT_FOUND(EXAMPLE_SESSION_ID))

/** `GET /v1/sessions/:session_id/history` and `DELETE /v1/sessions/:session_id`. */
const sessionRoutes: FastifyPluginAsyncTypebox = async (app) => {
  /** A session exists and the caller sees it (`auth/scopes.ts:viewerOf`); another's is as good as missing. */
  const visible = async (request: FastifyRequest, sessionId: string): Promise<boolean> => {
    const key = await app.sessions.keyOf(sessionId)
    return key !== undefined && sees(viewerOf(request.identity), key)
  }
  app.get('/v1/sessions/:session_id/history', {
    schema: {
      operationId: 'getSessionHistory',
      tags: ['sessions'],
      summary: 'A session\'s interactions, oldest first (page back with offset)',
      params: Params,
      querystring: Type.Object({
        limit: Type.Integer({ minimum: 1, maximum: 1000, default: 50 }),
        /** Skip this many of the newest interactions. */
        offset: Type.Integer({ minimum: 0, default: 0 })
      }),
      response: { 200: HistoryPage, 400: invalidId, 404: notFound }
    }
  }, async (request) => {
    const { session_id: sessionId } = request.params
    if (!await visible(request, sessionId)) throw new AH_ERR_SESSION_NOT_FOUND(sessionId)
    return {
      session_id: sessionId,
      total: await app.sessions.count(sessionId),
      interactions: await app.sessions.history(sessionId, request.query.limit, request.query.offset)
    }
  })

  app.delete('/v1/sessions/:session_id', {
    schema: {
      operationId: 'deleteSession',
      tags: ['sessions'],
      summary: 'Erase a session: its history, values, search index, run journals, runs waiting for an answer and events',
      description: 'Runs of the session still going are cancelled first. The erasure is audited.',
      params: Params,
      response: { 204: documented(Type.Null(), { description: 'Erased' }), 400: invalidId, 404: notFound }
    }
  }, async (request, reply) => {
    const { session_id: sessionId } = request.params
    if (!await visible(request, sessionId)) throw new AH_ERR_SESSION_NOT_FOUND(sessionId)
    await app.assist.cancelSession(sessionId)
    const erased = await app.ledger.eraseSession(sessionId, (counts) => ({ actor: request.identity.id, action: 'session.erase', resource: sessionId, success: true, details: counts }))
    request.log.info({ sessionId, ...erased }, 'session erased')
    return await reply.code(204).send(null)
  })
}

export default sessionRoutes
