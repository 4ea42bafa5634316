import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { RunRegistry } from '../agents/run-registry.js'
import { ShuttingDownError } from '../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Runs in flight (cancel, shutdown). */
    runs: RunRegistry
  }
}

/**
 * Tracks runs and drains them on close: once closing, new requests get 503 `AH_ERR_SHUTTING_DOWN`;
 * open streams get their shutdown packets and agents their abort before the server stops.
 */
async function runs (app: FastifyInstance): Promise<void> {
  const registry = new RunRegistry()
  app.decorate('runs', registry)
  app.addHook('onRequest', async (request) => {
    if (registry.closing && request.url !== '/health') throw new ShuttingDownError()
  })
  app.addHook('preClose', async () => {
    app.log.info({ runs: registry.size }, 'draining runs')
    await registry.shutdown(app.config.CLOSE_GRACE_MS)
  })
}

export default fp(runs, { name: 'runs', fastify: '5.x', dependencies: ['config'] })
