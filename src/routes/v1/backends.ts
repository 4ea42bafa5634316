import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'

const Usage = Type.Object({
  input: Type.Integer({ minimum: 0, description: 'input tokens' }),
  output: Type.Integer({ minimum: 0, description: 'output tokens' }),
  cost: Type.Number({ minimum: 0, description: 'USD, from LLM_PRICES' }),
  turns: Type.Integer({ minimum: 0, description: 'model calls' }),
  sessions: Type.Integer({ minimum: 0, description: 'sessions held by this process' })
}, { additionalProperties: false })

const Backend = Type.Object({
  name: Type.String(),
  aliases: Type.Array(Type.String()),
  transport: Type.Union([Type.Literal('llm'), Type.Literal('local_agent')]),
  available: Type.Boolean(),
  reason: Type.Optional(Type.String({ description: 'when not available: the settings to set' })),
  provider: Type.Optional(Type.String()),
  model: Type.Optional(Type.String()),
  usage: Type.Optional(Usage)
}, { additionalProperties: false, title: 'Backend' })

/** `GET /v1/backends`: the agent backends, whether each can be used, and their usage so far. */
const backendRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/backends', {
    schema: {
      tags: ['backends'],
      summary: 'List agent backends',
      description: 'LLM providers and the local agent: whether each is available (and if not, what to set), the model, and token usage and cost over the sessions this process holds.',
      response: { 200: Type.Object({ backends: Type.Array(Backend) }, { additionalProperties: false }) }
    }
  }, async () => ({ backends: await app.backends.describe() }))
}

export default backendRoutes
