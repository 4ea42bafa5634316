import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { BackendList } from '../../protocol/backends.js'

/** `GET /v1/backends`: the agent backends, whether each can be used, and their usage so far. */
const backendRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/backends', {
    schema: {
      operationId: 'listBackends',
      tags: ['backends'],
      summary: 'List agent backends',
      description: 'LLM providers and the local agent: whether each is available (and if not, what to set), the model, and token usage and cost over the sessions this process holds.',
      response: { 200: BackendList }
    }
  }, async () => ({ backends: await app.backends.describe() }))
}

export default backendRoutes
