import type { ElicitRequestFormParams } from '@modelcontextprotocol/sdk/types.js'
import type { Interrupt } from '../protocol/interrupts.js'

/** An `elicitation/create` form: MCP's restricted JSON Schema (an object of primitive properties, no nesting). */
export type RequestedSchema = ElicitRequestFormParams['requestedSchema']

/** One interrupt as an elicitation (form mode), and how its accepted content becomes the interrupt's answer. */
export interface ElicitationForm {
  message: string
  requestedSchema: RequestedSchema
  /** The `value` of the interrupt's resume answer, from the content of an `accept`. */
  answer: (content: Record<string, unknown>) => unknown
}

/** Whether a schema is one MCP lets a form ask for (the SDK's `requestedSchema` shape): given by the caller, which has the SDK loaded. */
export type FormFits = (schema: Record<string, unknown>) => boolean

/** An approval: a yes or no, and a comment. */
const APPROVAL: RequestedSchema = {
  type: 'object',
  properties: {
    approved: { type: 'boolean', title: 'Approve' },
    comment: { type: 'string', title: 'Comment' }
  },
  required: ['approved']
}

/** A form of one field, `value`. */
function single (value: Record<string, unknown>): RequestedSchema {
  return { type: 'object', properties: { value }, required: ['value'] } as unknown as RequestedSchema
}

/** JSON text as the value it stands for; text that is not JSON is taken as the string it is. */
function jsonOrText (text: unknown): unknown {
  if (typeof text !== 'string') return text
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/**
 * The elicitation that asks `interrupt` (the person's answer in the form the engine checks):
 * - an approval: `{ approved: boolean (title "Approve"), comment?: string }`, answered as `{ approved, comment? }`
 *   (an empty comment left out); what it approves (`call`) is added to the message;
 * - an input whose schema is an object of primitive properties (one that `fits`): that schema as it
 *   is, answered with the content;
 * - an input with any other schema: the schema wrapped as the one field `value`, answered with it;
 *   a schema MCP's forms cannot show (nested objects, arrays of objects, unsupported formats) is a
 *   `value` string holding JSON (text that is not JSON is the string itself);
 * - an input with no schema (any value): a `value` string.
 */
export function elicitationForm (interrupt: Interrupt, fits: FormFits): ElicitationForm {
  const { message, schema } = interrupt
  if (interrupt.kind === 'approval') {
    return {
      message: interrupt.call === undefined ? message : `${message}\n\n${JSON.stringify(interrupt.call)}`,
      requestedSchema: APPROVAL,
      answer: (content) => ({ approved: content.approved === true, ...(typeof content.comment === 'string' && content.comment !== '' ? { comment: content.comment } : {}) })
    }
  }
  const field = (content: Record<string, unknown>): unknown => content.value
  if (schema === undefined) return { message, requestedSchema: single({ type: 'string', title: 'Answer' }), answer: field }
  if (schema.type === 'object' && fits(schema)) return { message, requestedSchema: schema as RequestedSchema, answer: (content) => content }
  const wrapped = single({ title: 'Answer', ...schema })
  if (fits(wrapped as Record<string, unknown>)) return { message, requestedSchema: wrapped, answer: field }
  return {
    message,
    requestedSchema: single({ type: 'string', title: 'Answer (JSON)', description: `A JSON value matching this JSON Schema: ${JSON.stringify(schema)}` }),
    answer: (content) => jsonOrText(content.value)
  }
}
