import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { PushConfigs } from '../a2a/push-configs.js'
import { PushDelivery } from '../a2a/push-delivery.js'
import { projectionOf } from '../a2a/task-projection.js'
import { PushSender } from '../a2a/push-sender.js'
import { type A2APushStore } from '../storage/a2a-push.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** A2A push notifications: the tasks' configs (the A2A methods) and their delivery state. */
    a2aPush: { configs: PushConfigs, store: A2APushStore }
  }
}

/**
 * A2A push notifications: the configs in the database (each change with its audit row), and
 * this process's delivery loop (started once the app is ready, stopped before the database
 * closes: POSTs in flight are aborted and their updates pushed again by the next process).
 */
async function a2aPush (app: FastifyInstance): Promise<void> {
  const config = app.config
  const { store, changes } = app.stores.push
  const delivery = new PushDelivery({
    store,
    runs: app.ledger,
    write: app.stores.write,
    sender: new PushSender({ timeoutMs: config.A2A_PUSH_TIMEOUT_MS, allowPrivate: config.A2A_PUSH_ALLOW_PRIVATE }),
    projectionOf: (record) => projectionOf(record, app.agents.get(record.agent_id)?.manifest.metadata.name ?? record.agent_id),
    settings: {
      pollMs: config.A2A_PUSH_POLL_MS,
      timeoutMs: config.A2A_PUSH_TIMEOUT_MS,
      writeBudgetMs: config.DB_WRITE_BUDGET_MS,
      retryBaseMs: config.A2A_PUSH_RETRY_BASE_MS,
      maxAttempts: config.A2A_PUSH_MAX_ATTEMPTS
    },
    log: app.log.child({ component: 'a2a-push' })
  })
  const configs = new PushConfigs({ store, changes, allowPrivate: config.A2A_PUSH_ALLOW_PRIVATE, saved: () => { delivery.wake() } })
  app.decorate('a2aPush', { configs, store })
  app.addHook('onReady', async () => { delivery.start() })
  app.addHook('preClose', async () => { await delivery.close() })
}

export default fp(a2aPush, { name: 'a2a-push', fastify: '5.x', dependencies: ['config', 'storage', 'agents'] })
