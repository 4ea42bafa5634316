import fp from 'fastify-plugin'
import type { IncomingMessage } from 'node:http'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
// its types (request.opentelemetry()); the module itself is loaded only when telemetry is on
import type {} from '@fastify/otel'
import {
  isSpanContextValid, propagation, trace, TraceFlags,
  type Context, type SpanContext, type TextMapGetter, type TextMapPropagator, type TextMapSetter, type Tracer, type TracerProvider
} from '@opentelemetry/api'
import pkg from '../../package.json' with { type: 'json' }
import { callerSpan, type RunTrace } from '../assist/run-span.js'
import { TraceLogController, traceContext } from './tracing.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The tracer of the server's own spans (runs, backend calls, commits); undefined when telemetry is off. */
    tracer: Tracer | undefined
  }
  interface FastifyRequest {
    /** Where this request's run goes in the trace ({@link runTraceOf}), for the engine; undefined when telemetry is off. */
    runTrace: (envelopeTrace: { trace_id: string, span_id: string }) => RunTrace | undefined
  }
}

export interface TelemetryOptions {
  /** Where spans go (`src/telemetry.ts:startTelemetry`, or a test's); none: telemetry is off. */
  provider?: TracerProvider
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/**
 * W3C `traceparent`, for `@fastify/otel`, which reads the caller's trace through the global
 * propagator. It follows `tracing.ts`'s rules (version 00 only), so that the request's span
 * continues exactly the traces the response header continues.
 */
export class TraceparentPropagator implements TextMapPropagator {
  inject (context: Context, carrier: unknown, setter: TextMapSetter): void {
    const span = trace.getSpanContext(context)
    if (span === undefined || !isSpanContextValid(span)) return
    setter.set(carrier, 'traceparent', `00-${span.traceId}-${span.spanId}-${(span.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED ? '01' : '00'}`)
  }

  extract (context: Context, carrier: unknown, getter: TextMapGetter): Context {
    const header = getter.get(carrier, 'traceparent')
    const match = typeof header === 'string' ? TRACEPARENT.exec(header.trim().toLowerCase()) : null
    if (match === null) return context
    const parent = { traceId: match[1] as string, spanId: match[2] as string, traceFlags: Number.parseInt(match[3] as string, 16), isRemote: true }
    return isSpanContextValid(parent) ? trace.setSpanContext(context, parent) : context
  }

  fields (): string[] {
    return ['traceparent']
  }
}

// the request line of a trace that starts here: written once the request's span has named the trace
const owed = new WeakSet<IncomingMessage>()

function writeOwed (request: FastifyRequest): void {
  if (owed.delete(request.raw)) request.log.debug({ req: request }, 'incoming request')
}

/**
 * The access log when telemetry is on. A trace that starts here is the request span's, whose id
 * is known only once `@fastify/otel` has started it (in `onRequest`): the `incoming request` line
 * of such a request waits for it, so that it carries the trace id every other line carries.
 */
export class TelemetryLogController extends TraceLogController {
  override incomingRequest (request: FastifyRequest): void {
    if (request.routeOptions.config.traceFromEnvelope !== true && !traceContext(request.raw).settled && !this.isLogDisabled(request)) owed.add(request.raw)
    else super.incomingRequest(request)
  }

  override requestCompleted (error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    writeOwed(request)
    super.requestCompleted(error, request, reply)
  }
}

/**
 * The request's trace is its span's: a trace that starts here takes the span's trace id (in place
 * of the one `tracing.ts` drew before the span existed), and the response's `traceparent` names
 * the request's span and its sampling decision, so the trace a response names is one exported.
 */
function adopt (request: FastifyRequest): void {
  const span = request.opentelemetry().span?.spanContext()
  if (span === undefined) return
  const context = traceContext(request.raw)
  if (!context.settled) context.traceId = span.traceId
  if (context.traceId !== span.traceId) return
  context.spanId = span.spanId
  context.flags = (span.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED ? '01' : '00'
}

/**
 * Where the run of a `/v1/assist` request goes in the trace (plain data, for the engine): under the
 * request's span when that span is in the trace the response names. Otherwise the envelope's trace
 * id was taken once the body was read, after the span had started: the run goes in that trace,
 * under the caller's span the envelope names (or, if its trace is not the response's, the span the
 * response names), linked to the request's span.
 */
export function runTraceOf (request: FastifyRequest, envelopeTrace: { trace_id: string, span_id: string }): RunTrace {
  const own = request.opentelemetry().span?.spanContext()
  if (own?.traceId === request.traceId) return { parent: own }
  const context = traceContext(request.raw)
  const traceFlags = own?.traceFlags ?? Number.parseInt(context.flags, 16)
  const caller = callerSpan(envelopeTrace, traceFlags)
  const parent: SpanContext = caller?.traceId === request.traceId ? caller : { traceId: request.traceId, spanId: context.spanId, traceFlags, isRemote: true }
  return own === undefined ? { parent } : { parent, links: [own] }
}

// health checks and metric scrapes come every few seconds: no spans, as they have no log lines
const UNTRACED = /^\/(health|metrics)(\?|$)/

/**
 * OpenTelemetry tracing (off without a provider: nothing here runs, and `app.tracer` is undefined).
 * `@fastify/otel` makes a span for every request (`request`, with its handler's as a child) except
 * health checks and scrapes; the app gets the tracer of its own spans (`assist.run`,
 * `backend.call`, `storage.commit`). Register it before `tracing.ts`, and give `buildApp`'s
 * Fastify the {@link TelemetryLogController}.
 */
async function telemetry (app: FastifyInstance, options: TelemetryOptions): Promise<void> {
  const provider = options.provider
  app.decorate('tracer', provider?.getTracer('agent-host', pkg.version))
  const runTrace: FastifyRequest['runTrace'] = provider === undefined
    ? () => undefined
    : function (this: FastifyRequest, envelopeTrace) { return runTraceOf(this, envelopeTrace) }
  app.decorateRequest('runTrace', runTrace)
  if (provider === undefined) return
  // the propagator is the same for every app, and one registered by the process's owner is kept
  if (propagation.fields().length === 0) propagation.setGlobalPropagator(new TraceparentPropagator())
  const { FastifyOtelInstrumentation } = await import('@fastify/otel')
  const instrumentation = new FastifyOtelInstrumentation({
    // a span for every hook of every request would cost more than it tells: the request's and its handler's
    instrumentHooks: false,
    ignorePaths: (route) => UNTRACED.test(route.url)
  })
  instrumentation.setTracerProvider(provider)
  await app.register(instrumentation.plugin())
  app.addHook('onRequest', async (request) => {
    adopt(request)
    writeOwed(request)
  })
}

export default fp(telemetry, { name: 'telemetry', fastify: '5.x' })
