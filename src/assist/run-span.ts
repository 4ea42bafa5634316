import { isSpanContextValid, ROOT_CONTEXT, SpanStatusCode, trace, TraceFlags, type Span, type SpanContext, type Tracer } from '@opentelemetry/api'
import { ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions'
import type { DeliveryMode } from '../protocol/manifest.js'
import type { AssistRun } from './run.js'

// GenAI semantic conventions are still incubating: copied here, as their package advises, not imported
const ATTR_GEN_AI_OPERATION_NAME = 'gen_ai.operation.name'
const ATTR_GEN_AI_AGENT_ID = 'gen_ai.agent.id'
const ATTR_GEN_AI_AGENT_NAME = 'gen_ai.agent.name'

/** The run span's own attributes (no convention fits them). */
export const RUN_ATTRIBUTES = {
  mode: 'agent_host.run.mode',
  requestId: 'agent_host.run.request_id',
  end: 'agent_host.run.end',
  packets: 'agent_host.run.packets'
} as const

/**
 * Where a run's span goes in a distributed trace, as plain data (the engine knows no HTTP): the
 * CAP route makes it from the request (`plugins/telemetry.ts:runTraceOf`).
 */
export interface RunTrace {
  /** The run's span is a child of this one: the request's span, or a remote span of the trace the response names. */
  parent: SpanContext
  /** Spans the run's span links to: the request's, when it is in another trace than the run. */
  links?: SpanContext[]
}

/**
 * The caller's span its envelope names, as a remote parent: the trace id's 32 hex digits and the
 * span id's first 16 (as `traceparentOf` sends them on to backends). Undefined when they are zeros.
 */
export function callerSpan (trace: { trace_id: string, span_id: string }, traceFlags: number): SpanContext | undefined {
  const parent = {
    traceId: trace.trace_id.replaceAll('-', '').toLowerCase(),
    spanId: trace.span_id.replaceAll('-', '').slice(0, 16).toLowerCase(),
    traceFlags,
    isRemote: true
  }
  return isSpanContextValid(parent) ? parent : undefined
}

/**
 * Start the span of a run (`assist.run`), from its launch to its end: a child of `where.parent`,
 * or, without one (a caller that is not HTTP), of the caller's span its envelope names.
 */
export function startRunSpan (tracer: Tracer, where: RunTrace | undefined, run: {
  agent: { id: string, name: string }
  mode: DeliveryMode
  /** The caller's request id (the envelope's). */
  requestId: string
  envelopeTrace: { trace_id: string, span_id: string }
}): Span {
  const parent = where?.parent ?? callerSpan(run.envelopeTrace, TraceFlags.SAMPLED)
  return tracer.startSpan('assist.run', {
    attributes: {
      [ATTR_GEN_AI_OPERATION_NAME]: 'invoke_agent',
      [ATTR_GEN_AI_AGENT_ID]: run.agent.id,
      [ATTR_GEN_AI_AGENT_NAME]: run.agent.name,
      [RUN_ATTRIBUTES.mode]: run.mode,
      [RUN_ATTRIBUTES.requestId]: run.requestId
    },
    ...(where?.links !== undefined ? { links: where.links.map((context) => ({ context })) } : {})
  }, parent === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, parent))
}

/**
 * End a run's span once the run is recorded: how it ended and how many packets it made; an error
 * status when an ERROR packet ended it (its stream error code as `error.type`).
 */
export function endRunSpan (span: Span, run: AssistRun): void {
  const end = run.endReason ?? 'aborted'
  span.setAttributes({ [RUN_ATTRIBUTES.end]: end, [RUN_ATTRIBUTES.packets]: run.packets })
  const error = run.fatalError ?? (end === 'shutdown' ? { code: 'shutting_down', message: 'The server shut down before the run ended' } : undefined)
  if (error !== undefined) {
    span.setAttribute(ATTR_ERROR_TYPE, error.code)
    span.setStatus({ code: SpanStatusCode.ERROR, message: error.message })
  }
  span.end()
}
