import t from 'tap'
import { createHash } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { build, envelope } from '../helper.js'

const PLANNER = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a11'
const DIR = 'test/fixtures/research-target/src'

const insight = (id: string, type: string, location: string, hours: number, score: number): Record<string, unknown> => ({
  id, type, severity: 'medium', location: `${DIR}/${location}`, description: `${type} at ${location}`, suggested_fix: null, estimated_hours: hours, priority_score: score
})

// quality order: security-1, complexity-1, then the 0.5s by hours (docstring-1, docstring-2, todo-2, test-1), then todo-1
const INSIGHTS = [
  insight('docstring-1', 'docstring', 'parser.ts:2', 0.25, 0.5),
  insight('docstring-2', 'docstring', 'report.ts:1', 0.25, 0.5),
  insight('todo-1', 'todo', 'parser.ts:1', 0.5, 0.25),
  insight('todo-2', 'todo', 'report.ts:4', 0.5, 0.5),
  insight('complexity-1', 'complexity', 'long.ts:2', 2, 0.75),
  insight('test-1', 'test', 'report.ts:1', 1, 0.5),
  insight('security-1', 'security', 'parser.ts:3', 3, 0.9)
]

interface PlanTaskView { id: string, type: string, estimated_hours: number }
interface PlanView { id: string, tasks: PlanTaskView[], dependencies: Record<string, string[]>, metadata: { insights: string[] } }

async function plan (app: FastifyInstance, payload: Record<string, unknown>): Promise<Record<string, any>> {
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(PLANNER, payload) })
  if (res.statusCode !== 200) throw new Error(res.body)
  return res.json().output
}

const task = (id: string, type: string, file: string, ids: string[], hours: number, priority: number, criteria: Record<string, unknown> = {}): Record<string, unknown> => ({
  id,
  type,
  description: `${{ refactor: 'Refactor', document: 'Document', resolve_todo: 'Resolve the TODOs of' }[type] as string} ${DIR}/${file}: ${ids.map((i) => `${i} (${INSIGHTS.find((x) => x.id === i)?.location as string})`).join(', ')}`,
  estimated_hours: hours,
  priority,
  assigned_agent: 'refactor',
  input_artifacts: [`${DIR}/${file}`],
  output_artifacts: [`${DIR}/${file}`],
  success_criteria: { insights_resolved: ids, ...criteria },
  retry_policy: { max_attempts: 3 }
})

t.test('planner: known insights → the exact plan: one task per file and type, edits of a file chained, evaluate last, the critical path', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const output = await plan(app, { insights: INSIGHTS })
  t.equal(output.status, 'ok')
  const content = output.artifacts[0].content
  const id = `plan-${createHash('sha256').update(JSON.stringify({ insights: ['docstring-1', 'docstring-2', 'security-1', 'todo-2'], goal: 'quality', max_hours: 4 })).digest('hex').slice(0, 8)}`
  t.same(content.plan, {
    id,
    tasks: [
      task('refactor-1', 'refactor', 'parser.ts', ['security-1'], 3, 9),
      task('document-1', 'document', 'parser.ts', ['docstring-1'], 0.25, 5, { metric: 'undocumented_exports', target: 0 }),
      task('document-2', 'document', 'report.ts', ['docstring-2'], 0.25, 5, { metric: 'undocumented_exports', target: 0 }),
      task('resolve_todo-1', 'resolve_todo', 'report.ts', ['todo-2'], 0.5, 5, { metric: 'todos', target: 0 }),
      {
        id: 'evaluate',
        type: 'evaluate',
        description: `Evaluate the changes to ${DIR}/parser.ts, ${DIR}/report.ts`,
        estimated_hours: 0.25,
        priority: 5,
        assigned_agent: 'evaluator',
        input_artifacts: [`${DIR}/parser.ts`, `${DIR}/report.ts`],
        output_artifacts: [],
        // parser.ts: parse undocumented, one TODO, 9 lines; report.ts: Report undocumented, one FIXME, 4 lines
        success_criteria: { baseline_metrics: { undocumented_exports: 2, todos: 2, long_functions: 0, lines: 13 }, thresholds: { undocumented_exports: 0, todos: 1, long_functions: 0 } },
        retry_policy: { max_attempts: 3 }
      }
    ],
    dependencies: { 'refactor-1': [], 'document-1': ['refactor-1'], 'document-2': [], 'resolve_todo-1': ['document-2'], evaluate: ['refactor-1', 'document-1', 'document-2', 'resolve_todo-1'] },
    metadata: { optimization_goal: 'quality', max_hours: 4, insights: ['security-1', 'docstring-1', 'docstring-2', 'todo-2'] }
  })
  t.equal(content.total_tasks, 5)
  t.same(content.critical_path, ['refactor-1', 'document-1', 'evaluate'])
  t.equal(content.estimated_duration, 3.5)
  t.same(content.risk_assessment, { 'refactor-1': 'high', 'document-1': 'low', 'document-2': 'low', 'resolve_todo-1': 'medium', evaluate: 'low' })
  t.match(output.artifacts[0], { kind: 'plan', ref: `plans/${id}.json` })
  t.same(output.metrics, { tasks: 5, estimated_hours: 4.25, insights_selected: 4, insights_skipped: 3 })
  t.same(output.events, [{ type: 'plan.ready', key: `plan:${id}`, data: { plan: content.plan }, visibility: 'a2a' }])

  const again = await plan(app, { insights: [...INSIGHTS].reverse() })
  t.equal(again.artifacts[0].content.plan.id, id, 'the same insights in another order: the same plan id')
  const faster = await plan(app, { insights: INSIGHTS, optimization_goal: 'speed' })
  t.not(faster.artifacts[0].content.plan.id, id, 'another goal: another plan')
})

t.test('planner: each goal selects within max_hours, smaller insights still taken after a bigger one did not fit', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const selected = async (payload: Record<string, unknown>): Promise<string[]> => (await plan(app, { insights: INSIGHTS, ...payload })).artifacts[0].content.plan.metadata.insights
  // speed: hours ascending, priority breaking ties: 0.25 + 0.25 + 0.5 + 0.5 + 1 = 2.5; complexity-1 (2) does not fit, security-1 (3) neither
  t.same(await selected({ optimization_goal: 'speed' }), ['docstring-1', 'docstring-2', 'todo-2', 'todo-1', 'test-1'])
  // coverage: tests first, then by quality: 1 + 3, then docstrings fit up to 4.5, todo-2 makes 5
  t.same(await selected({ optimization_goal: 'coverage', max_hours: 5 }), ['test-1', 'security-1', 'docstring-1', 'docstring-2', 'todo-2'])
  t.same(await selected({ max_hours: 2.25 }), ['complexity-1', 'docstring-1'], 'quality: security-1 skipped, complexity-1 taken, one docstring fits')
  const docs = await plan(app, { insights: INSIGHTS, constraints: { insight_types: ['docstring'] } })
  const view = docs.artifacts[0].content.plan as PlanView
  t.same(view.tasks.map((x) => [x.id, x.type]), [['document-1', 'document'], ['document-2', 'document'], ['evaluate', 'evaluate']])
  t.same(view.dependencies, { 'document-1': [], 'document-2': [], evaluate: ['document-1', 'document-2'] })
  t.same(docs.metrics, { tasks: 3, estimated_hours: 0.75, insights_selected: 2, insights_skipped: 0 }, 'the other types are not candidates')
  t.same(docs.artifacts[0].content.critical_path, ['document-1', 'evaluate'])
  const speedView = (await plan(app, { insights: INSIGHTS, optimization_goal: 'speed' })).artifacts[0].content.plan as PlanView
  const all = ['document-1', 'document-2', 'resolve_todo-1', 'resolve_todo-2', 'test-1']
  t.same(speedView.dependencies, { 'document-1': [], 'document-2': [], 'resolve_todo-1': ['document-2'], 'resolve_todo-2': ['document-1'], 'test-1': ['resolve_todo-1'], evaluate: all },
    'report.ts: document-2, then resolve_todo-1, then test-1')
})

t.test('planner: nothing fits → fail; bad input → 400', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  t.match(await plan(app, { insights: INSIGHTS, max_hours: 0.2 }), { status: 'fail', error: 'no insight fits within max_hours (0.2 h)' })
  t.match(await plan(app, { insights: [] }), { status: 'fail', error: 'no insight fits within max_hours (4 h)' })
  t.match(await plan(app, { insights: INSIGHTS, constraints: { insight_types: ['performance'] } }), { status: 'fail' })
  const bad = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(PLANNER, { insights: INSIGHTS, optimization_goal: 'cheapest' }) })
  t.equal(bad.statusCode, 400)
})

t.test('the plan the planner returns is accepted by POST /v1/plans as it is, with the same critical path', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const content = (await plan(app, { insights: INSIGHTS })).artifacts[0].content
  const res = await app.inject({ method: 'POST', url: '/v1/plans', payload: content.plan })
  t.equal(res.statusCode, 201, res.body)
  const body = res.json()
  t.same(body.critical_path, content.critical_path)
  t.equal(body.estimated_duration_hours, content.estimated_duration)
  t.same(body.tasks.map((x: { type: string }) => x.type), ['refactor', 'refactor', 'refactor', 'refactor', 'evaluator'])
  t.same(body.tasks[4].dependency_ids, ['refactor-1', 'document-1', 'document-2', 'resolve_todo-1'].map((x) => `${content.plan.id as string}.${x}`))
})
