import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { documented } from '../protocol/openapi.js'
import { HealthCheckResponse } from '../protocol/response.js'
import pkg from '../../package.json' with { type: 'json' }

/**
 * `GET /health` (CAP.md §1). While shutting down it answers 503 with status `maintenance`, so load
 * balancers stop routing here; under load (see the pressure plugin), or while PostgreSQL cannot be
 * reached, it says `degraded`.
 */
const healthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const bootedAt = performance.now()
  // PostgreSQL: the listening connection is the live sign of the database (it drops when the server goes)
  const databaseUp = (): boolean => app.stores.connected
  app.get('/health', {
    schema: {
      operationId: 'getHealth',
      tags: ['operations'],
      summary: 'Liveness and status',
      description: 'Public. `degraded` when the server is under pressure or its PostgreSQL database cannot be reached; 503 with `maintenance` while it shuts down, so load balancers stop routing here.',
      response: {
        200: documented(HealthCheckResponse, { description: 'Serving: `ok`, or `degraded` under pressure' }),
        503: documented(HealthCheckResponse, {
          description: 'Shutting down',
          examples: [{ status: 'maintenance', instance_id: 'c0ffee00-1234-4abc-8def-000000000001', version: pkg.version, uptime_seconds: 3600.5 }]
        })
      }
    }
  }, async (request, reply) => {
    request.log.debug({ url: request.url, remote: request.ip }, 'health check')
    const closing = app.runs.closing
    return reply.code(closing ? 503 : 200).send({
      status: closing ? 'maintenance' : app.isUnderPressure() || !databaseUp() ? 'degraded' : 'ok',
      instance_id: app.instanceId,
      version: pkg.version,
      uptime_seconds: Math.round((performance.now() - bootedAt) / 10) / 100
    })
  })
}

export default healthRoutes
