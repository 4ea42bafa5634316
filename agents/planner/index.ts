import { createHash } from 'node:crypto'
import { defineContractAgent, type AgentOutput, type JsonObject } from '../../src/agents/index.js'
import { compileSchema } from '../../src/agents/json-schema.js'
import { PlannerAgentInput, PlannerAgentOutput, type ExecutionPlan, type Insight, type PlanTask } from '../../src/protocol/contract.js'
import { criticalPath } from '../../src/storage/tasks/plans.js'
import { measure, totals } from '../_shared/code-scan.js'

type Goal = 'quality' | 'speed' | 'coverage'

const TASK_TYPE: Record<string, string> = { docstring: 'document', test: 'test', complexity: 'simplify', todo: 'resolve_todo' }
const VERB: Record<string, string> = { document: 'Document', test: 'Add tests for', simplify: 'Simplify', resolve_todo: 'Resolve the TODOs of', refactor: 'Refactor' }
/** The metric a task type brings down, as the evaluator measures it. */
const METRIC: Record<string, string> = { document: 'undocumented_exports', simplify: 'long_functions', resolve_todo: 'todos' }
const RISK: Record<string, string> = { simplify: 'high', refactor: 'high', resolve_todo: 'medium' }
const EVALUATE = 'evaluate'
const validOutput = compileSchema<PlannerAgentOutput>(PlannerAgentOutput)

const byQuality = (a: Insight, b: Insight): number => b.priority_score - a.priority_score || a.estimated_hours - b.estimated_hours
const ORDER: Record<Goal, (a: Insight, b: Insight) => number> = {
  quality: byQuality,
  speed: (a, b) => a.estimated_hours - b.estimated_hours || b.priority_score - a.priority_score,
  coverage: (a, b) => Number(b.type === 'test') - Number(a.type === 'test') || byQuality(a, b)
}

/** Sum without float noise (0.1 + 0.2 is 0.3 here). */
const sum = (values: readonly number[]): number => Math.round(values.reduce((s, v) => s + v, 0) * 1e6) / 1e6

/** The insights to act on: the kept types in the goal's order, each taken while the hours so far stay within `maxHours`. */
function select (insights: readonly Insight[], goal: Goal, maxHours: number, types?: readonly string[]): { selected: Insight[], candidates: number } {
  const candidates = insights.filter((i) => types === undefined || types.includes(i.type)).sort(ORDER[goal])
  const selected: Insight[] = []
  let hours = 0
  for (const insight of candidates) {
    if (sum([hours, insight.estimated_hours]) > maxHours) continue
    selected.push(insight)
    hours = sum([hours, insight.estimated_hours])
  }
  return { selected, candidates: candidates.length }
}

/** The file an insight is about: its location without the trailing `:line`. */
const fileOf = (insight: Insight): string => insight.location.replace(/:\d+$/, '')

/** One task per (file, insight type), in order of first appearance; ids `<task type>-<n>`. */
function groupTasks (selected: readonly Insight[]): PlanTask[] {
  const groups = new Map<string, Insight[]>()
  for (const insight of selected) {
    const key = JSON.stringify([fileOf(insight), insight.type])
    groups.set(key, [...(groups.get(key) ?? []), insight])
  }
  const counters = new Map<string, number>()
  return [...groups.values()].map((group) => {
    const type = TASK_TYPE[(group[0] as Insight).type] ?? 'refactor'
    const n = (counters.get(type) ?? 0) + 1
    counters.set(type, n)
    return taskOf(`${type}-${n}`, type, fileOf(group[0] as Insight), group)
  })
}

function taskOf (id: string, type: string, file: string, group: readonly Insight[]): PlanTask {
  const ids = group.map((i) => i.id)
  const metric = METRIC[type]
  return {
    id,
    type,
    description: `${VERB[type] as string} ${file}: ${group.map((i) => `${i.id} (${i.location})`).join(', ')}`.slice(0, 10_000),
    estimated_hours: sum(group.map((i) => i.estimated_hours)),
    priority: Math.max(1, Math.round(Math.max(...group.map((i) => i.priority_score)) * 10)),
    assigned_agent: 'refactor',
    input_artifacts: [file],
    output_artifacts: [file],
    success_criteria: { insights_resolved: ids, ...(metric !== undefined ? { metric, target: 0 } : {}) },
    retry_policy: { max_attempts: 3 }
  }
}

/** Tasks on the same file run one after another, in task order; the evaluation waits for them all. */
function dependenciesOf (tasks: readonly PlanTask[]): Record<string, string[]> {
  const last = new Map<string, string>()
  const dependencies: Record<string, string[]> = {}
  for (const task of tasks) {
    const file = task.input_artifacts[0] as string
    const before = last.get(file)
    dependencies[task.id] = before === undefined ? [] : [before]
    last.set(file, task.id)
  }
  dependencies[EVALUATE] = tasks.map((t) => t.id)
  return dependencies
}

/**
 * The last task: the evaluator compares the touched files with their metrics now. Each metric a
 * task brings down must fall by its insights' count; the others must not rise.
 */
async function evaluateTask (tasks: readonly PlanTask[], selected: readonly Insight[]): Promise<PlanTask> {
  const files = [...new Set(tasks.flatMap((t) => t.input_artifacts))]
  const baseline = totals(await measure(files))
  const thresholds: Record<string, number> = {}
  for (const name of ['undocumented_exports', 'todos', 'long_functions']) {
    const resolved = selected.filter((i) => METRIC[TASK_TYPE[i.type] ?? ''] === name).length
    thresholds[name] = Math.max(0, (baseline[name] ?? 0) - resolved)
  }
  return {
    id: EVALUATE,
    type: 'evaluate',
    description: `Evaluate the changes to ${files.join(', ')}`.slice(0, 10_000),
    estimated_hours: 0.25,
    priority: 5,
    assigned_agent: 'evaluator',
    input_artifacts: files,
    output_artifacts: [],
    success_criteria: { baseline_metrics: baseline, thresholds },
    retry_policy: { max_attempts: 3 }
  }
}

/** `plan-` and 8 hex digits of the hash of what decides the plan: the same input is the same plan id. */
function planId (selected: readonly Insight[], goal: Goal, maxHours: number): string {
  const canonical = JSON.stringify({ insights: selected.map((i) => i.id).sort(), goal, max_hours: maxHours })
  return `plan-${createHash('sha256').update(canonical).digest('hex').slice(0, 8)}`
}

function planOutput (taskId: string, plan: ExecutionPlan, selected: number, skipped: number): AgentOutput {
  const path = criticalPath(plan.tasks.map((t) => ({ id: t.id, hours: t.estimated_hours, dependencies: plan.dependencies[t.id] ?? [] })))
  const content: PlannerAgentOutput = {
    plan,
    total_tasks: plan.tasks.length,
    estimated_duration: path.hours,
    critical_path: path.path,
    risk_assessment: Object.fromEntries(plan.tasks.map((t) => [t.id, RISK[t.type] ?? 'low']))
  }
  return {
    task_id: taskId,
    status: 'ok',
    artifacts: [{ kind: 'plan', ref: `plans/${plan.id}.json`, content }],
    metrics: { tasks: plan.tasks.length, estimated_hours: sum(plan.tasks.map((t) => t.estimated_hours)), insights_selected: selected, insights_skipped: skipped },
    events: [{ type: 'plan.ready', key: `plan:${plan.id}`, data: { plan }, visibility: 'a2a' }]
  }
}

/** Whether every dependency of the plan names one of its tasks. */
const closedDependencies = (plan: ExecutionPlan): boolean => {
  const ids = new Set(plan.tasks.map((t) => t.id))
  return Object.entries(plan.dependencies).every(([id, deps]) => ids.has(id) && deps.every((d) => ids.has(d)))
}

/**
 * Planner (seed 003's planner agent), deterministic: turns research's Insights into an
 * ExecutionPlan. It keeps the insight types asked for (`constraints.insight_types`), orders them by
 * the goal (`quality`: priority first; `speed`: quickest first; `coverage`: tests first) and takes
 * each one that still fits in `max_hours` (default 4). Each file and insight type becomes one task
 * for the refactor agent (tasks on one file run in turn, so no two edits of a file race), and a last
 * `evaluate` task for the evaluator carries the touched files' metrics as they are now. It returns
 * the plan, its critical path and risks in a plan artifact and a `plan.ready` event; a plan the
 * host can run as it is (`POST /v1/plans`).
 */
export default defineContractAgent({
  metadata: { id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a11', name: 'planner', version: '1.0.0', author: 'agent-host', created_at: '2026-11-25T00:00:00.000Z' },
  contractVersion: '2.0.0',
  capabilities: [{
    name: 'plan',
    description: 'Turn research insights into an execution plan for the refactor and evaluator agents',
    intent: 'plan',
    timeout_ms: 30_000,
    inputs: JSON.parse(JSON.stringify(PlannerAgentInput)) as JsonObject
  }],
  getCapabilities: () => ({ optimization_goals: ['quality', 'speed', 'coverage'], assigns: ['refactor', 'evaluator'] }),
  async execute (input, { log }) {
    const payload = input.payload as unknown as PlannerAgentInput
    const goal = payload.optimization_goal ?? 'quality'
    const maxHours = payload.max_hours ?? 4
    const types = Array.isArray(payload.constraints?.insight_types) ? payload.constraints.insight_types.map(String) : undefined
    const { selected, candidates } = select(payload.insights, goal, maxHours, types)
    if (selected.length === 0) return { task_id: input.task_id, status: 'fail', error: `no insight fits within max_hours (${maxHours} h)` }
    const tasks = groupTasks(selected)
    const plan: ExecutionPlan = {
      id: planId(selected, goal, maxHours),
      tasks: [...tasks, await evaluateTask(tasks, selected)],
      dependencies: dependenciesOf(tasks),
      metadata: { optimization_goal: goal, max_hours: maxHours, insights: selected.map((i) => i.id) }
    }
    await log('info', `plan ${plan.id}: ${plan.tasks.length} tasks for ${selected.length} of ${payload.insights.length} insights`)
    return planOutput(input.task_id, plan, selected.length, candidates - selected.length)
  },
  validate: (output) => {
    if (output.status !== 'ok') return true
    const content = output.artifacts?.[0]?.content
    return validOutput(content) && closedDependencies(content.plan)
  }
})
