import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { build, envelope } from '../helper.js'

const EVALUATOR = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a13'
const DIR = 'test/fixtures/research-target/src'

async function evaluate (app: FastifyInstance, payload: Record<string, unknown>): Promise<Record<string, any>> {
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(EVALUATOR, payload) })
  if (res.statusCode !== 200) throw new Error(res.body)
  return res.json().output
}

const planTask = (criteria: Record<string, unknown>, files = [`${DIR}/parser.ts`]): Record<string, unknown> => ({
  id: 'evaluate', type: 'evaluate', description: 'Evaluate', estimated_hours: 0.25, priority: 5, assigned_agent: 'evaluator', input_artifacts: files, output_artifacts: [], success_criteria: criteria
})

t.test('evaluator: an improvement passes, with its rows, score, improvements and event', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const output = await evaluate(app, {
    changed_files: [`${DIR}/parser.ts`],
    baseline_metrics: { undocumented_exports: 2, todos: 2, coverage: 70 },
    current_metrics: { undocumented_exports: 0, todos: 2, coverage: 80 },
    thresholds: { coverage: 75 }
  })
  t.equal(output.status, 'ok')
  const content = output.artifacts[0].content
  t.same(content.metrics, {
    undocumented_exports: { name: 'undocumented_exports', value: 0, previous_value: 2, delta: -2, delta_percent: -100, threshold: null, passed: true },
    todos: { name: 'todos', value: 2, previous_value: 2, delta: 0, delta_percent: 0, threshold: null, passed: true },
    coverage: { name: 'coverage', value: 80, previous_value: 70, delta: 10, delta_percent: 14.3, threshold: 75, passed: true }
  })
  t.equal(content.passed, true)
  t.equal(content.score, 100)
  t.same(content.report.failed_checks, [])
  t.same(content.report.improvements, ['undocumented_exports fell from 2 to 0 (-100%)', 'coverage rose from 70 to 80 (+14.3%)'])
  t.equal(content.report.regression_risk, 'low')
  t.same(content.report.metrics_table.coverage, content.metrics.coverage)
  t.same(content.recommendations, [])
  t.match(output.artifacts[0], { kind: 'report', ref: `evaluations/${output.task_id as string}.json` })
  t.same(output.metrics, { score: 100, failed_checks: 0 })
  t.same(output.events, [{ type: 'evaluation.complete', key: `evaluation:${output.task_id as string}`, data: { passed: true, metrics: { undocumented_exports: 0, todos: 2, coverage: 80 } }, visibility: 'a2a' }])
})

t.test('evaluator: a regression fails; the risk is high past 20 % on a lower-is-better metric, medium otherwise', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const high = await evaluate(app, { changed_files: [], baseline_metrics: { todos: 2, long_functions: 4, lines: 100 }, current_metrics: { todos: 3, long_functions: 4, lines: 140 } })
  t.equal(high.status, 'ok', 'a failed evaluation is still a successful call')
  const report = high.artifacts[0].content
  t.match(report, { passed: false, score: 66.7, report: { failed_checks: ['todos'], regression_risk: 'high', improvements: [] } })
  t.match(report.metrics.todos, { delta: 1, delta_percent: 50, passed: false })
  t.match(report.metrics.lines, { delta_percent: 40, threshold: null, passed: true }, 'lines only inform')
  t.same(report.recommendations, ['todos went from 2 to 3: undo or fix the change that made it worse'])
  t.same(high.metrics, { score: 66.7, failed_checks: 1 })

  const medium = (await evaluate(app, { changed_files: [], baseline_metrics: { todos: 10 }, current_metrics: { todos: 11 } })).artifacts[0].content
  t.match(medium, { passed: false, score: 0, report: { failed_checks: ['todos'], regression_risk: 'medium' } }, '10 % is a medium risk')
  const fromZero = (await evaluate(app, { changed_files: [], baseline_metrics: { todos: 0 }, current_metrics: { todos: 1 } })).artifacts[0].content
  t.match(fromZero, { metrics: { todos: { delta_percent: 100 } }, report: { regression_risk: 'high' } })
  const none = (await evaluate(app, { changed_files: [], baseline_metrics: {}, current_metrics: {} })).artifacts[0].content
  t.match(none, { passed: true, score: 100, report: { summary: '0 of 0 checks passed over 0 files (score 100)' } }, 'nothing to compare')
})

t.test('evaluator: thresholds are the bar when given, in both directions', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const content = (await evaluate(app, {
    changed_files: [],
    baseline_metrics: { todos: 5, long_functions: 5, test_coverage: 90, quality_score: 50, lines: 10 },
    current_metrics: { todos: 4, long_functions: 6, test_coverage: 80, quality_score: 60, lines: 10 },
    thresholds: { todos: 3, long_functions: 6, test_coverage: 85 }
  })).artifacts[0].content
  const passed = Object.fromEntries(Object.entries(content.metrics as Record<string, { passed: boolean }>).map(([name, m]) => [name, m.passed]))
  t.same(passed, { todos: false, long_functions: true, test_coverage: false, quality_score: true, lines: true }, 'improved yet above its threshold fails; worse yet within it passes; coverage and scores must rise')
  t.same(content.recommendations, ['Bring todos down to 3 or less (it is 4)', 'Raise test_coverage to 85 or more (it is 80)'])
  t.equal(content.score, 60)
  t.equal(content.report.regression_risk, 'medium', 'no lower-is-better metric regressed past 20 %')
  t.same(content.report.improvements, ['todos fell from 5 to 4 (-20%)', 'quality_score rose from 50 to 60 (+20%)'])

  const worse = (await evaluate(app, { changed_files: [], baseline_metrics: { coverage: 80 }, current_metrics: { coverage: 79 } })).artifacts[0].content
  t.match(worse, { passed: false, report: { regression_risk: 'medium' }, recommendations: ['coverage went from 80 to 79: undo or fix the change that made it worse'] }, 'a higher-is-better metric may not fall without a threshold')
})

t.test('evaluator: measures the changed files itself; missing files and metrics are warnings', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const output = await evaluate(app, {
    changed_files: [`${DIR}/parser.ts`, `${DIR}/report.ts`, `${DIR}/gone.ts`, DIR],
    baseline_metrics: { undocumented_exports: 3, todos: 2, long_functions: 0, lines: 10, coverage: 50 }
  })
  const content = output.artifacts[0].content
  const values = Object.fromEntries(Object.entries(content.metrics as Record<string, { value: number }>).map(([name, m]) => [name, m.value]))
  t.same(values, { undocumented_exports: 2, todos: 2, long_functions: 0, lines: 13, coverage: 50 })
  t.same(content.report.warnings, [`${DIR}/gone.ts could not be read; it counts as 0`, `${DIR} could not be read; it counts as 0`, 'coverage was not measured now; its baseline is kept'])
  t.match(content, { passed: true, report: { improvements: ['undocumented_exports fell from 3 to 2 (-33.3%)'] } })
})

t.test('evaluator: a plan\'s evaluate task ({ task }) behind /v1/assist and as a task of the graph', async (t) => {
  const app = await build(t, { TASK_POLL_MS: '20', TASK_HEARTBEAT_MS: '100', TASK_LEASE_MS: '1000' })
  const criteria = { baseline_metrics: { undocumented_exports: 1, todos: 1 }, thresholds: { undocumented_exports: 0 } }
  const failing = await evaluate(app, { task: planTask(criteria) })
  t.match(failing.artifacts[0].content, { passed: false, report: { failed_checks: ['undocumented_exports'] } }, 'parser.ts still has an undocumented export')
  t.match(await evaluate(app, { task: planTask({ thresholds: {} }) }), { status: 'fail', error: /need baseline_metrics/ })
  t.match(await evaluate(app, { task: planTask({ baseline_metrics: { todos: 'many' } }) }), { status: 'fail' })

  const created = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { id: 'eval-1', type: 'evaluator', inputs: { task: planTask({ baseline_metrics: { undocumented_exports: 1, todos: 1, long_functions: 0 } }) } } })
  t.equal(created.statusCode, 201, created.body)
  let view: Record<string, any> = {}
  for (const deadline = Date.now() + 15_000; view.status !== 'COMPLETED' && view.status !== 'FAILED'; await sleep(20)) {
    if (Date.now() > deadline) throw new Error(`eval-1 is still ${String(view.status)}`)
    view = (await app.inject({ url: '/v1/tasks/eval-1' })).json()
  }
  t.equal(view.status, 'COMPLETED')
  t.match(view.outputs.artifacts, [{ kind: 'report', ref: 'evaluations/eval-1.json', content: { passed: true, score: 100 } }])
})

t.test('evaluator: a changed file outside the working directory is refused', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  for (const file of ['/etc/passwd', '../outside.ts']) {
    t.match(await evaluate(app, { changed_files: [file], baseline_metrics: {} }), { status: 'fail', error: `changed file ${file} is not inside ${process.cwd()}` })
  }
  const bad = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(EVALUATOR, { changed_files: 'all' }) })
  t.equal(bad.statusCode, 400)
})
