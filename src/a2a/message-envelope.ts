import { createHash, randomUUID } from 'node:crypto'
import { Role, type Message } from '@a2a-js/sdk'
import { ContentTypeNotSupportedError, RequestMalformedError } from '@a2a-js/sdk/errors'
import type { ServiceRequest } from '../protocol/envelope.js'
import { dataPart, textPart } from './parts.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Whether `id` is a UUID (the shape CAP's ids have). */
export function isUuid (id: string): boolean {
  return UUID.test(id)
}

/**
 * The run's request id for an A2A message: its `messageId` when that is a UUID, else a UUID made
 * from it (a SHA-256), so that a message sent again with the same id is the same run.
 */
export function requestIdOf (messageId: string): string {
  if (isUuid(messageId)) return messageId.toLowerCase()
  const hex = createHash('sha256').update(`a2a-message\u0000${messageId}`).digest('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-5${hex.slice(13, 16)}-${(8 + (parseInt(hex[16] as string, 16) & 3)).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`
}

/** A W3C trace id (32 hex digits) as the UUID the envelope carries. */
export function traceUuid (traceId: string): string {
  return `${traceId.slice(0, 8)}-${traceId.slice(8, 12)}-${traceId.slice(12, 16)}-${traceId.slice(16, 20)}-${traceId.slice(20, 32)}`
}

/** What the envelope takes from the call, besides the message. */
export interface EnvelopeContext {
  agentId: string
  /** Who is calling (the principal's id): the envelope's `user.user_id`. */
  userId: string
  /** The request's W3C trace id, so the run is in the response's trace. */
  traceId: string
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
 * The CAP envelope of an A2A message (the mapping is `docs/a2a-and-mcp.md`): the run's request id
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
  return {
    request_id: requestId,
    context: {
      session_id: sessionId,
      agent_id: context.agentId,
      user: { user_id: context.userId, tier: 'a2a', locale: 'en' },
      trace: { trace_id: traceUuid(context.traceId), span_id: randomUUID() },
      permissions: [],
      created_at: new Date().toISOString()
    },
    payload: {
      session_id: sessionId,
      payload: payloadOf(message),
      request_id: requestId,
      ...(Object.keys(metadata).length > 0 ? { metadata } : {})
    }
  } as ServiceRequest
}

/** Whether two envelopes ask the same thing of the same agent (everything but their time and trace). */
export function sameAsk (a: ServiceRequest, b: ServiceRequest): boolean {
  const ask = (e: ServiceRequest): string => JSON.stringify([e.context.agent_id, e.context.session_id, e.payload.payload, e.payload.metadata ?? {}])
  return ask(a) === ask(b)
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
