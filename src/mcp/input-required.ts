import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import type { JsonObject } from '../agents/contract.js'
import type { Interrupt } from '../protocol/interrupts.js'

/** The `_meta` key of a tool result whose run stopped to ask: its open questions (the INTERRUPT event's). */
export const META_INTERRUPTS = 'agent-host/interrupts'

/** What the answer to one question must be, in words. */
function expected (interrupt: Interrupt): string {
  if (interrupt.kind === 'approval') return '{"approved": true or false, "comment": "optional text"}'
  return interrupt.schema === undefined ? 'any JSON value' : `a JSON value matching the JSON Schema ${JSON.stringify(interrupt.schema)}`
}

/** The text that tells a model (or a person) what the run asks and how to answer it. */
export function inputRequiredText (tool: string, interrupts: readonly Interrupt[]): string {
  const questions = interrupts.map((i, n) => {
    const what = i.kind === 'approval' ? 'approval' : i.reason === 'auth' ? 'credentials' : 'input'
    const call = i.call !== undefined ? ` (of ${JSON.stringify(i.call)})` : ''
    return `${n + 1}. [${what}] ${i.message}${call}\n   interrupt_id: ${i.id}\n   answer: ${expected(i)}\n   expires: ${i.expires_at}`
  })
  const example = JSON.stringify({ resume: interrupts.map((i) => ({ interrupt_id: i.id, value: i.kind === 'approval' ? { approved: true } : '<answer>' })) })
  return [
    `Input required: the run stopped to ask ${interrupts.length === 1 ? 'a question' : `${interrupts.length} questions`} and waits for the answer${interrupts.length === 1 ? '' : 's'}.`,
    ...questions,
    `To answer, call the tool "${tool}" again in this MCP session with the arguments ${example}` +
      ' (answers may be given together or one at a time); the run then goes on, and that call returns its result.'
  ].join('\n')
}

/**
 * The result of a call whose run stopped to ask, for a client that cannot take an elicitation (or
 * for questions a form may not ask: credentials): the text the run wrote, then the questions and how
 * to answer them (the same tool called again, in the same MCP session, with `{ resume: [...] }`). The
 * questions are also `structuredContent: { interrupts }` and `_meta["agent-host/interrupts"]`. A tool
 * with an `outputSchema` (`structured`) cannot return other structured content without its client
 * refusing the result, so its questions are an error result (`isError`) the model still reads, with
 * the questions in `_meta` only.
 */
export function inputRequiredResult (tool: string, interrupts: Interrupt[], content: CallToolResult['content'], meta: JsonObject, structured: boolean): CallToolResult {
  const text = inputRequiredText(tool, interrupts)
  const _meta = { ...meta, [META_INTERRUPTS]: interrupts }
  if (structured) return { content: [...content, { type: 'text', text }], isError: true, _meta }
  return { content: [...content, { type: 'text', text }], structuredContent: { interrupts }, _meta }
}
