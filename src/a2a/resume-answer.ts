import type { Message } from '@a2a-js/sdk'
import { ContentTypeNotSupportedError, RequestMalformedError } from '@a2a-js/sdk/errors'
import type { ResumeAnswer } from '../protocol/interrupts.js'
import type { InterruptRecord } from '../storage/interrupts.js'

const YES = new Set(['yes', 'y', 'approve', 'approved'])
const NO = new Set(['no', 'n', 'reject', 'rejected'])

/** The first word of an approval's text, and what follows it (after a comma, colon, dash...): its comment. */
const APPROVAL_TEXT = /^([a-z]+)(?:[\s,.:;!-]+([\s\S]*))?$/i

/** The one string property an object schema requires, if that is all it requires. */
function soleStringField (schema: Record<string, unknown>): string | undefined {
  if (schema.type !== 'object' || !Array.isArray(schema.required) || schema.required.length !== 1) return undefined
  const name = schema.required[0] as unknown
  const property = (schema.properties as Record<string, { type?: unknown }> | undefined)?.[String(name)]
  return typeof name === 'string' && property?.type === 'string' ? name : undefined
}

/**
 * What a plain text answers: for an approval, yes or no (`yes`, `approve`, `approved`; `no`,
 * `reject`, `rejected`; case aside), with what follows the word as its comment (`no: too dear`);
 * for an input whose schema is absent or a string, the text; for an object schema that requires
 * exactly one string property, `{ property: text }`.
 * @throws RequestMalformedError when the text cannot be the answer (a data part can)
 */
export function textValue (interrupt: Pick<InterruptRecord, 'id' | 'kind' | 'schema'>, text: string): unknown {
  if (interrupt.kind === 'approval') {
    const match = APPROVAL_TEXT.exec(text.trim())
    const word = match?.[1]?.toLowerCase() ?? ''
    if (match === null || (!YES.has(word) && !NO.has(word))) {
      throw new RequestMalformedError(`Interrupt ${interrupt.id} asks for an approval: answer "yes" or "no" (a comment may follow: "no: too expensive"), or send a data part { "approved": true|false, "comment"?: "..." }`)
    }
    const comment = match[2]?.trim() ?? ''
    return { approved: YES.has(word), ...(comment !== '' ? { comment } : {}) }
  }
  const schema = interrupt.schema
  if (schema === undefined || schema.type === 'string') return text
  const field = soleStringField(schema)
  if (field !== undefined) return { [field]: text }
  throw new RequestMalformedError(`Interrupt ${interrupt.id} asks for a value matching its schema (in the task's status message), which a text cannot be: send it in a data part`)
}

/**
 * The answers an A2A message to a task that waits carries, as CAP's `payload.resume` (the engine
 * checks them: ids, expiry, each value against its question). In order of preference:
 *
 * - a data part `{ resume: [{ interrupt_id, value }, ...] }`: as it is;
 * - data parts `{ interrupt_id, value }`: one answer each;
 * - with exactly one question open: a data part, the value itself (an approval's
 *   `{ approved, comment? }`), or the text parts, joined by blank lines, read by {@link textValue}.
 * @throws RequestMalformedError when the message answers nothing, or is ambiguous; ContentTypeNotSupportedError for a file part
 */
export function resumeFromMessage (message: Message, open: ReadonlyArray<Pick<InterruptRecord, 'id' | 'kind' | 'schema'>>): ResumeAnswer[] {
  const texts: string[] = []
  const data: unknown[] = []
  for (const part of message.parts) {
    const content = part.content
    if (content === undefined) throw new RequestMalformedError('A message part has no content')
    if (content.$case === 'text') texts.push(content.value)
    else if (content.$case === 'data') data.push(content.value)
    else throw new ContentTypeNotSupportedError(`File parts (${content.$case}) are not supported: answer with text or data parts`)
  }
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)
  const lists = data.filter((v) => isObject(v) && 'resume' in v)
  if (lists.length > 0) {
    if (lists.length > 1 || data.length > 1 || texts.length > 0) throw new RequestMalformedError('A message with a data part { resume } holds that part only: put every answer in its list')
    return (lists[0] as { resume: ResumeAnswer[] }).resume
  }
  const items = data.filter((v) => isObject(v) && 'interrupt_id' in v) as Array<Record<string, unknown>>
  if (items.length > 0) {
    if (items.length !== data.length || texts.length > 0) throw new RequestMalformedError('A message that answers with data parts { interrupt_id, value } holds only such parts')
    return items.map((item) => ({ interrupt_id: item.interrupt_id, value: item.value }) as ResumeAnswer)
  }
  if (open.length !== 1) {
    throw new RequestMalformedError(`The task waits for ${open.length} answers: send a data part { "resume": [{ "interrupt_id": ..., "value": ... }] } (the ids are in the task's status message)`)
  }
  const interrupt = open[0] as Pick<InterruptRecord, 'id' | 'kind' | 'schema'>
  if (data.length + (texts.length > 0 ? 1 : 0) !== 1) {
    throw new RequestMalformedError(data.length + texts.length === 0 ? 'The message answers nothing: send the answer as text or as a data part' : 'Send the answer once: one data part, or text')
  }
  return [{ interrupt_id: interrupt.id, value: data.length === 1 ? data[0] : textValue(interrupt, texts.join('\n\n')) }]
}
