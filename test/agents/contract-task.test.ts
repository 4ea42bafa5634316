import t from 'tap'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { build } from '../helper.js'

const DIR = fileURLToPath(new URL('../fixtures/contract-agents/', import.meta.url))
const FAST = { TASK_POLL_MS: '20', TASK_HEARTBEAT_MS: '100', TASK_LEASE_MS: '1000', AGENTS_DIR: DIR }

interface TaskView { id: string, status: string, attempt: number, error: { reason: string, retryable: boolean } | null, outputs: { artifacts?: unknown[] } | null, parent_id: string | null, type: string, priority: number }

async function task (app: FastifyInstance, id: string): Promise<TaskView> {
  return (await app.inject({ url: `/v1/tasks/${id}` })).json() as TaskView
}

async function settled (app: FastifyInstance, id: string, ms = 15_000): Promise<TaskView> {
  for (const deadline = Date.now() + ms; ; await sleep(20)) {
    const view = await task(app, id)
    if (view.status === 'COMPLETED' || view.status === 'FAILED') return view
    if (Date.now() > deadline) throw new Error(`task ${id} is still ${view.status}`)
  }
}

async function create (app: FastifyInstance, id: string, inputs: Record<string, unknown>, extra: Record<string, unknown> = {}): Promise<void> {
  const res = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { id, type: 'contract-probe', inputs, ...extra } })
  if (res.statusCode !== 201) throw new Error(res.body)
}

t.test('a contract agent works the task graph: ok completes with its artifacts, next_tasks become child tasks', async (t) => {
  const app = await build(t, FAST)
  await create(app, 'parent', { mode: 'ok', next: 'ok' })
  const parent = await settled(app, 'parent')
  t.equal(parent.status, 'COMPLETED')
  t.match(parent.outputs?.artifacts, [{ kind: 'report', ref: 'reports/parent.json', content: { found: 3 } }])
  // the child is created right after the parent is stored complete
  let child: TaskView | undefined
  for (const deadline = Date.now() + 10_000; child === undefined && Date.now() < deadline; await sleep(20)) {
    child = ((await app.inject({ url: '/v1/tasks?type=contract-probe' })).json() as { tasks: TaskView[] }).tasks.find((x) => x.parent_id === 'parent')
  }
  t.ok(child, 'a child task was created')
  t.equal(child?.priority, 3)
  t.equal((await settled(app, child?.id ?? '')).status, 'COMPLETED', 'and run')
})

t.test('retry then success; retry until attempts run out; fail at once; a violation and bad input fail without retry', async (t) => {
  const app = await build(t, FAST)
  await create(app, 'flaky', { mode: 'flaky' })
  await create(app, 'always-retry', { mode: 'retry' }, { max_attempts: 2 })
  await create(app, 'fails', { mode: 'fail' })
  await create(app, 'violates', { mode: 'invalid' })
  await create(app, 'bad-input', { mode: 'sideways' })
  await create(app, 'throws', { mode: 'throw' }, { max_attempts: 1 })
  const flaky = await settled(app, 'flaky')
  t.match(flaky, { status: 'COMPLETED', attempt: 2 }, 'the second attempt succeeded')
  t.match(await settled(app, 'always-retry'), { status: 'FAILED', attempt: 2, error: { retryable: true } }, 'retry exhausted')
  t.match(await settled(app, 'fails'), { status: 'FAILED', attempt: 1, error: { reason: 'nothing to research', retryable: false } })
  t.match(await settled(app, 'violates'), { status: 'FAILED', attempt: 1, error: { reason: /^agent_contract_violation: its output does not match the AgentOutput schema/, retryable: false } })
  t.match(await settled(app, 'bad-input'), { status: 'FAILED', attempt: 1, error: { reason: /^invalid input: \/inputs\/mode/, retryable: false } })
  t.match(await settled(app, 'throws'), { status: 'FAILED', attempt: 1 }, 'a throw fails the attempt like any task agent\'s')
  const updates = (await app.inject({ url: '/v1/tasks/flaky/events' })).json() as { events: Array<{ event: { message?: string } }> }
  t.ok(updates.events.some((e) => /^info: probing .*"trace_id"/.test(e.event.message ?? '')), 'its log lines are task updates with the trace id')
})

t.test('a task\'s constraints.timeout aborts the call: a retryable failure, here with no attempt left', async (t) => {
  const app = await build(t, FAST)
  await create(app, 'slow', { mode: 'slow', ms: 60_000 }, { max_attempts: 1, metadata: { constraints: { timeout: 0.2 } } })
  t.match(await settled(app, 'slow'), { status: 'FAILED', attempt: 1, error: { reason: /^contract_timeout/, retryable: true } })
})
