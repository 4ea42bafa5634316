import fp from 'fastify-plugin'
import { randomFillSync } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'

declare module 'fastify' {
  interface FastifyRequest {
    /** The W3C trace id of this request: the caller's (`traceparent`), its envelope's `trace.trace_id`, or a new one. */
    traceId: string
  }
  interface FastifyContextConfig {
    /**
     * The route's body is a CAP envelope: without a `traceparent` header, its `context.trace.trace_id`
     * (a UUID: 32 hex digits once its dashes are gone) becomes the request's trace id.
     */
    traceFromEnvelope?: boolean
  }
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/
const UUID = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/

// Ids come from one 4 KiB CSPRNG read per ~170 requests: with two randomBytes() calls per request,
// randomFillSync took ~45 µs of a ~800 µs request in `node bench/profile.js`; now it is not among the top 30.
const pool = Buffer.allocUnsafe(4096)
let offset = pool.length

/** `bytes` random bytes as hex, from the pool. */
function randomHex (bytes: number): string {
  if (offset + bytes > pool.length) {
    randomFillSync(pool)
    offset = 0
  }
  offset += bytes
  return pool.toString('hex', offset - bytes, offset)
}

/** A request's trace: its id may still change once (to its envelope's) until `settled`. */
interface TraceContext {
  traceId: string
  /** Our span: the parent id of what this request calls. */
  spanId: string
  flags: string
  /** The trace id is final: it came from `traceparent`, or the envelope was read. */
  settled: boolean
}
const contexts = new WeakMap<IncomingMessage, TraceContext>()

/**
 * The trace context of a request, read once: a valid incoming `traceparent` is continued (its trace
 * id and flags), otherwise a trace starts here (and may take its envelope's id: see the plugin).
 * Shared by the request's loggers (`traceLogging`) and the plugin below, so all see the same id.
 */
export function traceContext (raw: IncomingMessage): TraceContext {
  let context = contexts.get(raw)
  if (context === undefined) {
    const header = raw.headers.traceparent
    const match = typeof header === 'string' ? TRACEPARENT.exec(header.trim().toLowerCase()) : null
    const continued = match !== null && !/^0+$/.test(match[1] as string)
    context = {
      traceId: continued ? match[1] as string : randomHex(16),
      spanId: randomHex(8),
      flags: match?.[3] ?? '01',
      settled: continued
    }
    contexts.set(raw, context)
  }
  return context
}

const TRACE = Symbol('trace')
type Traced = { [TRACE]?: TraceContext }

/**
 * The logger options that put `traceId` on every line of a request, the access-log lines included:
 * `childLoggerFactory` marks the request's logger with its trace, and pino's `mixin` reads the mark
 * (inherited by the run's child loggers) when a line is written. Read at write time, not bound
 * once, because an envelope's trace id is known only after the body is parsed, when Fastify has
 * already made the logger.
 */
export const traceLogging = {
  mixin: (_merge: object, _level: number, logger: unknown): Record<string, string> => {
    const context = (logger as Traced)[TRACE]
    return context === undefined ? {} : { traceId: context.traceId }
  },
  mark: <L extends object>(logger: L, raw: IncomingMessage): L => {
    (logger as Traced)[TRACE] = traceContext(raw)
    return logger
  }
}

const deferred = new WeakSet<IncomingMessage>()

/** Write a request's deferred `incoming request` line now (before anything else it logs), if it is still owed. */
export function logIncoming (request: FastifyRequest): void {
  if (deferred.delete(request.raw)) request.log.debug({ req: request }, 'incoming request')
}

/**
 * The access log: one line per request at info, `request completed` (or `request errored`), naming
 * the request (method, URL, host, remote address), its answer's status and its time. The
 * `incoming request` line is debug; on a `traceFromEnvelope` route it is written once the trace id
 * is known (after the body is read), or before the last line if the request ended sooner (refused
 * before its body was read), so every line carries the trace id the response names.
 */
export class TraceLogController extends LogController {
  override incomingRequest (request: FastifyRequest): void {
    if (this.isLogDisabled(request)) return
    if (request.routeOptions.config.traceFromEnvelope === true && !traceContext(request.raw).settled) deferred.add(request.raw)
    else request.log.debug({ req: request }, 'incoming request')
  }

  override requestCompleted (error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    logIncoming(request)
    if (this.isLogDisabled(request)) return
    if (error !== null && error !== undefined) reply.log.error({ req: request, res: reply, err: error, responseTime: reply.elapsedTime }, 'request errored')
    else reply.log.info({ req: request, res: reply, responseTime: reply.elapsedTime }, 'request completed')
  }
}

/**
 * W3C trace context: every response carries `traceparent` (the request's trace id, a span of ours),
 * and every log line of the request carries `traceId` next to Fastify's `reqId`. A route marked
 * `traceFromEnvelope` takes its envelope's trace id when the caller sent no `traceparent`, so the
 * response header, the logs, the audit rows and the run's record name one trace.
 */
async function tracing (app: FastifyInstance): Promise<void> {
  app.decorateRequest('traceId', '')
  app.addHook('onRequest', async (request, reply) => {
    const context = traceContext(request.raw)
    if (request.routeOptions.config.traceFromEnvelope !== true) context.settled = true
    request.traceId = context.traceId
    reply.header('traceparent', `00-${context.traceId}-${context.spanId}-${context.flags}`)
  })
  app.addHook('preValidation', async (request, reply) => {
    const context = traceContext(request.raw)
    if (context.settled) return
    context.settled = true
    const id = (request.body as { context?: { trace?: { trace_id?: unknown } } } | undefined)?.context?.trace?.trace_id
    const traceId = typeof id === 'string' && UUID.test(id.toLowerCase()) ? id.toLowerCase().replaceAll('-', '') : undefined
    if (traceId !== undefined && !/^0+$/.test(traceId)) {
      context.traceId = traceId
      request.traceId = traceId
      reply.header('traceparent', `00-${traceId}-${context.spanId}-${context.flags}`)
    }
    logIncoming(request)
  })
}

export default fp(tracing, { name: 'tracing', fastify: '5.x' })
