import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { AH_ERR_AGENT_NOT_FOUND } from '../../errors.js'
import { AgentDefinition, AgentList } from '../../protocol/manifest.js'
import { ECHO_AGENT_ID, errorResponse } from '../../protocol/openapi.js'

/** `GET /v1/agents` and `GET /v1/agents/:id`: the served manifests (CAP.md §7). */
const agentRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/agents', {
    schema: {
      operationId: 'listAgents',
      tags: ['agents'],
      summary: 'List hosted agents',
      description: 'Every hosted agent\'s manifest (CAP.md §7); `metadata.id` is what `POST /v1/assist` takes as `context.agent_id`.',
      response: { 200: AgentList }
    }
  }, async () => ({ agents: app.agents.list().map((h) => h.manifest) }))

  app.get('/v1/agents/:id', {
    schema: {
      operationId: 'getAgent',
      tags: ['agents'],
      summary: 'One agent\'s manifest, by id (uuid) or name',
      params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 256, description: 'The agent\'s `metadata.id` (any case) or `metadata.name`', examples: [ECHO_AGENT_ID] }) }),
      response: { 200: AgentDefinition, 404: errorResponse('No agent has this id or name', new AH_ERR_AGENT_NOT_FOUND('nobody')) }
    }
  }, async (request) => {
    const hosted = app.agents.get(request.params.id)
    if (hosted === undefined) throw new AH_ERR_AGENT_NOT_FOUND(request.params.id)
    return hosted.manifest
  })
}

export default agentRoutes
