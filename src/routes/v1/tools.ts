import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { grants, START_TOOLS_SCOPE } from '../../auth/scopes.js'
import { AH_ERR_FORBIDDEN } from '../../errors.js'
import { errorResponse, validationError } from '../../protocol/openapi.js'
import { ToolList, ToolListQuery } from '../../protocol/tools.js'

/**
 * `GET /v1/tools`: the MCP tools agents may call, their rules, and how their servers are doing.
 * Listing needs the route's scope (`agents:read`); `start=true` starts processes, and needs
 * {@link START_TOOLS_SCOPE} besides (403, audited as the auth plugin's refusals are).
 */
const toolRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/tools', {
    schema: {
      operationId: 'listTools',
      tags: ['tools'],
      summary: 'List the MCP tools agents may call',
      description: 'Each MCP server of `MCP_SERVERS_FILE`: its name (`ToolCall.tool`), transport, status (servers start on their first call; `failed` says why), the agents that may use it, its allowed actions (with the server\'s descriptions and input schemas once it runs), its scopes, timeout and retries. `start=true` starts the servers not running yet, and needs the scope `admin`.',
      querystring: ToolListQuery,
      response: {
        200: ToolList,
        400: errorResponse('A query parameter is malformed', validationError('/querystring/start', 'must be boolean')),
        403: errorResponse('`start=true` without the scope `admin`, or a key without `agents:read` (`AH_ERR_FORBIDDEN`)', new AH_ERR_FORBIDDEN(`starting the tools' servers (start=true) needs the scope "${START_TOOLS_SCOPE}"`))
      }
    }
  }, async (request) => {
    const { identity } = request
    if (request.query.start && !grants(identity.scopes, START_TOOLS_SCOPE)) {
      await app.audit.append({ actor: identity.id, action: 'auth.deny', resource: 'GET /v1/tools', success: false, details: { reason: 'scope', ip: request.ip, scope: START_TOOLS_SCOPE, name: identity.name } })
      throw new AH_ERR_FORBIDDEN(`starting the tools' servers (start=true) needs the scope "${START_TOOLS_SCOPE}"`)
    }
    return { tools: await app.tools.describe({ start: request.query.start }) }
  })
}

export default toolRoutes
