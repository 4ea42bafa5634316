import { Type, type Static } from 'typebox'

const closed = { additionalProperties: false } as const

/** What a backend has used over the sessions this process holds. */
export const BackendUsage = Type.Object({
  input: Type.Integer({ minimum: 0, description: 'input tokens' }),
  output: Type.Integer({ minimum: 0, description: 'output tokens' }),
  cost: Type.Number({ minimum: 0, description: 'USD, from LLM_PRICES' }),
  turns: Type.Integer({ minimum: 0, description: 'model calls' }),
  sessions: Type.Integer({ minimum: 0, description: 'sessions held by this process' })
}, closed)
export type BackendUsage = Static<typeof BackendUsage>

/** An agent backend (LLM provider or local agent): whether it can be used here, and its usage. */
export const Backend = Type.Object({
  name: Type.String(),
  aliases: Type.Array(Type.String()),
  transport: Type.Union([Type.Literal('llm'), Type.Literal('local_agent')]),
  available: Type.Boolean(),
  reason: Type.Optional(Type.String({ description: 'when not available: the settings to set' })),
  provider: Type.Optional(Type.String()),
  model: Type.Optional(Type.String()),
  usage: Type.Optional(BackendUsage)
}, { ...closed, title: 'Backend' })
export type Backend = Static<typeof Backend>

/** `GET /v1/backends`. */
export const BackendList = Type.Object({ backends: Type.Array(Backend) }, closed)
export type BackendList = Static<typeof BackendList>
