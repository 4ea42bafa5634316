import type { AssistStream } from './assist-stream.js'
import { buildEnvelope, type EnvelopeInput } from './build-envelope.js'
import type { Interrupt, ResumeAnswer, ServiceRequest, ServiceResponse } from './protocol.js'
import { randomUuid } from './random-uuid.js'

/**
 * The run a resume answers: the envelope of the request that asked (a stream's
 * {@link AssistStream.request}, or what was sent to {@link AgentHostClient.assist}), or its agent
 * and session with the user and permissions to send again (as {@link EnvelopeInput} takes them).
 */
export type ResumeTarget = ServiceRequest | (Omit<EnvelopeInput, 'query' | 'input' | 'requestId' | 'sessionId'> & { sessionId: string })

/**
 * The envelope that answers a run's interrupts (CAP's human in the loop): a new request (a new
 * `request_id`) in the same session, to the same agent, whose `payload.payload` is
 * `{ resume: answers }`. From the asking envelope it keeps the user, permissions and metadata, and
 * continues its trace (same trace id, its span as parent). Keep the result to retry the same
 * answer: sent again, it joins the same run.
 * @param answers one per question answered: `{ interrupt_id, value }`, the value matching the
 * interrupt's `schema` for `input`, `{ approved, comment? }` ({@link ApprovalValue}) for `approval`
 */
export function buildResumeEnvelope (target: ResumeTarget, answers: ResumeAnswer[]): ServiceRequest {
  const resume = answers.map((a) => ({ interrupt_id: a.interrupt_id, value: a.value }))
  if (!('context' in target)) {
    const { sessionId, ...rest } = target
    return buildEnvelope({ ...rest, sessionId, input: { resume } })
  }
  const { context, payload } = target
  return {
    request_id: randomUuid(),
    context: {
      ...context,
      user: { ...context.user },
      permissions: [...context.permissions],
      trace: { trace_id: context.trace.trace_id, span_id: randomUuid(), parent_id: context.trace.span_id },
      created_at: new Date().toISOString()
    },
    payload: {
      session_id: payload.session_id,
      payload: { resume },
      ...(payload.metadata === undefined ? {} : { metadata: payload.metadata })
    }
  }
}

/** A JSON answer of a run that stopped to ask: its `interrupts` are there and not empty. */
export type InterruptedResponse = ServiceResponse & { interrupts: Interrupt[] }
/** A stream whose run stopped to ask: it closed `"input_required"` after an `INTERRUPT` EVENT. */
export type InterruptedStream = AssistStream & { readonly interrupts: Interrupt[], readonly closeReason: 'input_required' }

/**
 * Whether a run stopped to ask its caller (human in the loop): a JSON answer with open
 * `interrupts`, or a stream that ended with CLOSE `"input_required"` after its `INTERRUPT` EVENT.
 * Answer its `interrupts` with {@link AgentHostClient.resume} (or `resumeStream`).
 */
export function isInterrupted (answer: ServiceResponse): answer is InterruptedResponse
export function isInterrupted (stream: AssistStream): stream is InterruptedStream
export function isInterrupted (answer: ServiceResponse | AssistStream): boolean {
  if (typeof (answer as Partial<AssistStream>).next === 'function') {
    const stream = answer as AssistStream
    return stream.closeReason === 'input_required' && (stream.interrupts?.length ?? 0) > 0
  }
  return ((answer as ServiceResponse).interrupts?.length ?? 0) > 0
}
