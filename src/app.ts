import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { Config } from './config.js'
import configPlugin from './plugins/config.js'
import errorHandler from './plugins/error-handler.js'
import validation from './plugins/validation.js'
import docs from './plugins/swagger.js'
import storage from './plugins/storage.js'
import metrics from './plugins/metrics.js'
import agents from './plugins/agents.js'
import backends from './plugins/backends.js'
import runs from './plugins/runs.js'
import tasks from './plugins/tasks.js'
import healthRoutes from './routes/health.js'
import metricsRoutes from './routes/metrics.js'
import agentRoutes from './routes/v1/agents.js'
import backendRoutes from './routes/v1/backends.js'
import assistRoutes from './routes/v1/assist.js'
import auditRoutes from './routes/v1/audit.js'
import eventRoutes from './routes/v1/events.js'
import sessionRoutes from './routes/v1/sessions.js'
import taskRoutes from './routes/v1/tasks.js'

export interface BuildOptions {
  /** Logger settings; defaults to pino at LOG_LEVEL with auth headers redacted. */
  logger?: FastifyServerOptions['logger']
}

/**
 * Compose the server: plugins in dependency order, then routes. Never listens. Resolves once every
 * agent is loaded and started, so a broken agent rejects here with its path.
 */
export async function buildApp (config: Config, options: BuildOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: options.logger ?? {
      level: config.LOG_LEVEL,
      redact: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-api-key"]']
    },
    bodyLimit: config.BODY_LIMIT,
    trustProxy: config.TRUST_PROXY,
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // the runs plugin answers 503 itself, with the catalogue's error body
    return503OnClosing: false,
    forceCloseConnections: 'idle'
  }).withTypeProvider<TypeBoxTypeProvider>()

  await app.register(configPlugin, { config })
  await app.register(errorHandler)
  await app.register(validation)
  await app.register(docs)
  await app.register(storage)
  await app.register(metrics)
  await app.register(agents)
  await app.register(backends)
  await app.register(runs)
  await app.register(tasks)

  await app.register(healthRoutes)
  await app.register(metricsRoutes)
  await app.register(agentRoutes)
  await app.register(backendRoutes)
  await app.register(assistRoutes)
  await app.register(sessionRoutes)
  await app.register(eventRoutes)
  await app.register(auditRoutes)
  await app.register(taskRoutes)
  return app
}
