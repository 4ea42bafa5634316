import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Span, type Tracer } from '@opentelemetry/api'
import { ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions'
import type { AgentProtocol, ProtocolContext, ProtocolResponse } from '../backends/protocol.js'

// GenAI semantic conventions are still incubating: copied here, as their package advises, not imported
const ATTR_GEN_AI_OPERATION_NAME = 'gen_ai.operation.name'
const ATTR_GEN_AI_PROVIDER_NAME = 'gen_ai.provider.name'
const ATTR_GEN_AI_REQUEST_MODEL = 'gen_ai.request.model'
const ATTR_GEN_AI_USAGE_INPUT_TOKENS = 'gen_ai.usage.input_tokens'
const ATTR_GEN_AI_USAGE_OUTPUT_TOKENS = 'gen_ai.usage.output_tokens'

/** The backend span's own attributes (no convention fits them). */
export const BACKEND_ATTRIBUTES = {
  name: 'agent_host.backend.name',
  transport: 'agent_host.backend.transport'
} as const

/** What a finished call's response says about itself. */
function describe (span: Span, response: ProtocolResponse): void {
  const { model, provider } = response.metadata
  if (typeof model === 'string') span.setAttribute(ATTR_GEN_AI_REQUEST_MODEL, model)
  if (typeof provider === 'string') span.setAttribute(ATTR_GEN_AI_PROVIDER_NAME, provider)
  if (response.usage !== null) span.setAttributes({ [ATTR_GEN_AI_USAGE_INPUT_TOKENS]: response.usage.input, [ATTR_GEN_AI_USAGE_OUTPUT_TOKENS]: response.usage.output })
}

/**
 * `protocol` with each call of `send` and `resume` traced as a `backend.call` span, a child of the
 * run's span: the backend's name and transport, then the model, provider and tokens its response
 * names, or an error status when the call fails. The call sends its span on as its `traceparent`
 * (in place of the one the agent gave), so what the backend traces hangs under it.
 */
export function tracedBackend (protocol: AgentProtocol, tracer: Tracer, run: Span): AgentProtocol {
  const parent = trace.setSpan(ROOT_CONTEXT, run)
  const traced = async <T>(call: (ctx: ProtocolContext) => Promise<T>, ctx: ProtocolContext | undefined, responseOf: (result: T) => ProtocolResponse): Promise<T> => {
    const transport = protocol.transportType()
    const span = tracer.startSpan('backend.call', {
      kind: SpanKind.CLIENT,
      attributes: {
        [BACKEND_ATTRIBUTES.name]: protocol.name,
        [BACKEND_ATTRIBUTES.transport]: transport,
        [ATTR_GEN_AI_OPERATION_NAME]: transport === 'llm' ? 'chat' : 'invoke_agent'
      }
    }, parent)
    const { traceId, spanId, traceFlags } = span.spanContext()
    const sampled = (traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED ? '01' : '00'
    try {
      const result = await call({ ...ctx, traceparent: `00-${traceId}-${spanId}-${sampled}` })
      describe(span, responseOf(result))
      return result
    } catch (err) {
      const e = err as { streamCode?: unknown, code?: unknown, name?: unknown, message?: unknown } | null
      span.setAttribute(ATTR_ERROR_TYPE, String(e?.streamCode ?? e?.code ?? e?.name ?? 'error'))
      span.setStatus({ code: SpanStatusCode.ERROR, message: String(e?.message ?? err) })
      span.recordException(err instanceof Error ? err : String(err))
      throw err
    } finally {
      span.end()
    }
  }
  return new Proxy(protocol, {
    get: (target, key) => {
      // the target as `this`: protocols keep their state in private fields, which a proxy does not have
      const value = Reflect.get(target, key, target) as unknown
      if (typeof value !== 'function') return value
      const method = value.bind(target) as (...args: unknown[]) => Promise<unknown>
      if (key === 'send') {
        return async (sessionId: string, messages: unknown, ctx?: ProtocolContext) =>
          await traced(async (c) => await method(sessionId, messages, c) as ProtocolResponse, ctx, (response) => response)
      }
      if (key === 'resume') {
        return async (sessionId: string, messages: unknown, ctx?: ProtocolContext) =>
          await traced(async (c) => await method(sessionId, messages, c) as { response: ProtocolResponse }, ctx, (result) => result.response)
      }
      return method
    }
  })
}
