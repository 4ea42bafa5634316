import { realpath } from 'node:fs/promises'
import { defineContractAgent, type AgentOutput, type JsonObject } from '../../src/agents/index.js'
import { compileSchema } from '../../src/agents/json-schema.js'
import {
  EvaluatorAgentInput, EvaluatorAgentOutput, PlanTask, type EvaluationReport, type Metric
} from '../../src/protocol/contract.js'
import { locate, measure, totals } from '../_shared/code-scan.js'

type Numbers = Record<string, number>

/** What is evaluated, from either form of the input. */
interface Evaluation {
  files: string[]
  baseline: Numbers
  current?: Numbers
  thresholds: Numbers
}

const INFORMATIONAL = new Set(['lines'])
const validOutput = compileSchema<EvaluatorAgentOutput>(EvaluatorAgentOutput)
const validNumbers = compileSchema<Numbers>({ type: 'object', additionalProperties: { type: 'number' } })
const json = (schema: unknown): JsonObject => JSON.parse(JSON.stringify(schema)) as JsonObject

const round1 = (n: number): number => Math.round(n * 10) / 10
/** Coverage and scores should rise; everything else (undocumented exports, TODOs, long functions, ...) should fall. */
const higherIsBetter = (name: string): boolean => /coverage|score/.test(name)

/** The seed's input as it is, or a plan's `evaluate` task: its input files, and the baseline and thresholds of its success criteria. */
function evaluationOf (payload: JsonObject): Evaluation | string {
  if (payload.task === undefined) {
    const input = payload as unknown as EvaluatorAgentInput
    return { files: input.changed_files, baseline: input.baseline_metrics, thresholds: input.thresholds ?? {}, ...(input.current_metrics !== undefined ? { current: input.current_metrics } : {}) }
  }
  const task = payload.task as PlanTask
  const { baseline_metrics: baseline, thresholds = {} } = task.success_criteria
  if (!validNumbers(baseline) || !validNumbers(thresholds)) return 'the task\'s success_criteria need baseline_metrics (and thresholds, if any) mapping metric names to numbers'
  return { files: task.input_artifacts, baseline, thresholds }
}

/** One metric against its baseline and threshold. */
function rowOf (name: string, value: number, previous: number, threshold: number | undefined): Metric {
  const delta = value - previous
  const deltaPercent = previous === 0 ? (value === 0 ? 0 : Math.sign(value) * 100) : round1(delta / Math.abs(previous) * 100)
  if (INFORMATIONAL.has(name)) return { name, value, previous_value: previous, delta, delta_percent: deltaPercent, threshold: null, passed: true }
  const passed = higherIsBetter(name)
    ? value >= (threshold ?? previous)
    : value <= (threshold ?? previous)
  return { name, value, previous_value: previous, delta, delta_percent: deltaPercent, threshold: threshold ?? null, passed }
}

/** The metrics now: the given ones, or the files measured (a missing file counts as 0, with a warning). */
async function currentOf (evaluation: Evaluation, warnings: string[]): Promise<Numbers> {
  if (evaluation.current !== undefined) return evaluation.current
  const measured = await measure(evaluation.files)
  for (const [file, metrics] of Object.entries(measured)) if (metrics === null) warnings.push(`${file} could not be read; it counts as 0`)
  return totals(measured)
}

/** Every metric of the baseline and of now, as rows (a metric measured only on one side: the other side's value). */
function rowsOf (evaluation: Evaluation, current: Numbers, warnings: string[]): Metric[] {
  const names = [...new Set([...Object.keys(evaluation.baseline), ...Object.keys(current)])]
  return names.map((name) => {
    const previous = evaluation.baseline[name] ?? 0
    if (current[name] === undefined) warnings.push(`${name} was not measured now; its baseline is kept`)
    return rowOf(name, current[name] ?? previous, previous, evaluation.thresholds[name])
  })
}

const improved = (m: Metric): boolean => !INFORMATIONAL.has(m.name) && (higherIsBetter(m.name) ? m.delta > 0 : m.delta < 0)
const signed = (n: number): string => `${n > 0 ? '+' : ''}${n}%`

function recommendation (m: Metric): string {
  if (m.threshold === null) return `${m.name} went from ${m.previous_value} to ${m.value}: undo or fix the change that made it worse`
  return higherIsBetter(m.name)
    ? `Raise ${m.name} to ${m.threshold} or more (it is ${m.value})`
    : `Bring ${m.name} down to ${m.threshold} or less (it is ${m.value})`
}

/** The report on the rows: what failed, what improved, and how risky the failures are. */
function reportOf (rows: readonly Metric[], files: number, warnings: string[]): EvaluatorAgentOutput {
  const failed = rows.filter((m) => !m.passed)
  const score = rows.length === 0 ? 100 : round1(100 * (rows.length - failed.length) / rows.length)
  const regressed = failed.some((m) => !higherIsBetter(m.name) && m.delta_percent > 20)
  const report: EvaluationReport = {
    summary: `${rows.length - failed.length} of ${rows.length} checks passed over ${files} files (score ${score})`,
    metrics_table: Object.fromEntries(rows.map((m) => [m.name, m as unknown as JsonObject])),
    failed_checks: failed.map((m) => m.name),
    warnings,
    improvements: rows.filter(improved).map((m) => `${m.name} ${m.delta < 0 ? 'fell' : 'rose'} from ${m.previous_value} to ${m.value} (${signed(m.delta_percent)})`),
    regression_risk: regressed ? 'high' : failed.length > 0 ? 'medium' : 'low'
  }
  return { metrics: Object.fromEntries(rows.map((m) => [m.name, m])), passed: failed.length === 0, score, report, recommendations: failed.map(recommendation) }
}

function outputOf (taskId: string, content: EvaluatorAgentOutput): AgentOutput {
  return {
    task_id: taskId,
    status: 'ok',
    artifacts: [{ kind: 'report', ref: `evaluations/${taskId}.json`, content }],
    metrics: { score: content.score, failed_checks: content.report.failed_checks.length },
    events: [{ type: 'evaluation.complete', key: `evaluation:${taskId}`, data: { passed: content.passed, metrics: Object.fromEntries(Object.values(content.metrics).map((m) => [m.name, m.value])) }, visibility: 'a2a' }]
  }
}

/**
 * Evaluator (seed 003's evaluator agent), deterministic: compares the metrics of the changed files
 * (given, or measured now: exports without JSDoc, TODOs, functions over 60 lines, lines) with their
 * baseline and thresholds. Coverage and scores must not fall, the rest must not rise (`lines` is
 * only informational); a threshold, when given, is the bar instead. It takes the seed's input or a
 * plan's `evaluate` task (`{ task }`), and returns the metrics table, a score, the failed checks
 * with their regression risk and a recommendation for each, in a report artifact and an
 * `evaluation.complete` event. A failed evaluation is still a successful call (`ok`).
 */
export default defineContractAgent({
  metadata: { id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a13', name: 'evaluator', version: '1.0.0', author: 'agent-host', created_at: '2026-11-25T00:00:00.000Z' },
  contractVersion: '2.0.0',
  capabilities: [{
    name: 'evaluate',
    description: 'Compare the metrics of changed files with their baseline and thresholds',
    intent: 'evaluate',
    timeout_ms: 60_000,
    inputs: { anyOf: [json(EvaluatorAgentInput), { type: 'object', properties: { task: json(PlanTask) }, required: ['task'], additionalProperties: false }] }
  }],
  getCapabilities: () => ({ metrics: ['undocumented_exports', 'todos', 'long_functions', 'lines'], higher_is_better: ['*coverage*', '*score*'] }),
  async execute (input, { log }) {
    const evaluation = evaluationOf(input.payload)
    if (typeof evaluation === 'string') return { task_id: input.task_id, status: 'fail', error: evaluation }
    const root = await realpath(process.cwd())
    for (const file of evaluation.files) {
      if (await locate(root, file) === 'outside') return { task_id: input.task_id, status: 'fail', error: `changed file ${file} is not inside ${root}` }
    }
    const warnings: string[] = []
    const rows = rowsOf(evaluation, await currentOf(evaluation, warnings), warnings)
    const content = reportOf(rows, evaluation.files.length, warnings)
    await log('info', content.report.summary)
    return outputOf(input.task_id, content)
  },
  validate: (output) => output.status !== 'ok' || validOutput(output.artifacts?.[0]?.content)
})
