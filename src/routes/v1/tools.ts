import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponse, validationError } from '../../protocol/openapi.js'
import { ToolList, ToolListQuery } from '../../protocol/tools.js'

/** `GET /v1/tools`: the MCP tools agents may call, their rules, and how their servers are doing. */
const toolRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/tools', {
    schema: {
      operationId: 'listTools',
      tags: ['tools'],
      summary: 'List the MCP tools agents may call',
      description: 'Each MCP server of `MCP_SERVERS_FILE`: its name (`ToolCall.tool`), transport, status (servers start on their first call; `failed` says why), the agents that may use it, its allowed actions (with the server\'s descriptions and input schemas once it runs), its scopes, timeout and retries. `start=true` starts the servers not running yet.',
      querystring: ToolListQuery,
      response: { 200: ToolList, 400: errorResponse('A query parameter is malformed', validationError('/querystring/start', 'must be boolean')) }
    }
  }, async (request) => ({ tools: await app.tools.describe({ start: request.query.start }) }))
}

export default toolRoutes
