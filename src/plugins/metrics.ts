import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { HostMetrics } from '../metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Prometheus metrics (`GET /metrics`). */
    metrics: HostMetrics
  }
}

/** The `code` of an error body, if `body` is one (on `/mcp`, in a JSON-RPC error's `data`). */
function codeOf (body: string): unknown {
  try {
    const parsed = JSON.parse(body) as { code?: unknown, error?: { data?: { code?: unknown } } } | null
    return parsed?.code ?? parsed?.error?.data?.code
  } catch {
    return undefined
  }
}

/**
 * The metrics registry; a count of every answered request by route, method and status, and of
 * every error answer by its code; and, once the app is ready, the run engine's observer (time to
 * first packet, tokens and cost, the errors runs end with).
 */
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
  // every error answer has the catalogue's body, whoever sent it (the error and not-found handlers,
  // load shedding, a failed run's JSON answer): its code is read back here rather than at each sender
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (reply.statusCode >= 400 && typeof payload === 'string') host.httpError(codeOf(payload))
    done(null, payload)
  })
  // the engine is made by the runs plugin, which comes after this one
  app.addHook('onReady', async () => {
    if (app.hasDecorator('assist')) app.assist.observe(host.runObserver)
  })
}

export default fp(metrics, { name: 'metrics', fastify: '5.x', dependencies: ['config', 'storage'] })
