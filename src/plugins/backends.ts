import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { createBackends, type BackendRegistry } from '../backends/registry.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The configured agent backends (LLM providers, the local agent); agents get it as `host`. */
    backends: BackendRegistry
  }
}

/**
 * The agent backends from the configuration. Unconfigured ones are listed as unavailable rather
 * than failing the boot, so the server starts with no provider set. On close, local agents'
 * processes are stopped.
 */
async function backends (app: FastifyInstance): Promise<void> {
  const registry = createBackends(app.config, app.log.child({ component: 'backends' }))
  app.decorate('backends', registry)
  for (const info of await registry.describe()) {
    if (!info.available) app.log.info({ backend: info.name, reason: info.reason }, 'backend not available')
  }
  app.addHook('onClose', async () => { await registry.close() })
}

export default fp(backends, { name: 'backends', fastify: '5.x', dependencies: ['config'] })
