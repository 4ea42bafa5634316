import { Role, type Message, type Part } from '@a2a-js/sdk'

/** A text part. */
export function textPart (text: string): Part {
  return { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }
}

/** A structured data part (any JSON value). */
export function dataPart (data: unknown): Part {
  return { content: { $case: 'data', value: data }, metadata: undefined, filename: '', mediaType: '' }
}

/** A part that points at a file by its URL. */
export function urlPart (url: string, mediaType: string, metadata?: Record<string, unknown>): Part {
  return { content: { $case: 'url', value: url }, metadata, filename: '', mediaType }
}

/** A message from the agent (in a status update), with its parts and metadata. */
export function agentMessage (ids: { taskId: string, contextId: string, messageId: string }, parts: Part[], metadata?: Record<string, unknown>): Message {
  return { ...ids, role: Role.ROLE_AGENT, parts, metadata, extensions: [], referenceTaskIds: [] }
}
