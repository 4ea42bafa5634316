import type { UIMessageChunk } from 'ai'
import type { Interrupt, ResumeAnswer } from '../protocol/interrupts.js'
import type { InterruptRecord } from '../storage/interrupts.js'

/**
 * Human in the loop on the AI SDK (the mapping is `docs/ai-sdk.md`): a CAP interrupt is a tool call
 * the client answers, its `toolCallId` the interrupt's id. An `approval` is the tool `approval`
 * with a tool approval request (`approvalId` the interrupt's id too), answered with `useChat`'s
 * `addToolApprovalResponse`; an `input` is the tool `input`, answered with `addToolOutput`. The
 * next request of the chat (`sendMessage()`) carries the answered parts; they become CAP's
 * `payload.resume`.
 */

/** The tool name of each interrupt kind (the part's type is `tool-<name>`). */
export const INTERRUPT_TOOLS = { approval: 'approval', input: 'input' } as const

/** What the tool call's `input` holds: the question, for a person to read and the front end to render. */
export interface InterruptToolInput {
  message: string
  /** The JSON Schema the answer (the tool's output) must match: an `input`'s. */
  schema?: Record<string, unknown>
  /** What an approval is of: a tool call `{ tool, action, args }`, or an A2A call. */
  call?: Record<string, unknown>
  reason?: 'auth'
  expires_at: string
}

/** The chunks of an `INTERRUPT` event: one tool call per question, and a tool approval request for each approval. */
export function interruptChunks (interrupts: readonly Interrupt[]): UIMessageChunk[] {
  const chunks: UIMessageChunk[] = []
  for (const interrupt of interrupts) {
    const input: InterruptToolInput = {
      message: interrupt.message,
      ...(interrupt.schema !== undefined ? { schema: interrupt.schema } : {}),
      ...(interrupt.call !== undefined ? { call: interrupt.call } : {}),
      ...(interrupt.reason !== undefined ? { reason: interrupt.reason } : {}),
      expires_at: interrupt.expires_at
    }
    chunks.push({ type: 'tool-input-available', toolCallId: interrupt.id, toolName: INTERRUPT_TOOLS[interrupt.kind], title: interrupt.message, input })
    if (interrupt.kind === 'approval') chunks.push({ type: 'tool-approval-request', approvalId: interrupt.id, toolCallId: interrupt.id })
  }
  return chunks
}

/** One answer a run carried, with the kind of the question it answers. */
export interface KindedAnswer extends ResumeAnswer {
  kind: InterruptRecord['kind']
}

/**
 * The chunks that settle the answered questions' tool parts, first in the run that goes on: a
 * rejected approval is `tool-output-denied`; any other answer the tool's output.
 */
export function answerChunks (answers: readonly KindedAnswer[]): UIMessageChunk[] {
  return answers.map((answer) => answer.kind === 'approval' && (answer.value as { approved?: unknown } | null)?.approved === false
    ? { type: 'tool-output-denied', toolCallId: answer.interrupt_id }
    : { type: 'tool-output-available', toolCallId: answer.interrupt_id, output: answer.value })
}

/** A UI message part as the transport sends it (only what this binding reads is typed). */
export interface SentPart {
  type: string
  toolCallId?: unknown
  state?: unknown
  output?: unknown
  approval?: unknown
}

/**
 * The answers the chat's last message carries to the open questions `open`: each tool part of one
 * of them that the client settled, `approval-responded` (its approval `{ approved, comment? }`,
 * the reason as the comment) or `output-available` (its output, the input's value). Parts of other
 * tools, and questions not answered yet, are left out.
 */
export function answersIn (parts: readonly SentPart[], open: ReadonlyArray<Pick<InterruptRecord, 'id' | 'kind'>>): KindedAnswer[] {
  const kinds = new Map(open.map((interrupt) => [interrupt.id, interrupt.kind]))
  const answers: KindedAnswer[] = []
  for (const part of parts) {
    if (!part.type.startsWith('tool-') && part.type !== 'dynamic-tool') continue
    const id = typeof part.toolCallId === 'string' ? part.toolCallId.toLowerCase() : ''
    const kind = kinds.get(id)
    if (kind === undefined) continue
    if (part.state === 'approval-responded') {
      const approval = part.approval as { approved?: unknown, reason?: unknown } | undefined
      const reason = typeof approval?.reason === 'string' && approval.reason !== '' ? { comment: approval.reason } : {}
      answers.push({ interrupt_id: id, kind, value: { approved: approval?.approved, ...reason } })
    } else if (part.state === 'output-available') {
      answers.push({ interrupt_id: id, kind, value: part.output })
    }
  }
  return answers
}
