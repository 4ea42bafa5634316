import type { TSchema } from 'typebox'
import { AgentMetrics } from './agent-metrics.js'
import { PlanCreated, PlanProgress } from './plans.js'
import { BusDeadLetter, BusDeadLetterPage, BusEventPage, BusEventRecord, BusPublished, BusSubscriptionRecord } from './bus.js'
import { Backend, BackendList, BackendUsage } from './backends.js'
import { BudgetUsage, BudgetUsageList } from './budgets.js'
import { CancelAccepted } from './cancel.js'
import {
  A2ARequest, A2AResponse, AgentInput, AgentOutput, AgentStatus, Artifact, ChangedFile, ContractEvent, DiffStats, EvaluationReport, EvaluatorAgentInput,
  EvaluatorAgentOutput, EventPublication, EventSubscription, EventVisibility, ExecutionPlan, Insight, Metric, PlannerAgentInput, PlannerAgentOutput, PlanTask,
  RefactorAgentInput, RefactorAgentOutput, ResearchAgentInput, ResearchAgentOutput, ToolCall, ToolResponse
} from './contract.js'
import { AgentRequest, ClientCapabilities, RequestMetadata, ServiceRequest, SessionContext, TraceContext, UserContext } from './envelope.js'
import { StoredEvent } from './events.js'
import {
  AgentCapability, AgentDefinition, AgentDependencies, AgentList, AgentMetadata, AgentRuntimeConfig, DeliveryMode, EventSchema,
  ModelConfig, ObservabilityConfig, PolicyConfig
} from './manifest.js'
import {
  Citation, CitationBlockEvent, ClosePacket, CloseReason, DataEvent, DeltaPacket, ErrorPacket, EventPacket, EventPayload,
  MarkdownBlockEvent, MediaCarouselEvent, MediaItem, PresentationEvent, ProgressIndicatorEvent, ResultEvent, StreamError,
  StreamErrorSeverity, StreamPacket, StreamStartEvent, ThoughtTraceEvent, UsageEvent
} from './packets.js'
import { AuditCheckpoint, AuditPage, AuditRow, AuditVerification, EventPage, HistoryPage, Interaction } from './records.js'
import { ErrorBody, HealthCheckResponse, ResponseMetrics, ServiceResponse, Transcript, TranscriptStream, Usage } from './response.js'
import { CreateTasksBody, NewTaskBody, Task, TaskApproval, TaskApprovalAnswer, TaskList, TaskStatus, TaskWarning } from './tasks.js'

/**
 * The named schemas of the OpenAPI document (`#/components/schemas/<name>`), so that generated
 * clients get named types. The routes keep validating and serializing with the TypeBox schemas
 * themselves; only the document refers to these names.
 */
export const COMPONENT_SCHEMAS = {
  ServiceRequest,
  SessionContext,
  UserContext,
  TraceContext,
  AgentRequest,
  RequestMetadata,
  ClientCapabilities,
  ServiceResponse,
  ResponseMetrics,
  TokenUsage: Usage,
  Transcript,
  TranscriptStream,
  CancelAccepted,
  BudgetUsage,
  BudgetUsageList,
  StreamPacket,
  DeltaPacket,
  EventPacket,
  ErrorPacket,
  ClosePacket,
  CloseReason,
  StreamError,
  StreamErrorSeverity,
  EventPayload,
  PresentationEvent,
  ThoughtTraceEvent,
  MarkdownBlockEvent,
  CitationBlockEvent,
  Citation,
  ProgressIndicatorEvent,
  MediaCarouselEvent,
  MediaItem,
  DataEvent,
  ResultEvent,
  StreamStartEvent,
  UsageEvent,
  ErrorBody,
  HealthCheckResponse,
  AgentList,
  AgentDefinition,
  AgentMetrics,
  AgentMetadata,
  AgentCapability,
  CapabilityEvent: EventSchema,
  DeliveryMode,
  AgentRuntimeConfig,
  ModelConfig,
  AgentDependencies,
  PolicyConfig,
  ObservabilityConfig,
  BackendList,
  Backend,
  BackendUsage,
  HistoryPage,
  Interaction,
  EventPage,
  StoredEvent,
  AuditPage,
  AuditRow,
  AuditVerification,
  AuditCheckpoint,
  CreateTasks: CreateTasksBody,
  NewTask: NewTaskBody,
  TaskList,
  Task,
  TaskStatus,
  TaskWarning,
  TaskApproval,
  TaskApprovalAnswer,
  AgentInput,
  AgentOutput,
  AgentStatus,
  Artifact,
  ContractEvent,
  EventVisibility,
  Insight,
  ResearchAgentInput,
  ResearchAgentOutput,
  PlanTask,
  ExecutionPlan,
  PlannerAgentInput,
  PlannerAgentOutput,
  ChangedFile,
  DiffStats,
  RefactorAgentInput,
  RefactorAgentOutput,
  Metric,
  EvaluationReport,
  EvaluatorAgentInput,
  EvaluatorAgentOutput,
  ToolCall,
  ToolResponse,
  A2ARequest,
  A2AResponse,
  EventSubscription,
  EventPublication,
  PlanCreated,
  PlanProgress,
  BusEvent: BusEventRecord,
  BusPublished,
  BusEventPage,
  BusSubscription: BusSubscriptionRecord,
  BusDeadLetter,
  BusDeadLetterPage
} as const satisfies Record<string, TSchema>

/** The name of a schema in `#/components/schemas`. */
export type ComponentName = keyof typeof COMPONENT_SCHEMAS

/** A JSON object of the document. */
export type JsonObject = Record<string, unknown>

/** The `$ref` to a named schema. */
export function componentRef (name: ComponentName): { $ref: string } {
  return { $ref: `#/components/schemas/${name}` }
}

// components are recognised by their JSON text, wherever TypeBox copied them (Type.Optional does)
const byJson = new Map<string, ComponentName>()
for (const [name, schema] of Object.entries(COMPONENT_SCHEMAS) as Array<[ComponentName, TSchema]>) {
  const json = JSON.stringify(schema)
  const twin = byJson.get(json)
  if (twin !== undefined) throw new Error(`the components ${twin} and ${name} are the same schema: a $ref could not tell them apart`)
  byJson.set(json, name)
}

// the keywords whose values are schemas; every other value is data, copied as it is
const SCHEMA_KEYWORDS = new Set(['items', 'additionalItems', 'additionalProperties', 'unevaluatedItems', 'unevaluatedProperties', 'contains', 'propertyNames', 'not', 'if', 'then', 'else'])
const SCHEMA_LIST_KEYWORDS = new Set(['allOf', 'anyOf', 'oneOf', 'prefixItems'])
const SCHEMA_MAP_KEYWORDS = new Set(['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'])

function refer (node: unknown, self: ComponentName | undefined, root: boolean): unknown {
  if (typeof node !== 'object' || node === null) return node
  if (Array.isArray(node)) return node.map((item) => refer(item, self, false))
  const name = byJson.get(JSON.stringify(node))
  if (name !== undefined && !(root && name === self)) return componentRef(name)
  const out: JsonObject = {}
  for (const [key, value] of Object.entries(node)) {
    if (SCHEMA_KEYWORDS.has(key)) out[key] = refer(value, self, false)
    else if (SCHEMA_LIST_KEYWORDS.has(key) && Array.isArray(value)) out[key] = value.map((item) => refer(item, self, false))
    else if (SCHEMA_MAP_KEYWORDS.has(key) && typeof value === 'object' && value !== null) {
      out[key] = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, refer(v, self, false)]))
    } else out[key] = value
  }
  return out
}

/**
 * A plain JSON copy of `schema` as the document shows it: every named component inside it (and
 * the schema itself, unless it is the component `self` being defined) becomes a `$ref`.
 */
export function documentSchema (schema: unknown, self?: ComponentName): JsonObject {
  return refer(JSON.parse(JSON.stringify(schema)) as unknown, self, true) as JsonObject
}

/** `components.schemas` of the served document: every named schema, its own parts as `$ref`s. */
export function generateOpenApiComponents (): Record<ComponentName, JsonObject> {
  return Object.fromEntries(Object.keys(COMPONENT_SCHEMAS).map((name) => [name, documentSchema(COMPONENT_SCHEMAS[name as ComponentName], name as ComponentName)])) as Record<ComponentName, JsonObject>
}
