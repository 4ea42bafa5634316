import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { AH_ERR_AGENT_NOT_FOUND } from '../../errors.js'
import { AgentDefinition, AgentList } from '../../protocol/manifest.js'
import { ErrorBody } from '../../protocol/response.js'

/** `GET /v1/agents` and `GET /v1/agents/:id`: the served manifests (CAP.md §7). */
const agentRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/agents', {
    schema: { tags: ['agents'], summary: 'List hosted agents', response: { 200: AgentList } }
  }, async () => ({ agents: app.agents.list().map((h) => h.manifest) }))

  app.get('/v1/agents/:id', {
    schema: {
      tags: ['agents'],
      summary: 'One agent\'s manifest, by id (uuid) or name',
      params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 256 }) }),
      response: { 200: AgentDefinition, 404: ErrorBody }
    }
  }, async (request) => {
    const hosted = app.agents.get(request.params.id)
    if (hosted === undefined) throw new AH_ERR_AGENT_NOT_FOUND(request.params.id)
    return hosted.manifest
  })
}

export default agentRoutes
