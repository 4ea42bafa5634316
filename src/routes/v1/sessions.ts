import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { FastifyRequest } from 'fastify'
import { grants } from '../../auth/scopes.js'
import { AH_ERR_SESSION_NOT_FOUND } from '../../errors.js'
import { Uuid } from '../../protocol/common.js'
import { HistoryPage } from '../../protocol/records.js'
import { ErrorBody } from '../../protocol/response.js'

const Params = Type.Object({ session_id: Uuid })

/** `GET /v1/sessions/:session_id/history` and `DELETE /v1/sessions/:session_id`. */
const sessionRoutes: FastifyPluginAsyncTypebox = async (app) => {
  /** A session exists and is the caller's (or the caller is admin); another key's is as good as missing. */
  const visible = (request: FastifyRequest, sessionId: string): boolean => {
    const key = app.sessions.keyOf(sessionId)
    return key !== undefined && (grants(request.identity.scopes, 'admin') || key === request.identity.id)
  }
  app.get('/v1/sessions/:session_id/history', {
    schema: {
      tags: ['sessions'],
      summary: 'A session\'s interactions, oldest first (page back with offset)',
      params: Params,
      querystring: Type.Object({
        limit: Type.Integer({ minimum: 1, maximum: 1000, default: 50 }),
        /** Skip this many of the newest interactions. */
        offset: Type.Integer({ minimum: 0, default: 0 })
      }),
      response: { 200: HistoryPage, 400: ErrorBody, 404: ErrorBody }
    }
  }, async (request) => {
    const { session_id: sessionId } = request.params
    if (!visible(request, sessionId)) throw new AH_ERR_SESSION_NOT_FOUND(sessionId)
    return {
      session_id: sessionId,
      total: app.sessions.count(sessionId),
      interactions: app.sessions.history(sessionId, request.query.limit, request.query.offset)
    }
  })

  app.delete('/v1/sessions/:session_id', {
    schema: {
      tags: ['sessions'],
      summary: 'Erase a session: its history, values, search index, run journals and events',
      description: 'Runs of the session still going are cancelled first. The erasure is audited.',
      params: Params,
      response: { 204: Type.Null(), 400: ErrorBody, 404: ErrorBody }
    }
  }, async (request, reply) => {
    const { session_id: sessionId } = request.params
    if (!visible(request, sessionId)) throw new AH_ERR_SESSION_NOT_FOUND(sessionId)
    await app.assist.cancelSession(sessionId)
    const erased = app.db.transaction(() => ({
      runs: app.runStore.eraseSession(sessionId),
      events: app.events.eraseSession(sessionId),
      session: app.sessions.erase(sessionId)
    }))()
    app.audit.append({ actor: 'anonymous', action: 'session.erase', resource: sessionId, success: true, details: { runs: erased.runs, events: erased.events } })
    request.log.info({ sessionId, ...erased }, 'session erased')
    return await reply.code(204).send(null)
  })
}

export default sessionRoutes
