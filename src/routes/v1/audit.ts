import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { join } from 'node:path'
import { viewerOf } from '../../auth/scopes.js'
import type { AuditRow } from '../../storage/audit.js'
import { seesActor } from '../../storage/tenants.js'
import { AuditCheckpoint, AuditPage, AuditVerification, PageQuery } from '../../protocol/records.js'
import { CHECKPOINT_FILE, readCheckpoints } from '../../storage/audit-checkpoints.js'
import { errorResponse, validationError } from '../../protocol/openapi.js'

/** `GET /v1/audit` (filters, pagination) and `GET /v1/audit/verify` (the whole chain). */
const auditRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/audit', {
    schema: {
      operationId: 'listAuditRows',
      tags: ['audit'],
      summary: 'Audit rows, oldest first',
      description: 'Filtered by `actor`, `action`, `resource` and `request_id`; page on with `after` (the previous page\'s `next`). A caller reads the rows it is the actor of; a `tenant-admin` those of its tenant\'s keys and tokens; the host\'s `admin` every row (the host\'s own too: the command line\'s, refusals of callers not known).',
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
    const viewer = viewerOf(request.identity)
    const rows: AuditRow[] = []
    // the stores filter by principal; the host's own rows among the default tenant's go here, a page at a time
    for (let after = request.query.after ?? 0; rows.length < limit;) {
      const page = await app.audit.list({ ...request.query, after, limit, viewer })
      for (const row of page) {
        if (seesActor(viewer, row.actor) && rows.push(row) === limit) break
        after = row.audit_id
      }
      if (page.length < limit) break
    }
    const last = rows.at(-1)
    return rows.length === limit && last !== undefined ? { rows, next: last.audit_id } : { rows }
  })

  app.get('/v1/audit/verify', {
    schema: {
      operationId: 'verifyAudit',
      tags: ['audit'],
      summary: 'Check the whole audit log against its checkpoints',
      description: 'Recomputes every row\'s hash (an HMAC with `AUDIT_KEY`) and link, and holds the log against every checkpoint in `DATA_DIR/audit-checkpoints.jsonl`; `first_bad_row` is where an edit, insertion, deletion or reordering is first seen, `missing` the rows a checkpoint counted that are gone. With the key, a rewrite is found wherever it is; without it, only against a checkpoint. `agent-host audit verify` does the same from the command line, and takes checkpoints kept elsewhere.',
      response: { 200: AuditVerification }
    }
  }, async () => {
    const file = join(app.config.DATA_DIR, CHECKPOINT_FILE)
    const { checkpoints, problems } = readCheckpoints(file)
    return await app.audit.verify(checkpoints, { checkpointFile: file, problems })
  })

  app.get('/v1/audit/checkpoint', {
    schema: {
      operationId: 'getAuditCheckpoint',
      tags: ['audit'],
      summary: 'The audit log\'s size and head now, signed with the audit key: keep copies outside this server',
      description: 'A monitor that stores these elsewhere can later prove that no row up to `rows` was changed or cut (`agent-host audit verify --checkpoint \'<json>\'`), even by someone holding the database and the key file.',
      response: { 200: AuditCheckpoint }
    }
  }, async () => await app.audit.checkpoint())
}

export default auditRoutes
