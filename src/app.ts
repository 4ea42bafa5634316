import Fastify, { type FastifyInstance } from 'fastify'
import type { IncomingMessage } from 'node:http'
import { createRequire } from 'node:module'
import { AH_ERR_CONFIG_INVALID } from './errors.js'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { TracerProvider } from '@opentelemetry/api'
import type { Config } from './config.js'
import configPlugin from './plugins/config.js'
import errorHandler from './plugins/error-handler.js'
import validation from './plugins/validation.js'
import jsonBody from './plugins/json-body.js'
import docs from './plugins/swagger.js'
import crossOrigin from './plugins/cors.js'
import dnsRebinding from './plugins/dns-rebinding.js'
import playgroundRoutes from './routes/playground.js'
import planRoutes from './routes/v1/plans.js'
import busRoutes from './routes/v1/bus.js'
import storage from './plugins/storage.js'
import auth from './plugins/auth.js'
import metrics from './plugins/metrics.js'
import tracing, { TraceLogController, traceLogging } from './plugins/tracing.js'
import telemetry, { TelemetryLogController } from './plugins/telemetry.js'
import pressure from './plugins/pressure.js'
import limits from './plugins/limits.js'
import agents from './plugins/agents.js'
import backends from './plugins/backends.js'
import tools from './plugins/tools.js'
import bus from './plugins/bus.js'
import a2aClient from './plugins/a2a-client.js'
import budgets from './plugins/budgets.js'
import runs from './plugins/runs.js'
import tasks from './plugins/tasks.js'
import a2aPush from './plugins/a2a-push.js'
import homeRoutes from './routes/home.js'
import healthRoutes from './routes/health.js'
import metricsRoutes from './routes/metrics.js'
import agentRoutes from './routes/v1/agents.js'
import backendRoutes from './routes/v1/backends.js'
import usageRoutes from './routes/v1/usage.js'
import toolRoutes from './routes/v1/tools.js'
import assistRoutes from './routes/v1/assist.js'
import auditRoutes from './routes/v1/audit.js'
import eventRoutes from './routes/v1/events.js'
import sessionRoutes from './routes/v1/sessions.js'
import taskRoutes from './routes/v1/tasks.js'
import a2aRoutes from './routes/a2a.js'
import a2aPushRoutes from './routes/v1/a2a-push.js'
import mcpRoutes from './routes/mcp.js'
import aiSdkRoutes from './routes/ai-sdk.js'
import agUiRoutes from './routes/ag-ui.js'
import { buildSerializer } from './http/serializers.js'

export interface BuildOptions {
  /** Where log lines go (default: stdout). The level and redaction come from the configuration. */
  logStream?: { write(line: string): void }
  /**
   * OpenTelemetry: the spans of requests, runs, backend calls and commits go to this provider
   * (`src/telemetry.ts:startTelemetry` makes it from the `OTEL_*` variables). None: no tracing.
   */
  tracerProvider?: TracerProvider
  /**
   * Sees every log call first (pino's `hooks.logMethod`): `src/boot-log.ts`'s BootLog, which leaves
   * out of a restart's start-up log the lines the last boot logged too (`LOG_BOOT=changes`).
   */
  bootLog?: { logMethod: (this: unknown, args: unknown[], method: (...args: unknown[]) => void, level: number) => void }
}

/** pino-pretty as a transport (a worker thread), or a clear refusal where it is not installed (`npm ci --omit=dev`). */
function prettyTransport (): { target: string, options: Record<string, unknown> } {
  try {
    createRequire(import.meta.url).resolve('pino-pretty')
  } catch {
    throw new AH_ERR_CONFIG_INVALID('LOG_FORMAT=pretty needs pino-pretty, a dev dependency that is not installed here: use LOG_FORMAT=json (the default), or install the dev dependencies')
  }
  return { target: 'pino-pretty', options: { translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' } }
}

/** Log paths that are never written: credentials in headers, and the backends' API keys. */
export const REDACTED_PATHS = [
  'req.headers.authorization', 'req.headers.cookie', 'req.headers["x-api-key"]', 'req.headers["proxy-authorization"]',
  'res.headers["set-cookie"]', '*.OPENAI_API_KEY', '*.ANTHROPIC_API_KEY', '*.apiKey', '*.api_key', '*.BOOTSTRAP_ADMIN_KEY'
]

/**
 * Compose the server: plugins in dependency order, then routes. Never listens. Resolves once every
 * agent is loaded and started, so a broken agent rejects here with its path.
 */
export async function buildApp (config: Config, options: BuildOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: {
      level: config.LOG_LEVEL,
      redact: REDACTED_PATHS,
      mixin: traceLogging.mixin,
      ...(options.bootLog !== undefined ? { hooks: { logMethod: options.bootLog.logMethod } } : {}),
      ...(options.logStream !== undefined ? { stream: options.logStream } : config.LOG_FORMAT === 'pretty' ? { transport: prettyTransport() } : {})
    },
    // health checks come every few seconds from load balancers: logged at debug by their route, not here at info
    logController: new (options.tracerProvider === undefined ? TraceLogController : TelemetryLogController)({ disableRequestLogging: (request: { url?: string }) => request.url === '/health' || request.url?.startsWith('/health?') === true }),
    // one child logger per request, marked with its trace (whose id every line then carries)
    childLoggerFactory: (logger, bindings, options, raw) => traceLogging.mark(logger.child(bindings, options), raw as IncomingMessage),
    bodyLimit: config.BODY_LIMIT,
    trustProxy: config.TRUST_PROXY,
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // the runs plugin answers 503 itself, with the catalogue's error body
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    schemaController: { compilersFactory: { buildSerializer } },
    // slow clients: a request must arrive whole in time (not its response: SSE streams run long)
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    keepAliveTimeout: config.KEEP_ALIVE_TIMEOUT_MS,
    http: { headersTimeout: config.HEADERS_TIMEOUT_MS, connectionsCheckingInterval: Math.min(30000, Math.ceil(config.HEADERS_TIMEOUT_MS / 4)) }
  }).withTypeProvider<TypeBoxTypeProvider>()

  try {
    await register(app, config, options.tracerProvider)
  } catch (err) {
    // a plugin that failed (a broken agent, a bad setting) must not leave the ones before it open: the database, its timers
    await app.close().catch(() => {})
    throw err
  }
  return app
}

/** Every plugin, then every route, in order. */
async function register (app: FastifyInstance, config: Config, tracerProvider: TracerProvider | undefined): Promise<void> {
  await app.register(configPlugin, { config })
  await app.register(errorHandler)
  // before every hook and route: the request's span starts first, and names the trace tracing.ts sends back
  await app.register(telemetry, tracerProvider === undefined ? {} : { provider: tracerProvider })
  await app.register(crossOrigin)
  await app.register(tracing)
  // before authentication, limits and the body: a refused request does nothing (its answer still carries its trace)
  await app.register(dnsRebinding)
  await app.register(validation)
  await app.register(jsonBody)
  await app.register(docs)
  await app.register(storage)
  await app.register(metrics)
  await app.register(limits)
  await app.register(auth)
  await app.register(pressure)
  await app.register(agents)
  await app.register(backends)
  await app.register(tools)
  await app.register(bus)
  await app.register(a2aClient)
  await app.register(budgets)
  await app.register(runs)
  await app.register(tasks)
  await app.register(a2aPush)

  await app.register(homeRoutes)
  await app.register(healthRoutes)
  await app.register(metricsRoutes)
  await app.register(agentRoutes)
  await app.register(backendRoutes)
  await app.register(usageRoutes)
  await app.register(toolRoutes)
  await app.register(assistRoutes)
  await app.register(sessionRoutes)
  await app.register(eventRoutes)
  await app.register(auditRoutes)
  await app.register(taskRoutes)
  await app.register(planRoutes)
  await app.register(busRoutes)
  await app.register(a2aRoutes)
  await app.register(a2aPushRoutes)
  await app.register(mcpRoutes)
  await app.register(aiSdkRoutes)
  await app.register(agUiRoutes)
  await app.register(playgroundRoutes)
}
