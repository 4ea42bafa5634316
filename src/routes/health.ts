import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { HealthCheckResponse } from '../protocol/response.js'
import pkg from '../../package.json' with { type: 'json' }

/**
 * `GET /health` (CAP.md §1). While shutting down it answers 503 with status `maintenance`, so load
 * balancers stop routing here; under load (see the pressure plugin) it says `degraded`.
 */
const healthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const bootedAt = performance.now()
  app.get('/health', {
    schema: { tags: ['operations'], summary: 'Liveness and status', response: { 200: HealthCheckResponse, 503: HealthCheckResponse } }
  }, async (request, reply) => {
    const closing = app.runs.closing
    return reply.code(closing ? 503 : 200).send({
      status: closing ? 'maintenance' : app.isUnderPressure() ? 'degraded' : 'ok',
      agent_id: app.instanceId,
      version: pkg.version,
      uptime_seconds: Math.round((performance.now() - bootedAt) / 10) / 100
    })
  })
}

export default healthRoutes
