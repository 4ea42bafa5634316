import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'

/** `GET /metrics`: Prometheus text exposition of the server's metrics. */
const metricsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/metrics', {
    schema: {
      operationId: 'getMetrics',
      tags: ['operations'],
      summary: 'Prometheus metrics',
      description: 'Requests by route and status, assist latency by agent and mode, open SSE streams, packets, heartbeats, disconnects, tasks by status, claims, reclaims, stale completions, lease expiries, audit rows, and the Node.js process metrics; every name starts `agent_host_`.',
      produces: ['text/plain'],
      response: { 200: Type.String() }
    }
  }, async (_request, reply) => {
    return await reply.type(app.metrics.registry.contentType).send(await app.metrics.registry.metrics())
  })
}

export default metricsRoutes
