import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { AuditPage, AuditVerification, PageQuery } from '../../protocol/records.js'
import { errorResponse, validationError } from '../../protocol/openapi.js'

/** `GET /v1/audit` (filters, pagination) and `GET /v1/audit/verify` (the whole chain). */
const auditRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/audit', {
    schema: {
      operationId: 'listAuditRows',
      tags: ['audit'],
      summary: 'Audit rows, oldest first',
      description: 'Filtered by `actor`, `action`, `resource` and `request_id`; page on with `after` (the previous page\'s `next`).',
      querystring: Type.Object({
        actor: Type.Optional(Type.String()),
        action: Type.Optional(Type.String()),
        resource: Type.Optional(Type.String()),
        request_id: Type.Optional(Type.String()),
        ...PageQuery
      }),
      response: { 200: AuditPage, 400: errorResponse('A query parameter is malformed', validationError('/querystring/limit', 'must be <= 1000')) }
    }
  }, async (request) => {
    const limit = request.query.limit ?? 100
    const rows = app.audit.list({ ...request.query, limit })
    const last = rows.at(-1)
    return rows.length === limit && last !== undefined ? { rows, next: last.audit_id } : { rows }
  })

  app.get('/v1/audit/verify', {
    schema: {
      operationId: 'verifyAudit',
      tags: ['audit'],
      summary: 'Check the hash chain of the whole audit log',
      description: 'Recomputes every row\'s hash and link; `first_bad_row` is where an edit, deletion, reordering or truncation is first seen.',
      response: { 200: AuditVerification }
    }
  }, async () => app.audit.verify())
}

export default auditRoutes
