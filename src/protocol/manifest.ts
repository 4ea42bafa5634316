import { Type, type Static } from 'typebox'
import { DateTime, JsonObject, JsonSchema, Uuid } from './common.js'

const closed = { additionalProperties: false } as const

/** Semantic version 2.0.0. */
export const SemVer = Type.String({
  pattern: '^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(?:-((?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\\.(?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\\+([0-9a-zA-Z-]+(?:\\.[0-9a-zA-Z-]+)*))?$'
})

/** How a capability answers: one JSON document, or an SSE stream of packets (CAP.md §3). */
export const DeliveryMode = Type.Union([Type.Literal('request_response'), Type.Literal('server_sent_events')])
export type DeliveryMode = Static<typeof DeliveryMode>

/** Identity and versioning of an agent. */
export const AgentMetadata = Type.Object({
  /** The id clients put in `context.agent_id`. */
  id: Uuid,
  version: SemVer,
  name: Type.String({ minLength: 1 }),
  author: Type.String({ minLength: 1 }),
  created_at: DateTime,
  requires_auth: Type.Boolean({ default: false })
}, closed)
export type AgentMetadata = Static<typeof AgentMetadata>

/** An intermediate event a capability may produce. */
export const EventSchema = Type.Object({
  name: Type.String(),
  data_schema: JsonSchema
}, closed)

/** One mode of interaction with an agent. */
export const AgentCapability = Type.Object({
  /** Unique within the agent. */
  name: Type.String({ minLength: 1 }),
  type: Type.Union([Type.Literal('atomic'), Type.Literal('streaming')]),
  description: Type.String(),
  interface_id: Type.Optional(Uuid),
  /** JSON Schema of `payload.payload`; the host validates requests against it. Required unless `interface_id`. */
  inputs: Type.Optional(JsonSchema),
  /** JSON Schema of `result()`'s argument. Required unless `interface_id`. */
  outputs: Type.Optional(JsonSchema),
  delivery_mode: DeliveryMode,
  events: Type.Array(EventSchema),
  injected_params: Type.Array(Type.String())
}, closed)
export type AgentCapability = Static<typeof AgentCapability>

/** LLM parameters (wire name `model_config`). */
export const ModelConfig = Type.Object({
  model: Type.String(),
  temperature: Type.Number({ minimum: 0, maximum: 2 }),
  system_prompt: Type.Optional(Type.String())
}, closed)
export type ModelConfig = Static<typeof ModelConfig>

/** How the agent runs. */
export const AgentRuntimeConfig = Type.Object({
  nodes: Type.Array(JsonObject),
  edges: Type.Array(JsonObject),
  model_config: ModelConfig,
  entry_point: Type.Optional(Type.String()),
  system_prompt: Type.Optional(Type.String())
}, closed)

/** What the agent needs from outside. */
export const AgentDependencies = Type.Object({
  tools: Type.Array(JsonObject),
  libraries: Type.Array(Type.String())
}, closed)

/** Governance limits. */
export const PolicyConfig = Type.Object({
  budget_caps: Type.Record(Type.String(), Type.Number()),
  human_in_the_loop: Type.Array(Type.String()),
  allowed_domains: Type.Array(Type.String())
}, closed)

/** Tracing and retention preferences. */
export const ObservabilityConfig = Type.Object({
  trace_level: Type.Union([Type.Literal('full'), Type.Literal('metadata_only'), Type.Literal('none')]),
  retention_policy: Type.String(),
  encryption_key_id: Type.Optional(Type.String())
}, closed)

/** A served agent manifest (CAP.md §7): what `GET /v1/agents` returns. No extra keys at any level. */
export const AgentDefinition = Type.Object({
  metadata: AgentMetadata,
  capabilities: Type.Array(AgentCapability, { minItems: 1 }),
  config: AgentRuntimeConfig,
  dependencies: AgentDependencies,
  policy: Type.Optional(PolicyConfig),
  observability: Type.Optional(ObservabilityConfig),
  /** Host-specific additions live here, never as new top-level keys. */
  custom_metadata: Type.Optional(JsonObject),
  status: Type.Union([Type.Literal('draft'), Type.Literal('published')]),
  /** SHA-256 of the agent's source, 64 hex characters; required when published. */
  integrity_hash: Type.Optional(Type.String({ pattern: '^[a-fA-F0-9]{64}$' }))
}, { ...closed, title: 'AgentDefinition' })
export type AgentDefinition = Static<typeof AgentDefinition>

/** `GET /v1/agents`. */
export const AgentList = Type.Object({
  agents: Type.Array(AgentDefinition)
}, { ...closed, title: 'AgentList' })
