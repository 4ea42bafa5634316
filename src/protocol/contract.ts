import { Type, type Static } from 'typebox'
import { JsonObject } from './common.js'

// The agent contracts of seed 003 ("Agent Contracts & Interfaces"): what a contract agent takes
// and gives, its role contracts, tool and external-agent calls, and the event bus. Field names are
// the seed's. Objects are closed except where the seed leaves a dictionary open (payload, context,
// constraints, metadata, data).

const closed = { additionalProperties: false } as const
const Id = Type.String({ minLength: 1, maxLength: 256 })
const NumberMap = Type.Record(Type.String(), Type.Number())

/** How a contract run ended: done, try again later (with backoff), or give up. */
export const AgentStatus = Type.Union([Type.Literal('ok'), Type.Literal('retry'), Type.Literal('fail')], { title: 'AgentStatus' })
export type AgentStatus = Static<typeof AgentStatus>

/** Who may see a contract event: the host and its agents only, or external (A2A) consumers too. */
export const EventVisibility = Type.Union([Type.Literal('internal'), Type.Literal('a2a')], { title: 'EventVisibility' })

/** What a contract agent is given. `task_id` makes a call idempotent. */
export const AgentInput = Type.Object({
  /** What is asked: `research`, `plan`, `code`, `evaluate`, ... */
  intent: Type.String({ minLength: 1, maxLength: 128 }),
  task_id: Id,
  payload: JsonObject,
  /** Repository, branch, user, trace: whatever the caller knows. */
  context: Type.Optional(JsonObject),
  /** Time (`timeout`, seconds), cost and quality limits; `retry_policy`. */
  constraints: Type.Optional(JsonObject)
}, { ...closed, title: 'AgentInput' })
export type AgentInput = Static<typeof AgentInput>

/** Something a contract agent produced: a diff, a file, a report, a pull request, a metric. */
export const Artifact = Type.Object({
  kind: Type.String({ minLength: 1, maxLength: 64 }),
  /** A path or a URL. */
  ref: Type.String({ minLength: 1, maxLength: 2048 }),
  content: Type.Optional(Type.Unknown()),
  metadata: Type.Optional(JsonObject)
}, { ...closed, title: 'Artifact' })
export type Artifact = Static<typeof Artifact>

/** An event for the bus: `key` deduplicates it within its time to live. */
export const ContractEvent = Type.Object({
  /** Dotted, e.g. `code.patch.ready`, `research.complete`. */
  type: Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$' }),
  key: Type.String({ minLength: 1, maxLength: 512 }),
  data: Type.Unknown(),
  visibility: Type.Optional(EventVisibility)
}, { ...closed, title: 'ContractEvent' })
export type ContractEvent = Static<typeof ContractEvent>

/** What a contract agent gives back. */
export const AgentOutput = Type.Object({
  task_id: Id,
  status: AgentStatus,
  artifacts: Type.Optional(Type.Array(Artifact, { maxItems: 1000 })),
  metrics: Type.Optional(NumberMap),
  events: Type.Optional(Type.Array(ContractEvent, { maxItems: 1000 })),
  /** Tasks to run after this one (in the task graph: its children). */
  next_tasks: Type.Optional(Type.Array(JsonObject, { maxItems: 1000 })),
  error: Type.Optional(Type.String({ maxLength: 10_000 }))
}, { ...closed, title: 'AgentOutput' })
export type AgentOutput = Static<typeof AgentOutput>

// --- role contracts ---

const Severity = Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high'), Type.Literal('critical')])

/** One improvement opportunity found by research. */
export const Insight = Type.Object({
  id: Id,
  /** `docstring`, `test`, `complexity`, `security`, `performance`, ... */
  type: Type.String({ minLength: 1, maxLength: 64 }),
  severity: Severity,
  /** `path:line`. */
  location: Type.String({ minLength: 1, maxLength: 2048 }),
  description: Type.String({ maxLength: 10_000 }),
  suggested_fix: Type.Union([Type.String({ maxLength: 10_000 }), Type.Null()]),
  estimated_hours: Type.Number({ minimum: 0 }),
  priority_score: Type.Number({ minimum: 0, maximum: 1 }),
  tags: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 64 }))
}, { ...closed, title: 'Insight' })
export type Insight = Static<typeof Insight>

export const ResearchAgentInput = Type.Object({
  target_path: Type.String({ minLength: 1, maxLength: 4096 }),
  focus_areas: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 32, default: ['documentation', 'testing', 'complexity', 'security'] })),
  depth: Type.Optional(Type.Union([Type.Literal('shallow'), Type.Literal('deep'), Type.Literal('exhaustive')], { default: 'shallow' })),
  patterns_path: Type.Optional(Type.String({ maxLength: 4096 }))
}, { ...closed, title: 'ResearchAgentInput' })
export type ResearchAgentInput = Static<typeof ResearchAgentInput>

export const ResearchAgentOutput = Type.Object({
  insights: Type.Array(Insight),
  summary: Type.String(),
  total_opportunities: Type.Integer({ minimum: 0 }),
  estimated_effort_hours: Type.Number({ minimum: 0 }),
  /** Severity → the ids of its insights. */
  priority_matrix: Type.Record(Type.String(), Type.Array(Type.String()))
}, { ...closed, title: 'ResearchAgentOutput' })
export type ResearchAgentOutput = Static<typeof ResearchAgentOutput>

/** One executable task of a plan (the seed's `Task`; the task graph's node is `Task`). */
export const PlanTask = Type.Object({
  id: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$' }),
  /** `code`, `test`, `document`, `refactor`, ... */
  type: Type.String({ minLength: 1, maxLength: 64 }),
  description: Type.String({ maxLength: 10_000 }),
  estimated_hours: Type.Number({ minimum: 0 }),
  priority: Type.Integer({ minimum: 1, maximum: 10 }),
  /** The agent (type, name or id) that will execute it. */
  assigned_agent: Type.String({ minLength: 1, maxLength: 256 }),
  input_artifacts: Type.Array(Type.String({ maxLength: 2048 })),
  output_artifacts: Type.Array(Type.String({ maxLength: 2048 })),
  success_criteria: JsonObject,
  /** `max_attempts`, `backoff_ms`, ... */
  retry_policy: Type.Optional(JsonObject)
}, { ...closed, title: 'PlanTask' })
export type PlanTask = Static<typeof PlanTask>

/** A plan: tasks and what each depends on. */
export const ExecutionPlan = Type.Object({
  id: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$' }),
  tasks: Type.Array(PlanTask, { minItems: 1, maxItems: 10_000 }),
  /** Task id → the ids it depends on. */
  dependencies: Type.Record(Type.String(), Type.Array(Type.String())),
  dag: Type.Optional(JsonObject),
  metadata: Type.Optional(JsonObject)
}, { ...closed, title: 'ExecutionPlan' })
export type ExecutionPlan = Static<typeof ExecutionPlan>

export const PlannerAgentInput = Type.Object({
  insights: Type.Array(Insight),
  max_hours: Type.Optional(Type.Number({ exclusiveMinimum: 0, default: 4 })),
  optimization_goal: Type.Optional(Type.Union([Type.Literal('quality'), Type.Literal('speed'), Type.Literal('coverage')], { default: 'quality' })),
  constraints: Type.Optional(JsonObject)
}, { ...closed, title: 'PlannerAgentInput' })
export type PlannerAgentInput = Static<typeof PlannerAgentInput>

export const PlannerAgentOutput = Type.Object({
  plan: ExecutionPlan,
  total_tasks: Type.Integer({ minimum: 0 }),
  estimated_duration: Type.Number({ minimum: 0 }),
  critical_path: Type.Array(Type.String()),
  /** Task id → risk level. */
  risk_assessment: Type.Record(Type.String(), Type.String())
}, { ...closed, title: 'PlannerAgentOutput' })
export type PlannerAgentOutput = Static<typeof PlannerAgentOutput>

/** A file a change touched, with its unified diff. */
export const ChangedFile = Type.Object({
  path: Type.String({ minLength: 1, maxLength: 4096 }),
  diff: Type.String(),
  change_summary: Type.String({ maxLength: 10_000 }),
  lines_added: Type.Integer({ minimum: 0 }),
  lines_removed: Type.Integer({ minimum: 0 })
}, { ...closed, title: 'ChangedFile' })
export type ChangedFile = Static<typeof ChangedFile>

export const DiffStats = Type.Object({
  files_changed: Type.Integer({ minimum: 0 }),
  insertions: Type.Integer({ minimum: 0 }),
  deletions: Type.Integer({ minimum: 0 }),
  test_coverage_delta: Type.Number(),
  complexity_delta: Type.Number()
}, { ...closed, title: 'DiffStats' })
export type DiffStats = Static<typeof DiffStats>

export const RefactorAgentInput = Type.Object({
  task: PlanTask,
  target_files: Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 1000 }),
  /** `add_docstrings`, `add_types`, `refactor`, `optimize`. */
  change_type: Type.String({ minLength: 1, maxLength: 64 }),
  style_guide: Type.Optional(Type.String({ maxLength: 100_000 })),
  test_requirements: Type.Optional(JsonObject)
}, { ...closed, title: 'RefactorAgentInput' })
export type RefactorAgentInput = Static<typeof RefactorAgentInput>

export const RefactorAgentOutput = Type.Object({
  changed_files: Type.Array(ChangedFile),
  tests_added: Type.Array(Type.String()),
  docs_updated: Type.Array(Type.String()),
  pr_url: Type.Union([Type.String(), Type.Null()]),
  diff_stats: DiffStats
}, { ...closed, title: 'RefactorAgentOutput' })
export type RefactorAgentOutput = Static<typeof RefactorAgentOutput>

/** One measurement against its previous value and threshold. */
export const Metric = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 128 }),
  value: Type.Number(),
  previous_value: Type.Number(),
  delta: Type.Number(),
  delta_percent: Type.Number(),
  threshold: Type.Union([Type.Number(), Type.Null()]),
  passed: Type.Boolean()
}, { ...closed, title: 'Metric' })
export type Metric = Static<typeof Metric>

export const EvaluationReport = Type.Object({
  summary: Type.String(),
  /** Metric name → its row. */
  metrics_table: Type.Record(Type.String(), JsonObject),
  failed_checks: Type.Array(Type.String()),
  warnings: Type.Array(Type.String()),
  improvements: Type.Array(Type.String()),
  regression_risk: Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high')])
}, { ...closed, title: 'EvaluationReport' })
export type EvaluationReport = Static<typeof EvaluationReport>

export const EvaluatorAgentInput = Type.Object({
  changed_files: Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 10_000 }),
  baseline_metrics: NumberMap,
  /** The metrics after the change; the evaluator measures them itself when it can. */
  current_metrics: Type.Optional(NumberMap),
  evaluation_criteria: Type.Optional(Type.Array(Type.String({ maxLength: 64 }), { default: ['coverage', 'complexity', 'security', 'performance'] })),
  thresholds: Type.Optional(NumberMap)
}, { ...closed, title: 'EvaluatorAgentInput' })
export type EvaluatorAgentInput = Static<typeof EvaluatorAgentInput>

export const EvaluatorAgentOutput = Type.Object({
  metrics: Type.Record(Type.String(), Metric),
  passed: Type.Boolean(),
  score: Type.Number({ minimum: 0, maximum: 100 }),
  report: EvaluationReport,
  recommendations: Type.Array(Type.String())
}, { ...closed, title: 'EvaluatorAgentOutput' })
export type EvaluatorAgentOutput = Static<typeof EvaluatorAgentOutput>

// --- tools (MCP) and external agents (A2A) ---

/** A request to run a tool (`fs`, `git`, `github`, `browser`, `tracker`, ...). */
export const ToolCall = Type.Object({
  tool: Type.String({ minLength: 1, maxLength: 128 }),
  action: Type.String({ minLength: 1, maxLength: 128 }),
  args: JsonObject,
  /** Seconds. */
  timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600, default: 30 })),
  retry_on_failure: Type.Optional(Type.Boolean({ default: true }))
}, { ...closed, title: 'ToolCall' })
export type ToolCall = Static<typeof ToolCall>

export const ToolResponse = Type.Object({
  tool: Type.String(),
  action: Type.String(),
  success: Type.Boolean(),
  result: Type.Unknown(),
  error: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  duration_ms: Type.Integer({ minimum: 0 })
}, { ...closed, title: 'ToolResponse' })
export type ToolResponse = Static<typeof ToolResponse>

/** A request to an external agent over A2A; `capability` must be one it declares. */
export const A2ARequest = Type.Object({
  agent_id: Id,
  capability: Type.String({ minLength: 1, maxLength: 128 }),
  payload: JsonObject,
  /** Seconds. */
  timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400, default: 300 })),
  callback_url: Type.Optional(Type.Union([Type.String({ format: 'uri' }), Type.Null()]))
}, { ...closed, title: 'A2ARequest' })
export type A2ARequest = Static<typeof A2ARequest>

export const A2AResponse = Type.Object({
  agent_id: Id,
  request_id: Id,
  status: Type.Union([Type.Literal('success'), Type.Literal('failure'), Type.Literal('timeout')]),
  result: Type.Unknown(),
  metadata: JsonObject,
  billing: Type.Optional(Type.Union([NumberMap, Type.Null()]))
}, { ...closed, title: 'A2AResponse' })
export type A2AResponse = Static<typeof A2AResponse>

// --- the event bus ---

/** Who wants which events: glob patterns over the dotted type (`code.*`), and an optional match on `data`. */
export const EventSubscription = Type.Object({
  agent_id: Id,
  event_patterns: Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { minItems: 1, maxItems: 100 }),
  filter: Type.Optional(Type.Union([JsonObject, Type.Null()])),
  /** The handler's name in the agent. */
  handler: Type.String({ minLength: 1, maxLength: 128 })
}, { ...closed, title: 'EventSubscription' })
export type EventSubscription = Static<typeof EventSubscription>

/** An event published to the bus: to some agents or all, ordered by priority, dropped after `ttl` seconds. */
export const EventPublication = Type.Object({
  event: ContractEvent,
  target_agents: Type.Optional(Type.Union([Type.Array(Id, { maxItems: 1000 }), Type.Null()])),
  priority: Type.Optional(Type.Integer({ minimum: 1, maximum: 10, default: 5 })),
  /** Seconds. */
  ttl: Type.Optional(Type.Integer({ minimum: 1, maximum: 30 * 86_400, default: 3600 }))
}, { ...closed, title: 'EventPublication' })
export type EventPublication = Static<typeof EventPublication>

/** The `data` of the seed's common events, by event type. */
export const COMMON_EVENTS = {
  'research.complete': Type.Object({ insights: Type.Array(Insight) }),
  'plan.ready': Type.Object({ plan: ExecutionPlan }),
  'code.changed': Type.Object({ files: Type.Array(Type.String()), pr_url: Type.Union([Type.String(), Type.Null()]) }),
  'evaluation.complete': Type.Object({ passed: Type.Boolean(), metrics: JsonObject }),
  'security.alert': Type.Object({ severity: Severity, details: JsonObject }),
  'test.generated': Type.Object({ test_files: Type.Array(Type.String()), coverage: Type.Number() })
} as const
export type CommonEventType = keyof typeof COMMON_EVENTS
