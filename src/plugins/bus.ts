import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { EventBus } from '../bus/event-bus.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The event bus (seed 003): durable, at least once, shared with worker processes on the same database. */
    bus: EventBus
  }
}

/**
 * The event bus in the database (SQLite: its writes go through the group writer; PostgreSQL: shared
 * by every instance), its deliveries leased to this instance. Closed before the task runtime, so no handler starts a task on a closed store.
 */
async function bus (app: FastifyInstance): Promise<void> {
  const config = app.config
  const eventBus = new EventBus({
    store: app.stores.bus,
    write: app.stores.write,
    instanceId: app.instanceId,
    pollMs: config.BUS_POLL_MS,
    leaseMs: config.BUS_LEASE_MS,
    maxAttempts: config.BUS_MAX_ATTEMPTS,
    backoffMs: config.BUS_RETRY_BACKOFF_MS,
    log: app.log,
    observe: {
      published: (duplicate) => { app.metrics.busPublished.inc({ duplicate: String(duplicate) }) },
      delivered: (outcome, count = 1) => { app.metrics.busDeliveries.inc({ outcome }, count) }
    }
  })
  app.decorate('bus', eventBus)
  app.addHook('preClose', async () => { await eventBus.close() })
}

export default fp(bus, { name: 'bus', fastify: '5.x', dependencies: ['config', 'storage', 'metrics'] })
