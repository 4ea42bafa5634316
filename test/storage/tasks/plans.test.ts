import t from 'tap'
import { criticalPath } from '../../../src/storage/tasks/plans.js'
import { build } from '../../helper.js'

const task = (id: string, hours: number, agent = 'wordcount', extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  id, type: 'code', description: `do ${id}`, estimated_hours: hours, priority: 5, assigned_agent: agent, input_artifacts: [], output_artifacts: [], success_criteria: {}, ...extra
})

t.test('criticalPath: the chain with the most hours, on a known graph', async (t) => {
  // a(2) -> b(3) -> d(1); a -> c(5) -> d; e(4) alone: a, c, d = 8 hours
  const graph = [
    { id: 'a', hours: 2, dependencies: [] }, { id: 'b', hours: 3, dependencies: ['a'] }, { id: 'c', hours: 5, dependencies: ['a'] },
    { id: 'd', hours: 1, dependencies: ['b', 'c'] }, { id: 'e', hours: 4, dependencies: [] }
  ]
  t.same(criticalPath(graph), { path: ['a', 'c', 'd'], hours: 8 })
  t.same(criticalPath([]), { path: [], hours: 0 })
  t.same(criticalPath([{ id: 'x', hours: 1, dependencies: ['gone'] }]), { path: ['x'], hours: 1 })
})

t.test('POST /v1/plans: the plan\'s tasks in the graph with their dependencies, priority and attempts; its critical path', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const res = await app.inject({
    method: 'POST',
    url: '/v1/plans',
    payload: {
      id: 'p1',
      tasks: [task('a', 2), task('b', 3), task('c', 5, 'wordcount', { retry_policy: { max_attempts: 5 }, priority: 9 }), task('d', 1, 'summarize')],
      dependencies: { b: ['a'], c: ['a'], d: ['b', 'c'] }
    }
  })
  t.equal(res.statusCode, 201, res.body)
  const body = res.json()
  t.same(body.critical_path, ['a', 'c', 'd'])
  t.equal(body.estimated_duration_hours, 8)
  t.same(body.tasks.map((x: { id: string, type: string, dependency_ids: string[] }) => [x.id, x.type, x.dependency_ids]),
    [['p1.a', 'wordcount', []], ['p1.b', 'wordcount', ['p1.a']], ['p1.c', 'wordcount', ['p1.a']], ['p1.d', 'summarize', ['p1.b', 'p1.c']]])
  t.match(body.tasks[2], { priority: 9, max_attempts: 5, inputs: { task: { id: 'c', estimated_hours: 5 } }, metadata: { plan_id: 'p1', plan_task_id: 'c' } })

  // progress: complete a and c by hand (no workers here)
  for (const id of ['p1.a', 'p1.c']) {
    for (let claimed = await app.tasks.claim('wordcount', 'me', 60_000); claimed !== undefined; claimed = await app.tasks.claim('wordcount', 'me', 60_000)) {
      if (claimed.id === id) { await app.tasks.complete(id, { owner: 'me', attempt: claimed.attempt }, { artifacts: [{ kind: 'report', ref: `${id}.md` }] }); break }
      await app.tasks.release(claimed.id, { owner: 'me', attempt: claimed.attempt })
    }
  }
  const progress = (await app.inject({ url: '/v1/plans/p1' })).json()
  t.match(progress, {
    plan_id: 'p1', total: 4, tasks_by_status: { COMPLETED: 2, PENDING: 2 }, critical_path: ['a', 'c', 'd'], critical_path_done: ['a', 'c'], critical_path_remaining: ['d'], estimated_duration_hours: 8, remaining_hours: 1
  })
  t.same(progress.artifacts.map((a: { task_id: string }) => a.task_id).sort(), ['p1.a', 'p1.c'])
  t.match((await app.inject({ url: '/v1/plans/nope' })).json(), { statusCode: 404, code: 'AH_ERR_PLAN_NOT_FOUND', message: 'No plan with id "nope"' })
})

t.test('a plan with a cycle, an unknown agent or an unknown dependency is a 400 naming them, and creates nothing', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const post = async (plan: Record<string, unknown>): Promise<{ statusCode: number, json: () => { code: string, message: string, details: Record<string, unknown> } }> => await app.inject({ method: 'POST', url: '/v1/plans', payload: plan })
  const cycle = await post({ id: 'c1', tasks: [task('a', 1), task('b', 1)], dependencies: { a: ['b'], b: ['a'] } })
  t.equal(cycle.statusCode, 400)
  t.match(cycle.json(), { code: 'AH_ERR_TASK_INVALID', message: /cycle: (a -> b -> a|b -> a -> b)/ })
  const agents = await post({ id: 'c2', tasks: [task('a', 1, 'nobody'), task('b', 1, 'ghost')], dependencies: {} })
  t.equal(agents.statusCode, 400)
  t.match(agents.json(), { message: /"nobody", "ghost"/, details: { unknown_agents: ['nobody', 'ghost'] } })
  const deps = await post({ id: 'c3', tasks: [task('a', 1)], dependencies: { a: ['missing'], z: [] } })
  t.equal(deps.statusCode, 400)
  t.match(deps.json(), { message: /"a" depends on "missing"/, details: { unknown_dependencies: [{ task: 'a', dependency: 'missing' }, { task: 'z', dependency: null }] } })
  t.match((await post({ id: 'c4', tasks: [task('a', 1), task('a', 2)], dependencies: {} })).json(), { message: /used twice: a/ })
  t.equal((await post({ id: 'c5', tasks: [task('a', 1, 'wordcount', { priority: 11 })], dependencies: {} })).statusCode, 400, 'priority is 1-10')
  const long = await post({ id: 'p'.repeat(100), tasks: [task('a'.repeat(27), 1), task('b'.repeat(28), 1)], dependencies: {} })
  t.equal(long.statusCode, 400, 'every task id of the graph fits the task routes (128 characters)')
  t.match(long.json(), { message: /longer than 128 characters/, details: { too_long: [`${'p'.repeat(100)}.${'b'.repeat(28)}`] } })
  t.same((await app.inject({ url: '/v1/tasks' })).json().tasks, [], 'nothing was created')
  // atomic: the second time, its ids exist: refused whole
  t.equal((await post({ id: 'p', tasks: [task('a', 1)], dependencies: {} })).statusCode, 201)
  t.equal((await post({ id: 'p', tasks: [task('a', 1), task('b', 1)], dependencies: {} })).statusCode, 400)
  t.same((await app.inject({ url: '/v1/tasks' })).json().tasks.map((x: { id: string }) => x.id), ['p.a'], 'none of the second plan\'s tasks were created')
})
