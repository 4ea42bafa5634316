import { Type, type Static } from 'typebox'
import { AH_ERR_VALIDATION, withDetails } from '../errors.js'
import { JsonObject } from '../protocol/common.js'
import { bindingEnvelope, HostOptions, type BindingCaller } from '../protocol/binding-envelope.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import { uuidOf } from '../protocol/foreign-ids.js'
import type { ResumeAnswer } from '../protocol/interrupts.js'

const Message = Type.Object({
  id: Type.Optional(Type.String()),
  role: Type.String({ description: '`user`, `assistant`, `system`, `developer`, `tool`, `reasoning` or `activity`; the last `user` message is the query' }),
  content: Type.Optional(Type.Unknown({ description: 'a string, or a list of content parts (only `text` parts are taken)' }))
})

const ResumeEntry = Type.Object({
  interruptId: Type.String({ minLength: 1, description: 'the `id` of an interrupt of the run that stopped to ask' }),
  status: Type.Union([Type.Literal('resolved'), Type.Literal('cancelled')]),
  payload: Type.Optional(Type.Unknown({ description: 'the answer: matching the interrupt\'s `responseSchema` (an approval\'s: `{ approved, comment? }`)' })),
  metadata: Type.Optional(JsonObject)
})

/**
 * AG-UI's `RunAgentInput` (`@ag-ui/core`), as `POST /ag-ui/{agent}` takes it: what it needs is
 * checked, and the rest of what `HttpAgent` sends (`tools`, `context`, `state`, `parentRunId`,
 * `protocolVersion`, a message's other fields) is let through and not used.
 */
export const RunInputBody = Type.Object({
  threadId: Type.String({ minLength: 1, maxLength: 256, description: 'the conversation: its CAP session is a UUID made from it (the id itself when it is a UUID)' }),
  runId: Type.String({ minLength: 1, maxLength: 256, description: 'this run: its CAP request id is a UUID made from it, so the same run sent again is joined, not run twice' }),
  messages: Type.Array(Message, { maxItems: 10000 }),
  state: Type.Optional(Type.Unknown({ description: 'not used: the host\'s agents keep their state in their session' })),
  tools: Type.Optional(Type.Array(Type.Unknown(), { description: 'not used: the host\'s agents do not call the front end\'s tools' })),
  context: Type.Optional(Type.Array(Type.Unknown(), { description: 'not used' })),
  forwardedProps: Type.Optional(Type.Object({
    agent_host: Type.Optional(HostOptions)
  }, { description: 'the agent\'s arguments (CAP\'s `payload.payload`, beside `query`); `agent_host` is the host\'s own (capability, timeout_ms, on_disconnect)' })),
  resume: Type.Optional(Type.Array(ResumeEntry, { minItems: 1, maxItems: 100, description: 'answers to the interrupts the thread\'s last run stopped at' }))
}, { title: 'AgUiRunAgentInput' })
export type RunInput = Static<typeof RunInputBody>

/** The CAP session of an AG-UI thread. */
export function sessionIdOf (threadId: string): string {
  return uuidOf('ag-ui-thread', threadId)
}

/** The CAP request id of an AG-UI run. */
export function requestIdOf (runId: string): string {
  return uuidOf('ag-ui-run', runId)
}

function invalid (path: string, message: string): Error {
  return withDetails(new AH_ERR_VALIDATION(`Invalid request: ${path} ${message}`), { errors: [{ path, message }] })
}

/**
 * The text of the last user message: its `content` when a string, its `text` parts joined by
 * blank lines otherwise; undefined when no message is the user's.
 * @throws AH_ERR_VALIDATION for content that is neither (images, files: no agent here takes them)
 */
export function lastUserText (messages: RunInput['messages']): string | undefined {
  const index = messages.findLastIndex((m) => m.role === 'user')
  if (index < 0) return undefined
  const content = (messages[index] as RunInput['messages'][number]).content
  if (typeof content === 'string') return content
  const path = `/messages/${index}/content`
  if (!Array.isArray(content)) throw invalid(path, 'must be a string or a list of content parts')
  return content.map((part: unknown, n) => {
    const p = part as { type?: unknown, text?: unknown } | null
    if (p?.type !== 'text' || typeof p.text !== 'string') throw invalid(`${path}/${n}`, 'must be a text part: the host\'s agents take text only')
    return p.text
  }).join('\n\n')
}

/** What the envelope takes from the call, besides the input. */
export interface EnvelopeContext extends BindingCaller {
  /** The answers of a resume (`interrupts.ts:resumeIntent`): the payload is these alone. */
  resume?: ResumeAnswer[]
}

/**
 * The CAP envelope of an AG-UI run (the mapping is `docs/ag-ui.md`): the session from `threadId`,
 * the request id from `runId` (both `uuidOf`), and as the agent's arguments the fields of
 * `forwardedProps` with the last user message's text as `query` (an agent that takes no `query`
 * is called with its arguments in `forwardedProps` and no user message); a resume's payload is its
 * answers. `forwardedProps.agent_host` is the request's metadata (the capability, the timeout,
 * the disconnect policy, `cancel` unless it says otherwise), with the client's own ids.
 * `state`, `tools` and `context` are not passed on.
 * @throws AH_ERR_VALIDATION for a query sent twice (a user message and `forwardedProps.query`), or content that is not text
 */
export function envelopeOf (input: RunInput, context: EnvelopeContext): ServiceRequest {
  const sessionId = sessionIdOf(input.threadId)
  const requestId = requestIdOf(input.runId)
  const { agent_host: host, ...props } = input.forwardedProps ?? {}
  let payload: Record<string, unknown> = { resume: context.resume }
  if (context.resume === undefined) {
    const query = lastUserText(input.messages)
    if (query !== undefined && 'query' in props) throw invalid('/forwardedProps/query', 'is sent as the last user message too: send the query once')
    payload = { ...props, ...(query !== undefined ? { query } : {}) }
  }
  const metadata = { on_disconnect: 'cancel', ...host, ag_ui: { thread_id: input.threadId, run_id: input.runId } }
  return bindingEnvelope('ag-ui', context, { requestId, sessionId, payload, metadata })
}
