// Heavy in part: one test SIGKILLs a server child process mid-run (a crash cannot be had in process:
// closing an app ends its runs), and one runs two apps on one PostgreSQL database when there is one.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { CallToolResultSchema, CreateTaskResultSchema, ElicitRequestSchema, McpError, RELATED_TASK_META_KEY, type CallToolResult, type ElicitRequest, type ElicitResult, type Task } from '@modelcontextprotocol/sdk/types.js'
import { META_REQUEST_ID } from '../../src/mcp/call-result.js'
import { META_INTERRUPTS } from '../../src/mcp/input-required.js'
import { TASKS_PAGE } from '../../src/mcp/tasks.js'
import type { Interrupt } from '../../src/protocol/interrupts.js'
import { docBlocks, runShell } from '../docs/doc-blocks.js'
import { observed } from '../fixtures/agents/scripted/index.js'
import { FIXTURE_AGENTS_DIR, listen, tempDataDir, type Teardown } from '../helper.js'
import { pgDatabase, PG_MISSING } from '../pg.js'
import { startServer } from '../server-child.js'
import { until } from '../socket.js'
import { connect, type Connected } from './client.js'

const KEY_A = 'tasks-key-a-0123456789abcdefghijklmn'
const KEY_B = 'tasks-key-b-0123456789abcdefghijklmn'
const apikey = {
  AUTH_MODE: 'apikey',
  API_KEYS: JSON.stringify([{ name: 'a', key: KEY_A, scopes: ['assist:invoke'] }, { name: 'b', key: KEY_B, scopes: ['assist:invoke'] }]),
  AUTH_FAILURE_MAX: '0'
}
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const INTERRUPT_AGENTS = fileURLToPath(new URL('../fixtures/interrupt-agents/', import.meta.url))

/** A script for the scripted agent that writes, waits until the test releases `gate`, then writes again and gives a result. */
function gated (gate: string): Array<Record<string, unknown>> {
  return [{ op: 'markdown', content: 'half way, ' }, { op: 'wait', name: gate }, { op: 'markdown', content: 'done' }, { op: 'result', value: { gate } }]
}

/** Call `name` as a task (`task: { ttl }` when given): the task the server answers with. */
async function createTask (client: Connected['client'], name: string, args: Record<string, unknown>, task: { ttl?: number } = {}): Promise<Task> {
  return (await client.request({ method: 'tools/call', params: { name, arguments: args, task } }, CreateTaskResultSchema)).task
}

/** Poll `tasks/get` until the task is `status`; the task then. */
async function taskIs (client: Connected['client'], taskId: string, status: Task['status'], ms = 10_000): Promise<Task> {
  let last: Task | undefined
  await until(`task ${taskId} ${status} (last: ${last?.status})`, async () => (last = await client.experimental.tasks.getTask(taskId)).status === status, ms, 20)
  return last as Task
}

/** `tasks/result` of a task, as a tool result. */
async function taskResult (client: Connected['client'], taskId: string): Promise<CallToolResult> {
  return await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema) as CallToolResult
}

/** A tool result without its `_meta` (which names its run): what the model reads. */
function shown (result: CallToolResult): Omit<CallToolResult, '_meta'> {
  const { _meta: _omitted, ...rest } = result
  return rest
}

/** The text contents of a tool result. */
function texts (result: CallToolResult): string[] {
  return result.content.map((c) => (c as { text: string }).text)
}

/** The task ids `tasks/list` shows `client`, every page. */
async function listed (client: Connected['client']): Promise<string[]> {
  const ids: string[] = []
  let cursor: string | undefined
  do {
    const page = await client.experimental.tasks.listTasks(cursor)
    ids.push(...page.tasks.map((task) => task.taskId))
    cursor = page.nextCursor
  } while (cursor !== undefined)
  return ids
}

/** An MCP client (the SDK's) that declared the `elicitation` capability, answering each elicitation with `answer`; what it was asked. */
async function eliciting (t: Teardown, url: string, answer: (params: ElicitRequest['params']) => ElicitResult): Promise<{ client: Client, asked: Array<ElicitRequest['params']> }> {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 }
  })
  const client = new Client({ name: 'agent-host-tests', version: '1.0.0' }, { capabilities: { elicitation: {} } })
  const asked: Array<ElicitRequest['params']> = []
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params)
    return answer(request.params)
  })
  t.teardown(async () => { await client.close() })
  await client.connect(transport)
  return { client, asked }
}

/** The spec's error for a task the caller has none of. */
const NOT_FOUND = { code: -32602, message: /Task not found/ }

t.test('a task-augmented tools/call answers its task at once; its run outlives the call and the session; tasks/get follows it to completed, and tasks/result waits for it and is what a plain call returns', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const first = await connect(t, url)
  t.match(first.client.getServerCapabilities(), { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } }, 'the server declares tasks')
  const { tools } = await first.client.listTools()
  t.ok(tools.length > 0 && tools.every((tool) => tool.execution?.taskSupport === 'optional'), 'every tool may run as a task')

  const gate = randomUUID()
  const task = await createTask(first.client, 'scripted', { script: gated(gate) }, { ttl: 60_000 })
  t.match(task, { status: 'working', ttl: 60_000, pollInterval: 1000 })
  t.match(task.taskId, UUID, 'the task id is the run\'s request id, a UUID')
  t.equal(task.lastUpdatedAt, task.createdAt)
  t.equal((await first.client.experimental.tasks.getTask(task.taskId)).status, 'working', 'the call has answered; the run goes on')

  // a plain call's run ends with its session; a task's does not
  await first.transport.terminateSession()
  const second = await connect(t, url)
  const working = await second.client.experimental.tasks.getTask(task.taskId)
  t.match(working, { taskId: task.taskId, status: 'working', createdAt: task.createdAt, ttl: 60_000 }, 'another session of the same principal sees the task')
  let settled = false
  const waiting = taskResult(second.client, task.taskId).finally(() => { settled = true })
  t.same(await listed(second.client), [task.taskId])
  t.notOk(settled, 'tasks/result waits while the run goes on')

  observed.released.add(gate)
  const completed = await taskIs(second.client, task.taskId, 'completed')
  t.ok(Date.parse(completed.lastUpdatedAt) >= Date.parse(completed.createdAt))
  t.notOk('statusMessage' in completed)
  const result = await waiting
  t.same(await taskResult(second.client, task.taskId), result, 'tasks/result again: the same result, from the journal')
  t.same(result._meta?.[RELATED_TASK_META_KEY], { taskId: task.taskId }, 'the result names its task')
  t.equal(result._meta?.[META_REQUEST_ID], task.taskId)

  const plain = await second.client.callTool({ name: 'scripted', arguments: { script: gated(gate) } }) as CallToolResult
  t.same(shown(result), shown(plain), 'what a plain call of the same returns')
  t.same(texts(result), ['half way, done', JSON.stringify({ gate })])

  const quick = { script: [{ op: 'result', value: { quick: true } }] }
  const granted = await createTask(second.client, 'scripted', quick)
  t.equal(granted.ttl, 86_400_000, 'no ttl asked: as long as the run is kept (JOURNAL_RETENTION_MS)')
  t.equal((await createTask(second.client, 'scripted', quick, { ttl: 10 * 86_400_000 })).ttl, 86_400_000, 'capped at JOURNAL_RETENTION_MS')
})

t.test('a refused task-augmented call is a JSON-RPC error and no task: an unknown tool, invalid arguments, the agent\'s rate limit', async (t) => {
  const { url } = await listen(t, { RATE_LIMIT_AGENT_MAX: '1' })
  const { client } = await connect(t, url)
  await t.rejects(createTask(client, 'nope', {}), { code: -32602, message: /Unknown tool: nope/ })
  await t.rejects(createTask(client, 'echo', { query: 7 }), { code: -32602, message: /Invalid arguments: \/query must be string/ })
  const task = await createTask(client, 'echo', { query: 'one' })
  const limited = await createTask(client, 'echo', { query: 'two' }).then(() => undefined, (err: unknown) => err as McpError)
  t.match(limited, { code: -32000, message: /AH_ERR_RATE_LIMITED/, data: { code: 'AH_ERR_RATE_LIMITED', statusCode: 429 } }, 'the host\'s refusal, its error body in data')
  t.same(await listed(client), [task.taskId], 'only the task that was created')
})

t.test('tasks/cancel cancels the run wherever it is and answers cancelled; a task in a terminal status cannot be cancelled', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { client } = await connect(t, url)
  const task = await createTask(client, 'scripted', { script: [{ op: 'markdown', content: 'started' }, { op: 'wait_abort' }] })
  const aborts = observed.aborts.length
  const cancelled = await client.experimental.tasks.cancelTask(task.taskId)
  t.match(cancelled, { taskId: task.taskId, status: 'cancelled' })
  t.ok(observed.aborts.length > aborts, 'the agent was aborted')
  t.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'cancelled')
  const result = await taskResult(client, task.taskId)
  t.equal(result.isError, true)
  t.same(texts(result), ['started', 'cancelled: the run was cancelled'], 'what a plain call whose run was cancelled returns')
  await t.rejects(client.experimental.tasks.cancelTask(task.taskId), { code: -32602, message: /terminal status: cancelled/ })

  const done = await createTask(client, 'scripted', { script: [] })
  await taskIs(client, done.taskId, 'completed')
  await t.rejects(client.experimental.tasks.cancelTask(done.taskId), { code: -32602, message: /terminal status: completed/ })
  await t.rejects(client.experimental.tasks.cancelTask(randomUUID()), NOT_FOUND)
})

t.test('a task is its principal\'s: any session of the key gets, awaits, lists and cancels it; another key gets the error for an unknown task, and lists none of it', async (t) => {
  const { url } = await listen(t, { ...apikey, AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const a = await connect(t, url, { key: KEY_A })
  const gate = randomUUID()
  const task = await createTask(a.client, 'scripted', { script: gated(gate) })
  const plainCall = await a.client.callTool({ name: 'scripted', arguments: { script: [{ op: 'markdown', content: 'plain' }] } })
  t.notOk(plainCall.isError)
  await t.rejects(a.client.experimental.tasks.getTask((plainCall._meta as Record<string, string>)[META_REQUEST_ID] as string), NOT_FOUND, 'a plain call\'s run is no task')

  const b = await connect(t, url, { key: KEY_B })
  await t.rejects(b.client.experimental.tasks.getTask(task.taskId), NOT_FOUND)
  await t.rejects(taskResult(b.client, task.taskId), NOT_FOUND)
  await t.rejects(b.client.experimental.tasks.cancelTask(task.taskId), NOT_FOUND)
  t.same(await listed(b.client), [], 'none of another key\'s tasks')
  const theirs = await createTask(b.client, 'scripted', { script: [] })
  t.same(await listed(b.client), [theirs.taskId])

  const again = await connect(t, url, { key: KEY_A })
  t.same(await listed(again.client), [task.taskId], 'the key\'s tasks, not its plain calls\' runs nor another key\'s tasks')
  t.equal((await again.client.experimental.tasks.getTask(task.taskId)).status, 'working')
  t.equal((await again.client.experimental.tasks.cancelTask(task.taskId)).status, 'cancelled')
  t.equal((await a.client.experimental.tasks.getTask(task.taskId)).status, 'cancelled', 'the session that created it sees the same')
})

t.test('tasks/list: the caller\'s tasks, newest first, a page at a time with an opaque cursor; a cursor it did not make is invalid params', async (t) => {
  const { url } = await listen(t)
  const { client } = await connect(t, url)
  const created: string[] = []
  for (let i = 0; i <= TASKS_PAGE; i++) created.push((await createTask(client, 'echo', { query: `n${i}` })).taskId)
  const firstPage = await client.experimental.tasks.listTasks()
  t.equal(firstPage.tasks.length, TASKS_PAGE)
  t.type(firstPage.nextCursor, 'string')
  const secondPage = await client.experimental.tasks.listTasks(firstPage.nextCursor)
  t.equal(secondPage.tasks.length, 1)
  t.notOk(secondPage.nextCursor, 'no more')
  t.same([...firstPage.tasks, ...secondPage.tasks].map((task) => task.taskId), [...created].reverse(), 'newest first, each once')
  t.match(secondPage.tasks[0], { taskId: created[0], ttl: 86_400_000, pollInterval: 1000 })
  await t.rejects(client.experimental.tasks.listTasks('not-a-cursor'), { code: -32602, message: /Invalid cursor/ })
})

t.test('a task whose run stops to ask: input_required, the question in statusMessage; tasks/result is the input-required result; answered in its session, the task goes on to completed', async (t) => {
  const { url } = await listen(t)
  const { client } = await connect(t, url)
  await client.listTools()
  const task = await createTask(client, 'ask', { question: 'Which colour?' })
  const asking = await taskIs(client, task.taskId, 'input_required')
  t.match(asking.statusMessage, /^Input required: Which colour\?/)

  const result = await taskResult(client, task.taskId)
  const interrupts = result._meta?.[META_INTERRUPTS] as Interrupt[]
  t.match(interrupts, [{ kind: 'input', message: 'Which colour?' }])
  const id = interrupts[0]?.id as string
  t.equal(result.isError, true, 'the ask tool declares an outputSchema: as a plain call, an error result the model reads')
  t.match(texts(result).at(-1), `call the tool "ask" again in this MCP session with the arguments {"resume":[{"interrupt_id":"${id}","value":"<answer>"}]}`)
  t.same(result._meta?.[RELATED_TASK_META_KEY], { taskId: task.taskId })
  const plain = await client.callTool({ name: 'ask', arguments: { question: 'Which colour?' } }) as CallToolResult
  t.same(texts(result).map((text) => text.replaceAll(id, '<id>').replace(/expires: \S+/, '')), texts(plain).map((text) => text.replaceAll(((plain._meta?.[META_INTERRUPTS] as Interrupt[])[0] as Interrupt).id, '<id>').replace(/expires: \S+/, '')), 'what a plain call without elicitation returns')

  const answered = await client.callTool({ name: 'ask', arguments: { resume: [{ interrupt_id: id, value: { answer: 'green' } }] } })
  t.same(answered.structuredContent, { question: 'Which colour?', answer: 'green' })
  await taskIs(client, task.taskId, 'completed')
  const done = await taskResult(client, task.taskId)
  t.same(done.structuredContent, { question: 'Which colour?', answer: 'green' }, 'the task\'s result is its runs\' together')
  t.equal(done._meta?.[META_REQUEST_ID], (answered._meta as Record<string, unknown>)[META_REQUEST_ID], 'its latest run')
  t.same(done._meta?.[RELATED_TASK_META_KEY], { taskId: task.taskId })

  const other = await createTask(client, 'ask', { question: 'Anyone?' })
  await taskIs(client, other.taskId, 'input_required')
  t.match(await client.experimental.tasks.cancelTask(other.taskId), { status: 'cancelled', statusMessage: /ended while it waited for an answer/ })
  const ended = await taskResult(client, other.taskId)
  t.equal(ended.isError, true)
  t.match(texts(ended).at(-1), /^cancelled: the run was ended while it waited for an answer/)
})

t.test('a client that takes elicitations: tasks/result of a task that waits asks its question on its own stream, naming the task, from any session of the principal; the answer goes on as the task', async (t) => {
  const { url } = await listen(t)
  const { client } = await connect(t, url)
  const task = await createTask(client, 'ask', { question: 'Which colour?' })
  await taskIs(client, task.taskId, 'input_required')

  // another session than the one that created it: the answer goes to the task's own CAP session
  const other = await eliciting(t, url, () => ({ action: 'accept', content: { answer: 'blue' } }))
  const result = await taskResult(other.client, task.taskId)
  t.notOk(result.isError)
  t.same(result.structuredContent, { question: 'Which colour?', answer: 'blue' })
  t.same(result._meta?.[RELATED_TASK_META_KEY], { taskId: task.taskId })
  t.match(other.asked, [{ mode: 'form', message: 'Which colour?', requestedSchema: { type: 'object', properties: { answer: { type: 'string' } } }, _meta: { [RELATED_TASK_META_KEY]: { taskId: task.taskId } } }], 'asked once, naming the task')
  t.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'completed', 'the session that created it sees it done')
  t.same(await taskResult(client, task.taskId), result)

  const declined = await createTask(client, 'ask', { question: 'Anything else?' })
  await taskIs(client, declined.taskId, 'input_required')
  const decliner = await eliciting(t, url, () => ({ action: 'decline' }))
  const ended = await taskResult(decliner.client, declined.taskId)
  t.equal(ended.isError, true)
  t.match(texts(ended).at(-1), /^cancelled: the run was ended while it waited for an answer/, 'an input declined ends the waiting run')
  t.equal((await client.experimental.tasks.getTask(declined.taskId)).status, 'cancelled')
})

t.test('tasks/result with elicitation: an elicitation that fails leaves the task waiting; an answer the engine refuses is asked again once, saying why', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  const { client } = await connect(t, url)
  const asks = [{ name: 'items', kind: 'input', message: 'items?', schema: { type: 'array', items: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } } }]
  const task = await createTask(client, 'asker', { asks })
  await taskIs(client, task.taskId, 'input_required')
  const failing = await eliciting(t, url, () => { throw new Error('this client shows no forms today') })
  await taskResult(failing.client, task.taskId)
  t.equal(failing.asked.length, 1)
  t.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'input_required', 'nothing answered: the task still waits')

  const answers: ElicitResult[] = [{ action: 'accept', content: { value: '"not a list"' } }, { action: 'accept', content: { value: '[{"n":2}]' } }]
  const fixer = await eliciting(t, url, () => answers.shift() as ElicitResult)
  const result = await taskResult(fixer.client, task.taskId)
  t.same(result.structuredContent, { items: [{ n: 2 }] })
  t.equal(fixer.asked.length, 2)
  t.match(fixer.asked[1]?.message, /^items\?\n\n\(The answer to interrupt "[0-9a-f-]{36}" is not valid: .*must be array\)$/, 'asked again with the engine\'s reason')
  t.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'completed')
})

t.test('a tasks/result the client gives up on answers nothing; the task goes on and a later one gets its result', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { client } = await connect(t, url)
  const gate = `give-up-${randomUUID()}`
  const task = await createTask(client, 'scripted', { script: gated(gate) })
  const controller = new AbortController()
  const waiting = client.request({ method: 'tasks/result', params: { taskId: task.taskId } }, CallToolResultSchema, { signal: controller.signal })
  await taskIs(client, task.taskId, 'working')
  controller.abort('gave up')
  await t.rejects(waiting)
  observed.released.add(gate)
  await taskIs(client, task.taskId, 'completed')
  t.match(await taskResult(client, task.taskId), { structuredContent: { gate } })
})

t.test('a task survives a restart: created on one app, polled on the next app on the same data folder, in a new MCP session', async (t) => {
  const dataDir = tempDataDir(t)
  const env = { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR }
  const before = await listen(t, env)
  const { client } = await connect(t, before.url)
  const task = await createTask(client, 'scripted', { script: [{ op: 'markdown', content: 'kept' }, { op: 'result', value: { kept: true } }] })
  await taskIs(client, task.taskId, 'completed')
  const result = await taskResult(client, task.taskId)
  await client.close()
  await before.app.close()

  const after = await listen(t, env)
  const next = await connect(t, after.url)
  t.match(await next.client.experimental.tasks.getTask(task.taskId), { taskId: task.taskId, status: 'completed', createdAt: task.createdAt })
  t.same(await taskResult(next.client, task.taskId), result)
  t.same(await listed(next.client), [task.taskId])
})

t.test('a task-augmented call polled across a crash: the server is SIGKILLed mid-run; the next server on the same data folder recovers the run once its lease lapses, and the task fails with run_interrupted', async (t) => {
  const dataDir = tempDataDir(t)
  const child = await startServer(t, { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '600' })
  const first = await connect(t, child.url)
  const task = await createTask(first.client, 'scripted', { script: [{ op: 'markdown', content: 'part of it' }, { op: 'sleep', ms: 60_000 }] })
  t.equal((await first.client.experimental.tasks.getTask(task.taskId)).status, 'working')
  child.child.kill('SIGKILL')
  await child.exited
  await first.client.close()

  const next = await listen(t, { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '300' })
  const { client } = await connect(t, next.url)
  const failed = await taskIs(client, task.taskId, 'failed', 20_000)
  t.match(failed, { taskId: task.taskId, createdAt: task.createdAt, statusMessage: /^run_interrupted: / })
  const result = await taskResult(client, task.taskId)
  t.equal(result.isError, true)
  t.same(texts(result), ['part of it', 'run_interrupted: The server running this request stopped before it finished'], 'what the run made before the crash, then why it ended')
  t.same(await listed(client), [task.taskId])
})

t.test('PostgreSQL: a task created on one instance is seen, awaited and cancelled from another on the same database', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) { t.comment(PG_MISSING); return }
  const env = { DATABASE_URL: url, WORKERS_PER_TYPE: '0', AGENTS_DIR: FIXTURE_AGENTS_DIR }
  const one = await listen(t, env)
  const two = await listen(t, env)
  const a = await connect(t, one.url)
  const b = await connect(t, two.url)
  const gate = randomUUID()
  const task = await createTask(a.client, 'scripted', { script: gated(gate) })
  t.equal((await b.client.experimental.tasks.getTask(task.taskId)).status, 'working', 'the other instance sees the run as it is')
  const waiting = taskResult(b.client, task.taskId)
  observed.released.add(gate)
  const result = await waiting
  t.same(texts(result), ['half way, done', JSON.stringify({ gate })], 'awaited on the other instance')
  t.equal((await a.client.experimental.tasks.getTask(task.taskId)).status, 'completed')
  t.same(await listed(b.client), [task.taskId])

  const endless = await createTask(a.client, 'scripted', { script: [{ op: 'wait_abort' }] })
  t.equal((await b.client.experimental.tasks.cancelTask(endless.taskId)).status, 'cancelled', 'cancelled from the other instance, answered once its owner has ended it')
  t.equal((await a.client.experimental.tasks.getTask(endless.taskId)).status, 'cancelled')
})

t.test('the guide\'s tasks example works as written: a task-augmented call answers its task, tasks/get its status, tasks/result the plain call\'s result', async (t) => {
  const { url } = await listen(t, { ...apikey })
  const [script] = docBlocks('docs/mcp.md', '### Durable tool calls (tasks)')
  t.ok(script, 'a shell block')
  const out = await runShell((script as string).replaceAll('http://127.0.0.1:3000', url), { env: { AGENT_HOST_KEY: KEY_A } })
  const [status, content] = out.trim().split('\n').slice(-2)
  // a machine loaded enough to take three seconds between two curls sees the run completed: either is the task's status
  t.match(status, /^(working|completed)$/, out)
  t.equal(content, '[{"type":"text","text":"one two three "}]', out)
})
