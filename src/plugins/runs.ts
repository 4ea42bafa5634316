import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { RunRegistry } from '../agents/run-registry.js'
import { RunService } from '../agents/run-service.js'
import { ShuttingDownError } from '../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Runs in flight in this process (cancel, follow, shutdown). */
    runs: RunRegistry
    /** Starts runs and records what they produce. */
    runService: RunService
  }
}

/**
 * Tracks runs and drains them on close: once closing, new requests get 503 `AH_ERR_SHUTTING_DOWN`;
 * open streams get their shutdown packets and agents their abort before the server stops. Finishes
 * runs a dead process left behind, and prunes journals older than JOURNAL_RETENTION_MS.
 */
async function runs (app: FastifyInstance): Promise<void> {
  const registry = new RunRegistry()
  const service = new RunService({
    db: app.db,
    store: app.runStore,
    sessions: app.sessions,
    audit: app.audit,
    events: app.events,
    live: registry,
    instanceId: app.instanceId,
    log: app.log,
    host: app.backends
  })
  app.decorate('runs', registry)
  app.decorate('runService', service)

  const recovered = service.recoverOrphans()
  if (recovered > 0) app.log.warn({ recovered }, 'finished runs left behind by a process that died')
  const retention = app.config.JOURNAL_RETENTION_MS
  const prune = (): void => {
    const pruned = app.runStore.prune(Date.now() - retention)
    if (pruned > 0) app.log.info({ pruned }, 'pruned expired run journals')
  }
  prune()
  const timer = setInterval(prune, Math.min(Math.max(Math.floor(retention / 4), 1000), 3600_000)).unref()

  app.addHook('onRequest', async (request) => {
    if (registry.closing && request.url !== '/health') throw new ShuttingDownError()
  })
  app.addHook('preClose', async () => {
    clearInterval(timer)
    app.log.info({ runs: registry.size }, 'draining runs')
    await registry.shutdown(app.config.CLOSE_GRACE_MS)
  })
}

export default fp(runs, { name: 'runs', fastify: '5.x', dependencies: ['config', 'storage', 'backends'] })
