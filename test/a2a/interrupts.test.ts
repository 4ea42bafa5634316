// Human in the loop over A2A: a task goes to input-required (or auth-required), and a message with
// its taskId answers and goes on with it, under the same task id, over both bindings with the
// official SDK client against a real server (one restarted in between). The waiting itself is
// tested in-process over CAP: test/assist/interrupts.test.ts.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { Role, TaskState, type Message, type Part, type StreamResponse, type Task } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import { RequestMalformedError } from '@a2a-js/sdk/errors'
import { endState, TaskProjection } from '../../src/a2a/task-projection.js'
import { resumeFromMessage, textValue } from '../../src/a2a/resume-answer.js'
import type { StreamPacket } from '../../src/protocol/packets.js'
import { AGENTS, listen } from '../helper.js'
import { until } from '../socket.js'
import { docBlocks, runShell } from '../docs/doc-blocks.js'
import { a2aClient, ALICE, BINDINGS, BOB, data, KEYS, merge, message, text } from './client.js'

const INTERRUPT_AGENTS = fileURLToPath(new URL('../fixtures/interrupt-agents/', import.meta.url))
const ASKER = 'f0000000-0000-4000-8000-0000000000a1'
const ENV = { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' }

const send = (m: Message, returnImmediately = false) => ({ tenant: '', message: m, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately }, metadata: undefined })
const get = async (a2a: Client, id: string, historyLength?: number): Promise<Task> => await a2a.getTask({ tenant: '', id, historyLength })
const list = async (a2a: Client, contextId: string, status = TaskState.TASK_STATE_UNSPECIFIED) =>
  await a2a.listTasks({ tenant: '', contextId, status, pageSize: 10, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: true })
const dataOf = (task: Task, artifactId: string): unknown => task.artifacts.find((a) => a.artifactId === artifactId)?.parts.find((p) => p.content?.$case === 'data')?.content?.value
const partsOf = (m: Message | undefined): Array<Part['content']> => (m?.parts ?? []).map((p) => p.content)

interface WireInterrupt { id: string, kind: string, message: string, reason?: string, expires_at: string }
/** The interrupts a task's status message holds (its data part). */
const interruptsOf = (task: Task): WireInterrupt[] => (partsOf(task.status?.message).find((c) => c?.$case === 'data')?.value as { interrupts: WireInterrupt[] }).interrupts

/** A message that continues task `task`. */
const reply = (task: Task, parts: Part[], extra: Partial<Message> = {}): Message => message(parts, { taskId: task.id, ...extra })

for (const binding of BINDINGS) {
  t.test(`${binding}: a question is an input-required task; a text message with its taskId answers, and the same task completes`, async (t) => {
    const { url } = await listen(t, ENV)
    const a2a = await a2aClient(url, AGENTS.ask, binding)
    const asked = await a2a.sendMessage(send(message([data({ question: 'Your name?' })]))) as Task
    t.equal(asked.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED)
    t.match(asked.status?.message, { role: Role.ROLE_AGENT, taskId: asked.id, contextId: asked.contextId })
    t.same(partsOf(asked.status?.message)[0], { $case: 'text', value: 'Your name?' }, 'the question as text')
    const [question] = interruptsOf(asked)
    t.match(question, { kind: 'input', message: 'Your name?', schema: { required: ['answer'] }, expires_at: String })

    const done = await a2a.sendMessage(send(reply(asked, [text('Ada')]))) as Task
    t.equal(done.id, asked.id, 'one task across the question and its answer')
    t.equal(done.contextId, asked.contextId)
    t.equal(done.status?.state, TaskState.TASK_STATE_COMPLETED)
    t.same(dataOf(done, 'result'), { question: 'Your name?', answer: 'Ada' }, 'the text is the one required string property of the schema')
    t.match(done.history, [
      { role: Role.ROLE_USER, parts: [{ content: { $case: 'data', value: { question: 'Your name?' } } }] },
      { role: Role.ROLE_AGENT, parts: [{ content: { $case: 'text', value: 'Your name?' } }, { content: { $case: 'data' } }] },
      { role: Role.ROLE_USER, taskId: asked.id, parts: [{ content: { $case: 'data', value: { resume: [{ interrupt_id: question?.id, value: { answer: 'Ada' } }] } } }] }
    ], 'the history: the ask, the question, the answer')

    t.same(await get(a2a, asked.id), done, 'GetTask shows the chain\'s latest run under the first id')
    const listed = await list(a2a, asked.contextId)
    t.same(listed.tasks.map((task) => [task.id, task.status?.state]), [[asked.id, TaskState.TASK_STATE_COMPLETED]], 'ListTasks lists the chain once, as it is now')
    t.equal(listed.totalSize, 1)
    t.same((await list(a2a, asked.contextId, TaskState.TASK_STATE_COMPLETED)).tasks.map((task) => task.id), [asked.id], 'found by its state now')
    t.same((await list(a2a, asked.contextId, TaskState.TASK_STATE_INPUT_REQUIRED)).tasks, [], 'not by the state it was in')

    await t.rejects(a2a.sendMessage(send(reply(asked, [text('Bob')]))), { name: /UnsupportedOperationError/, message: /has ended/ }, 'a completed task takes no more input')
  })

  t.test(`${binding}: streaming: the stream ends input-required; the answer's stream goes on with the same task to its end`, async (t) => {
    const { url } = await listen(t, ENV)
    const a2a = await a2aClient(url, AGENTS.ask, binding)
    const first: StreamResponse[] = []
    for await (const event of a2a.sendMessageStream(send(message([data({ question: 'Ship it?', approve: true })])))) first.push(event)
    const last = first.at(-1)?.payload
    t.equal(last?.$case === 'statusUpdate' && last.value.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED, 'the last event: input-required')
    const asked = merge(first)
    t.match(interruptsOf(asked), [{ kind: 'approval', message: 'Ship it?' }])

    const rest: StreamResponse[] = []
    for await (const event of a2a.sendMessageStream(send(reply(asked, [text('no: not on a Friday')])))) rest.push(event)
    t.equal(rest[0]?.payload?.$case === 'task' && rest[0].payload.value.id, asked.id, 'the answer\'s stream is the same task')
    t.ok(rest.every((e) => e.payload?.$case === 'task' || (e.payload?.value as { taskId: string }).taskId === asked.id), 'every event under the task\'s id')
    const done = merge(rest)
    t.equal(done.status?.state, TaskState.TASK_STATE_COMPLETED)
    t.same(dataOf(done, 'result'), { question: 'Ship it?', approved: false, comment: 'not on a Friday' }, '"no" rejects, and what follows is the comment')
    t.same(await get(a2a, asked.id), done, 'the merged stream is the task GetTask answers')
  })
}

t.test('the answer goes to another server on the same DATA_DIR; only the task\'s caller may answer', async (t) => {
  const env = { ...ENV, AUTH_MODE: 'apikey', API_KEYS: KEYS }
  const one = await listen(t, env)
  const asked = await (await a2aClient(one.url, AGENTS.ask, 'JSONRPC', ALICE)).sendMessage(send(message([data({ question: 'Still there?' })]))) as Task
  t.equal(asked.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED)
  await one.app.close()

  const two = await listen(t, { ...env, DATA_DIR: one.app.config.DATA_DIR })
  const alice = await a2aClient(two.url, AGENTS.ask, 'HTTP+JSON', ALICE)
  const bob = await a2aClient(two.url, AGENTS.ask, 'HTTP+JSON', BOB)
  t.equal((await get(alice, asked.id)).status?.state, TaskState.TASK_STATE_INPUT_REQUIRED, 'the new server shows the task waiting')
  await t.rejects(bob.sendMessage(send(reply(asked, [text('me')]))), { name: /TaskNotFoundError/ }, 'another caller\'s task is not found')
  const done = await alice.sendMessage(send(reply(asked, [data({ answer: 'yes' })]))) as Task
  t.equal(done.id, asked.id)
  t.same([done.status?.state, dataOf(done, 'result')], [TaskState.TASK_STATE_COMPLETED, { question: 'Still there?', answer: 'yes' }], 'a data part is the value itself')
})

t.test('answers that are wrong, ambiguous or late are refused as A2A errors, and the task still waits', async (t) => {
  const { url } = await listen(t, { ...ENV, AGENTS_DIR: INTERRUPT_AGENTS })
  const a2a = await a2aClient(url, ASKER, 'JSONRPC')
  const asks = [{ name: 'a', kind: 'input', message: 'First?' }, { name: 'b', kind: 'approval', message: 'Second?' }]
  const asked = await a2a.sendMessage(send(message([data({ asks, parallel: true })]))) as Task
  const [a, b] = interruptsOf(asked)
  t.equal(asked.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED)
  t.equal(partsOf(asked.status?.message)[0]?.value, 'First?\n\nSecond?', 'every question in the text')
  await t.rejects(a2a.sendMessage(send(reply(asked, [text('one')]))), { name: /RequestMalformedError/, message: /waits for 2 answers/ }, 'a text answers one question only')
  await t.rejects(a2a.sendMessage(send(reply(asked, [data({ interrupt_id: b?.id, value: { approved: 'sure' } })]))), { name: /RequestMalformedError/, message: /AH_ERR_INTERRUPT_ANSWER_INVALID/ }, 'an answer its question does not take')
  await t.rejects(a2a.sendMessage(send(reply(asked, [data({ interrupt_id: randomUUID(), value: 1 })]))), { name: /TaskNotFoundError/, message: /AH_ERR_INTERRUPT_NOT_FOUND/ }, 'a question nobody asked')
  await t.rejects(a2a.sendMessage(send(reply(asked, [text('x')], { contextId: randomUUID() }))), { name: /RequestMalformedError/, message: /context/ }, 'another context')
  t.equal((await get(a2a, asked.id)).status?.state, TaskState.TASK_STATE_INPUT_REQUIRED, 'still waiting')

  // one answer of two: the task asks the other again, under its id
  const half = await a2a.sendMessage(send(reply(asked, [data({ interrupt_id: a?.id, value: 'alpha' })]))) as Task
  t.same([half.id, half.status?.state, interruptsOf(half).map((i) => i.id)], [asked.id, TaskState.TASK_STATE_INPUT_REQUIRED, [b?.id]], 'the open question only')
  const m = reply(asked, [text('approve')])
  const done = await a2a.sendMessage(send(m)) as Task
  t.same([done.status?.state, dataOf(done, 'result')], [TaskState.TASK_STATE_COMPLETED, { a: 'alpha', b: { approved: true } }])
  t.same(await a2a.sendMessage(send(m)), done, 'the same message again is the same answer (idempotent by messageId)')
  await t.rejects(a2a.sendMessage(send(reply(asked, [text('no')]))), { name: /UnsupportedOperationError/ }, 'the task ended')
  t.same((await list(a2a, asked.contextId)).tasks.map((task) => task.id), [asked.id], 'three runs, one task')

  const late = await a2a.sendMessage(send(message([data({ asks: [{ name: 'c', kind: 'input', message: 'Quick?', expires_in_s: 0.05 }] })]))) as Task
  await until('the question to expire', () => Date.parse(interruptsOf(late)[0]?.expires_at ?? '') < Date.now())
  await t.rejects(a2a.sendMessage(send(reply(late, [text('now')]))), { name: /UnsupportedOperationError/, message: /AH_ERR_INTERRUPT_EXPIRED/ }, 'an expired question')
  t.match((await get(a2a, late.id)).status, { state: TaskState.TASK_STATE_FAILED, message: { parts: [{ content: { $case: 'text' } }, { content: { $case: 'data', value: { error: { code: 'interrupt_expired' } } } }] } }, 'the task failed')
})

t.test('auth-required; SubscribeToTask on a waiting task; CancelTask of a waiting task ends it, audited', async (t) => {
  const { app, url } = await listen(t, { ...ENV, AGENTS_DIR: INTERRUPT_AGENTS })
  const a2a = await a2aClient(url, ASKER, 'HTTP+JSON')
  const asked = await a2a.sendMessage(send(message([data({ asks: [{ name: 'token', kind: 'input', message: 'Your API token?', auth: true }] })]))) as Task
  t.equal(asked.status?.state, TaskState.TASK_STATE_AUTH_REQUIRED, 'a question for credentials')
  t.match(interruptsOf(asked), [{ reason: 'auth' }])
  t.same((await list(a2a, asked.contextId, TaskState.TASK_STATE_AUTH_REQUIRED)).tasks.map((task) => task.id), [asked.id])

  const subscribed: StreamResponse[] = []
  for await (const event of a2a.resubscribeTask({ tenant: '', id: asked.id })) subscribed.push(event)
  t.same(subscribed.map((e) => e.payload?.$case), ['task'], 'the task as it stands, and the stream ends, as the message\'s did')
  t.equal(merge(subscribed).status?.state, TaskState.TASK_STATE_AUTH_REQUIRED)

  const cancelled = await a2a.cancelTask({ tenant: '', id: asked.id, metadata: undefined })
  t.equal(cancelled.status?.state, TaskState.TASK_STATE_CANCELED)
  t.equal((await get(a2a, asked.id)).status?.state, TaskState.TASK_STATE_CANCELED)
  t.match(await app.stores.audit.list({ action: 'assist.cancel' }), [{ request_id: asked.id, details: { waiting: true } }], 'audited as any cancel')
  await t.rejects(a2a.sendMessage(send(reply(asked, [text('s3cret')]))), { name: /UnsupportedOperationError/ }, 'it takes no answer now')
  await t.rejects(a2a.cancelTask({ tenant: '', id: randomUUID(), metadata: undefined }), { name: /TaskNotFoundError/ })
})

t.test('a task with questions answered in a later run: one task, the answer\'s run followed', async (t) => {
  const { url } = await listen(t, { ...ENV, AGENTS_DIR: INTERRUPT_AGENTS })
  const a2a = await a2aClient(url, ASKER, 'JSONRPC')
  const asks = [{ name: 'x', kind: 'input', message: 'X?', schema: { type: 'string' } }, { name: 'y', kind: 'input', message: 'Y?', schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } }]
  const events: StreamResponse[] = []
  for await (const event of a2a.sendMessageStream(send(message([data({ asks })])))) events.push(event)
  const asked = merge(events)
  t.same(interruptsOf(asked).map((i) => i.message), ['X?'], 'one question at a time')
  const next = await a2a.sendMessage(send(reply(asked, [text('ex')]))) as Task
  t.same([next.id, interruptsOf(next).map((i) => i.message)], [asked.id, ['Y?']], 'the next question, same task')
  await t.rejects(a2a.sendMessage(send(reply(next, [text('7')]))), { name: /RequestMalformedError/, message: /data part/ }, 'a text cannot be an object with a number')
  const rest: StreamResponse[] = []
  for await (const event of a2a.sendMessageStream(send(reply(next, [data({ n: 7 })])))) rest.push(event)
  const done = merge(rest)
  t.same([done.id, done.status?.state, dataOf(done, 'result')], [asked.id, TaskState.TASK_STATE_COMPLETED, { x: 'ex', y: { n: 7 } }])
  const response = done.artifacts.filter((a) => a.name === 'response')
  t.equal(response.length, 1, 'the markdown of every run is one artifact')
  t.match(response[0]?.parts.map((p) => p.content?.value), ['asking x', 'asking y'])
  t.same(await get(a2a, asked.id), done)
  t.equal((await get(a2a, asked.id, 2)).history.length, 2, 'historyLength holds')
})

t.test('the "Human in the loop over A2A" example of docs/a2a.md works as written (only the port changes)', async (t) => {
  const { url } = await listen(t, ENV)
  const [curls] = docBlocks('docs/a2a.md', '#### Human in the loop over A2A')
  t.ok(curls !== undefined, 'a shell block')
  const [asked, answered] = (await runShell((curls as string).replaceAll('http://127.0.0.1:3000', url))).trim().split('\n').map((line) => JSON.parse(line) as { result: { task: Task & { status: { state: string } } } })
  t.match(asked?.result.task, { id: '5f0c2a9e-8d4b-4c6e-9a1f-3b7d2e4c6a80', status: { state: 'TASK_STATE_INPUT_REQUIRED', message: { parts: [{ text: 'Which city?' }, { data: { interrupts: [{ kind: 'input' }] } }] } } })
  t.match(answered?.result.task, { id: '5f0c2a9e-8d4b-4c6e-9a1f-3b7d2e4c6a80', status: { state: 'TASK_STATE_COMPLETED' }, artifacts: [{ artifactId: 'result', parts: [{ data: { question: 'Which city?', answer: 'Oslo' } }] }] })
})

t.test('projection: INTERRUPT is the input-required status, the CLOSE ends the stream in it; continueWith goes on under the same task', async (t) => {
  const request: Message = { messageId: 'm1', contextId: 'c', taskId: 't', role: Role.ROLE_USER, parts: [], metadata: undefined, extensions: [], referenceTaskIds: [] }
  const projection = new TaskProjection({ taskId: 't', contextId: 'c', mainStreamId: 'main', request, submittedAt: new Date(0).toISOString(), metadata: {} })
  const at = new Date(1).toISOString()
  const interrupt = { id: randomUUID(), kind: 'input' as const, message: 'Why?', reason: 'auth' as const, expires_at: at }
  const events = projection.apply({ stream_id: 'main', seq: 1, t: at, op: 'EVENT', p: { type: 'INTERRUPT', interrupts: [interrupt] } } as unknown as StreamPacket)
  t.match(events, [{ payload: { $case: 'statusUpdate', value: { status: { state: TaskState.TASK_STATE_AUTH_REQUIRED, message: { parts: [{ content: { value: 'Why?' } }, { content: { value: { interrupts: [interrupt] } } }] } } } } }])
  t.same(projection.apply({ stream_id: 'main', seq: 2, t: at, op: 'CLOSE', p: 'input_required' } as StreamPacket), [], 'no second status')
  t.ok(projection.ended)
  t.equal(endState('input_required'), TaskState.TASK_STATE_INPUT_REQUIRED)
  projection.continueWith({ mainStreamId: 'main2', request: { ...request, messageId: 'm2' }, startedAt: at })
  t.same([projection.ended, projection.state], [false, TaskState.TASK_STATE_WORKING])
  t.same(projection.task().history.map((m) => m.messageId), ['m1', 't:1', 'm2'], 'the question between the messages')
  projection.apply({ stream_id: 'main2', seq: 1, t: at, op: 'CLOSE', p: 'done' } as StreamPacket)
  t.equal(projection.task().status?.state, TaskState.TASK_STATE_COMPLETED, 'the next run\'s CLOSE ends the task')
})

t.test('a text as an answer: yes or no for an approval, the value of a string input, the one string field of an object', async (t) => {
  const id = randomUUID()
  t.same(textValue({ id, kind: 'approval' }, ' Yes '), { approved: true })
  t.same(textValue({ id, kind: 'approval' }, 'Rejected. Too risky'), { approved: false, comment: 'Too risky' })
  t.throws(() => textValue({ id, kind: 'approval' }, 'maybe'), RequestMalformedError)
  t.throws(() => textValue({ id, kind: 'approval' }, 'yesterday'), RequestMalformedError)
  t.equal(textValue({ id, kind: 'input' }, 'free text'), 'free text')
  t.same(textValue({ id, kind: 'input', schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }, 'Oslo'), { city: 'Oslo' })
  t.throws(() => textValue({ id, kind: 'input', schema: { type: 'object', properties: { a: { type: 'string' }, b: { type: 'string' } }, required: ['a', 'b'] } }, 'x'), RequestMalformedError)
  const open = [{ id, kind: 'input' as const }]
  t.same(resumeFromMessage(message([data({ resume: [{ interrupt_id: id, value: 1 }] })]), open), [{ interrupt_id: id, value: 1 }])
  t.throws(() => resumeFromMessage(message([]), open), RequestMalformedError, 'a message that answers nothing')
  t.throws(() => resumeFromMessage(message([text('a'), data({ v: 1 })]), open), RequestMalformedError, 'text and data: which one?')
})
