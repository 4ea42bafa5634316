import { Type, type Static } from 'typebox'
import { DateTime, JsonObject, Uuid } from './common.js'

const closed = { additionalProperties: false } as const

/** One open question of a run, as every protocol shows it (CAP's `INTERRUPT` event and JSON answer, A2A's status message, MCP's elicitation). */
export const Interrupt = Type.Object({
  id: Uuid,
  kind: Type.Union([Type.Literal('input'), Type.Literal('approval')], { description: '`input`: answer with a value matching `schema`; `approval`: answer with `{ approved, comment? }`' }),
  message: Type.String({ description: 'what the agent asks, for a person to read' }),
  schema: Type.Optional(JsonObject),
  /** What an approval is of: a tool call `{ tool, action, args }`, or an A2A call `{ agent, capability, payload }`. */
  call: Type.Optional(JsonObject),
  reason: Type.Optional(Type.Literal('auth', { description: 'the agent asks for credentials (A2A shows it as `auth-required`)' })),
  expires_at: DateTime
}, { ...closed, title: 'Interrupt' })
export type Interrupt = Static<typeof Interrupt>

/** The payload of the `INTERRUPT` EVENT an interrupted run sends last before its CLOSE `"input_required"`. */
export const InterruptEvent = Type.Object({
  type: Type.Literal('INTERRUPT'),
  interrupts: Type.Array(Interrupt, { minItems: 1 })
}, { ...closed, title: 'InterruptEvent' })
export type InterruptEvent = Static<typeof InterruptEvent>

/** An approval's answer. */
export const ApprovalValue = Type.Object({
  approved: Type.Boolean(),
  comment: Type.Optional(Type.String({ maxLength: 4000 }))
}, { ...closed, title: 'ApprovalValue' })
export type ApprovalValue = Static<typeof ApprovalValue>

/** One answer in a resume request's `payload.payload.resume`. */
export const ResumeAnswer = Type.Object({
  interrupt_id: Uuid,
  value: Type.Unknown({ description: 'the input (matching the interrupt\'s schema), or `{ approved, comment? }` for an approval' })
}, { ...closed, title: 'ResumeAnswer' })
export type ResumeAnswer = Static<typeof ResumeAnswer>
