import { randomUUID } from 'node:crypto'
import { Role, type Message } from '@a2a-js/sdk'
import { ContentTypeNotSupportedError, RequestMalformedError } from '@a2a-js/sdk/errors'
import { bindingEnvelope, type BindingCaller } from '../protocol/binding-envelope.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import { isUuid, uuidOf } from '../protocol/foreign-ids.js'
import { dataPart, textPart } from './parts.js'

/**
 * The run's request id for an A2A message: its `messageId` when that is a UUID, else a UUID made
 * from it, so that a message sent again with the same id is the same run.
 */
export function requestIdOf (messageId: string): string {
  return uuidOf('a2a-message', messageId)
}

/** What the envelope takes from the call, besides the message. */
export interface EnvelopeContext extends BindingCaller {
  /** The session of a message without `contextId` (default: a new one). */
  sessionId?: string
}

/**
 * The CAP payload an A2A message carries: its text parts, joined by blank lines, as `query`; the
 * fields of its data parts (JSON objects) as the rest. File parts are refused (no agent here takes
 * them), as is a data part that is not an object or names `query` beside text parts.
 */
export function payloadOf (message: Message): Record<string, unknown> {
  const texts: string[] = []
  const payload: Record<string, unknown> = {}
  for (const part of message.parts) {
    const content = part.content
    if (content === undefined) throw new RequestMalformedError('A message part has no content')
    if (content.$case === 'text') texts.push(content.value)
    else if (content.$case === 'data') {
      const value: unknown = content.value
      if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new RequestMalformedError('A data part must hold a JSON object: its fields are the agent\'s arguments')
      Object.assign(payload, value)
    } else throw new ContentTypeNotSupportedError(`File parts (${content.$case}) are not supported: send text and data parts`)
  }
  if (texts.length > 0) {
    if ('query' in payload) throw new RequestMalformedError('The message has text parts and a data part with "query": send the query once')
    payload.query = texts.join('\n\n')
  }
  return payload
}

/** The key of the request metadata that keeps an A2A message's own `messageId` (the agent sees it there too). */
export const MESSAGE_ID = 'a2a_message_id'

/**
 * The CAP envelope of an A2A message (the mapping is `docs/a2a.md`): the run's request id
 * from `messageId`, the session from `contextId` (a UUID; a new one when absent), the payload from
 * the parts, and `metadata.capability` (or `metadata.skill`) and `metadata.timeout_ms` as the
 * request's metadata, with the `messageId` as sent ({@link MESSAGE_ID}).
 */
export function envelopeOf (message: Message, context: EnvelopeContext): ServiceRequest {
  if (message.messageId === '') throw new RequestMalformedError('message.messageId is required')
  if (message.role !== Role.ROLE_USER) throw new RequestMalformedError('message.role must be ROLE_USER')
  if (message.contextId !== '' && !isUuid(message.contextId)) {
    throw new RequestMalformedError(`message.contextId "${message.contextId}" is not one this server issued (a UUID): leave it out to start a new context`)
  }
  const sessionId = message.contextId !== '' ? message.contextId.toLowerCase() : context.sessionId ?? randomUUID()
  const meta = message.metadata ?? {}
  const capability: unknown = meta.capability ?? meta.skill
  const timeout: unknown = meta.timeout_ms
  if (capability !== undefined && (typeof capability !== 'string' || capability === '')) throw new RequestMalformedError('message.metadata.capability must be a capability\'s name')
  if (timeout !== undefined && (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1)) throw new RequestMalformedError('message.metadata.timeout_ms must be a positive integer')
  const requestId = requestIdOf(message.messageId)
  // the client's own messageId: the run's request id is a UUID made from it, and the task's history shows the message as sent
  const metadata = { ...(capability !== undefined ? { capability } : {}), ...(timeout !== undefined ? { timeout_ms: timeout } : {}), [MESSAGE_ID]: message.messageId }
  return bindingEnvelope('a2a', context, {
    requestId,
    sessionId,
    payload: payloadOf(message),
    ...(Object.keys(metadata).length > 0 ? { metadata } : {})
  })
}

/** The caller's message, as the task's history shows it: from the envelope the run was started with. */
export function requestMessage (envelope: ServiceRequest): Message {
  const { query, ...rest } = envelope.payload.payload
  const parts = [
    ...(typeof query === 'string' ? [textPart(query)] : []),
    ...(Object.keys(rest).length > 0 || (query !== undefined && typeof query !== 'string') ? [dataPart(typeof query === 'string' ? rest : envelope.payload.payload)] : [])
  ]
  const { [MESSAGE_ID]: messageId, ...metadata }: Record<string, unknown> = envelope.payload.metadata ?? {}
  return {
    messageId: typeof messageId === 'string' ? messageId : envelope.request_id,
    contextId: envelope.context.session_id,
    taskId: envelope.request_id,
    role: Role.ROLE_USER,
    parts,
    metadata: Object.keys(metadata).length > 0 ? metadata : undefined,
    extensions: [],
    referenceTaskIds: []
  }
}
