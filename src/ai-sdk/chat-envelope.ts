import { randomUUID } from 'node:crypto'
import { AH_ERR_VALIDATION, withDetails } from '../errors.js'
import { bindingEnvelope, type BindingCaller, type HostOptions } from '../protocol/binding-envelope.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import { uuidOf } from '../protocol/foreign-ids.js'
import type { ResumeAnswer } from '../protocol/interrupts.js'
import type { SentPart } from './interrupts.js'

/** A UI message as `DefaultChatTransport` sends it (only what this binding reads is typed). */
export interface SentMessage {
  id: string
  role: string
  parts: SentPart[]
}

/**
 * What `DefaultChatTransport` posts: the chat's `id`, its `messages`, the `trigger` and the
 * `messageId` it concerns, beside the fields of the transport's and the call's `body` (the agent's
 * arguments, besides its query).
 */
export interface ChatBody {
  id: string
  messages: SentMessage[]
  trigger?: string
  messageId?: string
  [field: string]: unknown
}

/** The fields of a chat request that are the transport's, not the agent's. */
const TRANSPORT_FIELDS = new Set(['id', 'messages', 'trigger', 'messageId', 'agent_host'])

/** The keys of the request metadata that keep the chat's own ids (the agent sees them too). */
export const CHAT_ID = 'ai_sdk_chat_id'
/** The assistant message a run continues (a run that answers questions goes on with the message that asked them). */
export const MESSAGE_ID = 'ai_sdk_message_id'

/** The CAP session of a chat: the same for every request of the chat. */
export function chatSessionId (chatId: string): string {
  return uuidOf('ai-sdk-chat', chatId)
}

/** The id of the assistant message a run's stream makes: the one it continues, else the run's request id. */
export function messageIdOf (envelope: ServiceRequest): string {
  const continued = (envelope.payload.metadata as Record<string, unknown> | undefined)?.[MESSAGE_ID]
  return typeof continued === 'string' ? continued : envelope.request_id
}

/** What the envelope takes from the call. */
export type ChatCaller = BindingCaller

function invalid (path: string, message: string): Error {
  return withDetails(new AH_ERR_VALIDATION(message), { errors: [{ path, message }] })
}

function envelopeOf (body: ChatBody, caller: ChatCaller, requestId: string, payload: Record<string, unknown>, metadata: Record<string, unknown>): ServiceRequest {
  return bindingEnvelope('ai-sdk', caller, { requestId, sessionId: chatSessionId(body.id), payload, metadata: { [CHAT_ID]: body.id, ...metadata } })
}

/**
 * A new run of the chat for its last message, a user's: its text parts, joined by blank lines, as
 * `payload.query`, the body's other fields as the rest of the payload (but `agent_host`, the
 * host's own: the request's metadata, `capability`, `timeout_ms`, `on_disconnect`). The request id is made from
 * the chat's and the message's ids, so the same message sent again joins its run; a
 * `regenerate-message` is a new run.
 * @throws AH_ERR_VALIDATION when the last message is not a user's, or has no text, or has a file
 */
export function questionEnvelope (body: ChatBody, caller: ChatCaller): ServiceRequest {
  const last = body.messages.at(-1) as SentMessage
  const path = `/body/messages/${body.messages.length - 1}`
  if (last.role !== 'user') throw invalid(`${path}/role`, 'The last message must be the user\'s (or the assistant\'s, answering its open questions)')
  const texts: string[] = []
  for (const part of last.parts) {
    if (part.type === 'text' && typeof (part as { text?: unknown }).text === 'string') texts.push((part as unknown as { text: string }).text)
    else if (part.type === 'file') throw invalid(`${path}/parts`, 'File parts are not supported: send text (and the agent\'s other arguments as body fields)')
  }
  if (texts.length === 0) throw invalid(`${path}/parts`, 'The last message has no text part: it is the agent\'s query')
  const payload: Record<string, unknown> = {}
  for (const [field, value] of Object.entries(body)) if (!TRANSPORT_FIELDS.has(field)) payload[field] = value
  payload.query = texts.join('\n\n')
  const requestId = body.trigger === 'regenerate-message' ? randomUUID() : uuidOf('ai-sdk-message', `${body.id}\u0000${last.id}`)
  return envelopeOf(body, caller, requestId, payload, { ...(body.agent_host as HostOptions | undefined) })
}

/**
 * A run that answers the chat's open questions (`payload.resume`, in the chat's session), going on
 * with the assistant message that asked them (the last one). Its request id is made from the chat
 * and the questions answered, so the same answers sent again join their run.
 */
export function answerEnvelope (body: ChatBody, caller: ChatCaller, answers: readonly ResumeAnswer[]): ServiceRequest {
  const last = body.messages.at(-1) as SentMessage
  const ids = answers.map((a) => a.interrupt_id).sort().join(',')
  const resume = answers.map(({ interrupt_id: id, value }) => ({ interrupt_id: id, value }))
  return envelopeOf(body, caller, uuidOf('ai-sdk-answer', `${body.id}\u0000${ids}`), { resume }, { [MESSAGE_ID]: last.id })
}
