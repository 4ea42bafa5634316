import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { HostMetrics } from '../metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Prometheus metrics (`GET /metrics`). */
    metrics: HostMetrics
  }
}

/** The metrics registry, and a count of every answered request by route, method and status. */
async function metrics (app: FastifyInstance): Promise<void> {
  const host = new HostMetrics({ tasks: () => app.tasks, auditRows: () => app.audit.count() })
  app.decorate('metrics', host)
  app.addHook('onRequest', async (request, reply) => {
    // on the raw response, so hijacked (SSE) answers count too; the route pattern, not the URL,
    // so that ids do not make a label each
    reply.raw.once('close', () => {
      host.requests.inc({ route: request.routeOptions.url ?? 'unmatched', method: request.method, status: String(reply.raw.statusCode) })
    })
  })
}

export default fp(metrics, { name: 'metrics', fastify: '5.x', dependencies: ['config', 'storage'] })
