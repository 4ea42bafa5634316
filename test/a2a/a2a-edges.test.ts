import t from 'tap'
import { randomUUID } from 'node:crypto'
import { AGENTS, build, FIXTURE_AGENTS_DIR, SCRIPTED } from '../helper.js'
import { until } from '../socket.js'

// The A2A methods' edges over JSON-RPC (inject): the refusals of ListTasks, CancelTask and
// SubscribeToTask, a message to a running task, and the methods this server does not serve.

const HEADERS = { 'a2a-version': '1.0' }
const ENV = { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0', AGENTS_DIR: FIXTURE_AGENTS_DIR }

type Answer = { result?: Record<string, any>, error?: { code: number, message: string } }

t.test('ListTasks: its parameters are checked, its filters and pages hold', async (t) => {
  const app = await build(t, ENV)
  const call = async (method: string, params: Record<string, unknown>): Promise<Answer> =>
    (await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}`, headers: HEADERS, payload: { jsonrpc: '2.0', id: 1, method, params } })).json()
  const contextId = randomUUID()
  for (let i = 0; i < 3; i++) await call('SendMessage', { message: { messageId: randomUUID(), contextId, role: 'ROLE_USER', parts: [{ data: { script: [] } }] } })
  const failed = await call('SendMessage', { message: { messageId: randomUUID(), contextId, role: 'ROLE_USER', parts: [{ data: { script: [{ op: 'throw', message: 'no' }] } }] } })
  t.equal(failed.result?.task.status.state, 'TASK_STATE_FAILED')

  t.match(await call('ListTasks', { pageSize: 0 }), { error: { code: -32602, message: /pageSize/ } })
  t.match(await call('ListTasks', { pageSize: 101 }), { error: { code: -32602 } })
  t.match(await call('ListTasks', { statusTimestampAfter: 'yesterday' }), { error: { code: -32602 } })
  t.match(await call('ListTasks', { pageToken: 'not-ours' }), { error: { code: -32602, message: /pageToken/ } })
  t.same((await call('ListTasks', { contextId: 'not-a-uuid' })).result, { tasks: [], nextPageToken: '', pageSize: 50, totalSize: 0 }, 'a context that cannot be ours has no tasks')
  t.equal((await call('ListTasks', { contextId, status: 'TASK_STATE_FAILED' })).result?.totalSize, 1, 'failed ones')
  t.equal((await call('ListTasks', { contextId, status: 'TASK_STATE_COMPLETED' })).result?.totalSize, 3, 'completed ones')
  t.equal((await call('ListTasks', { contextId, status: 'TASK_STATE_INPUT_REQUIRED' })).result?.totalSize, 0, 'a state no run is in')
  t.equal((await call('ListTasks', { contextId, statusTimestampAfter: new Date(Date.now() + 60_000).toISOString() })).result?.totalSize, 0, 'nothing changed after a time to come')
  const first = (await call('ListTasks', { contextId, pageSize: 3 })).result as { tasks: unknown[], nextPageToken: string }
  const second = (await call('ListTasks', { contextId, pageSize: 3, pageToken: first.nextPageToken })).result as { tasks: unknown[], nextPageToken: string }
  t.same([first.tasks.length, second.tasks.length, second.nextPageToken], [3, 1, ''], 'two pages, the last without a token')
})

t.test('CancelTask twice answers the canceled task; SubscribeToTask of an ended task and a message to a running one are refused', async (t) => {
  const app = await build(t, ENV)
  const call = async (method: string, params: Record<string, unknown>): Promise<Answer> =>
    (await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}`, headers: HEADERS, payload: { jsonrpc: '2.0', id: 1, method, params } })).json()
  const running = await call('SendMessage', { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ data: { script: [{ op: 'wait_abort' }] } }] }, configuration: { returnImmediately: true } })
  const id = running.result?.task.id as string
  await until('the run started', () => app.runs.size === 1)
  t.match(await call('SendMessage', { message: { messageId: randomUUID(), taskId: id, role: 'ROLE_USER', parts: [{ text: 'more' }] } }), { error: { code: -32004, message: /still running/ } })
  t.equal((await call('CancelTask', { id })).result?.status.state, 'TASK_STATE_CANCELED')
  t.equal((await call('CancelTask', { id })).result?.status.state, 'TASK_STATE_CANCELED', 'again: the task as it is')
  const subscribe = await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}`, headers: HEADERS, payload: { jsonrpc: '2.0', id: 2, method: 'SubscribeToTask', params: { id } } })
  t.match(subscribe.json(), { id: 2, error: { code: -32004, message: /terminal state/ } }, 'a plain JSON-RPC error: nothing was streamed')
  t.match(await call('GetTask', { id: 'not-a-uuid' }), { error: { code: -32001 } })
  t.match(await call('SendMessage', {}), { error: { code: -32602, message: /message is required/ } })
})

t.test('the extended card is not served; a task is found only under its own agent', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  const call = async (agent: string, method: string, params: Record<string, unknown>): Promise<Answer> =>
    (await app.inject({ method: 'POST', url: `/a2a/${agent}`, headers: HEADERS, payload: { jsonrpc: '2.0', id: 1, method, params } })).json()
  t.match(await call(AGENTS.echo, 'GetExtendedAgentCard', {}), { error: { code: -32007 } })
  const task = (await call(AGENTS.echo, 'SendMessage', { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'hi' }] } })).result?.task as { id: string }
  t.match(await call(AGENTS.echoStream, 'GetTask', { id: task.id }), { error: { code: -32001 } }, 'a task is found only under its own agent')
  t.match(await call(AGENTS.echo, 'GetTask', { id: task.id }), { result: { id: task.id } })
})

t.test('regression (issue 31): the task\'s history keeps the messageId the client sent, whatever the task\'s id', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  const call = async (method: string, params: Record<string, unknown>): Promise<Answer> =>
    (await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}`, headers: HEADERS, payload: { jsonrpc: '2.0', id: 1, method, params } })).json()
  const upper = randomUUID().toUpperCase()
  for (const messageId of ['readme-a2a-1', upper]) {
    const sent = (await call('SendMessage', { message: { messageId, role: 'ROLE_USER', parts: [{ text: 'hello' }] } })).result?.task
    t.match(sent, { id: /^[0-9a-f-]{36}$/, history: [{ messageId, role: 'ROLE_USER' }] }, `${messageId}: SendMessage's task`)
    t.equal(sent?.history[0].metadata, undefined, 'nothing else is added to the message')
    const got = (await call('GetTask', { id: sent?.id })).result
    t.match(got, { history: [{ messageId, taskId: sent?.id }] }, `${messageId}: GetTask's task`)
    const again = (await call('SendMessage', { message: { messageId, role: 'ROLE_USER', parts: [{ text: 'hello' }] } })).result?.task
    t.equal(again?.id, sent?.id, 'the same messageId is still the same task')
  }
})
