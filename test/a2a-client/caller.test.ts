import t from 'tap'
import { randomUUID } from 'node:crypto'
import type { A2ACallContext } from '../../src/a2a-client/remote-agents.js'
import type { A2AUpdate } from '../../src/protocol/a2a-client.js'
import { until } from '../socket.js'
import { serveRemoteAgents } from './remote.js'

// The caller an agent gets as `host.a2a`, called directly (as an agent would) for what a run
// cannot easily provoke: its own signal, an onUpdate that throws, a remote that goes away, and the
// registry closing under a call.

const { app, remote } = await serveRemoteAgents(t)

/** A caller for the agent `a2a-caller`, as the engine makes one for a run; `run` aborts the run's signal. */
function caller (): { call: ReturnType<typeof app.a2aAgents.caller>['call'], run: AbortController, requestId: string } {
  const run = new AbortController()
  const requestId = randomUUID()
  const context: A2ACallContext = { agent: 'a2a-caller', owner: 'test-owner', requestId, sessionId: randomUUID(), traceId: randomUUID(), signal: run.signal }
  const { call } = app.a2aAgents.caller(context)
  return { call, run, requestId }
}

/** The task id of the message the remote got after `before` messages, once it got it. */
async function remoteTask (before: number): Promise<string> {
  // a ceiling for a hung call: the first call of a process loads the A2A client, slow on a loaded machine
  await until('the remote got the message', () => remote.received.length > before, 30_000)
  return remote.received[before]?.taskId as string
}

const audited = (requestId: string): Array<Record<string, unknown>> => app.audit.list({ action: 'a2a.call', request_id: requestId }) as unknown as Array<Record<string, unknown>>

t.test('a task that does not stream is followed with GetTask: an artifact seen again unchanged is not told again, one that grew is told its new chunks', async (t) => {
  const { call } = caller()
  const updates: A2AUpdate[] = []
  const pending = call('plain', 'chunks', {}, { onUpdate: (u) => { updates.push(u) } })
  await until('the first chunk', () => updates.some((u) => u.type === 'artifact'))
  const polls = remote.plainCalls
  await until('another GetTask', () => remote.plainCalls > polls, 10_000)
  remote.openGate()
  const answer = await pending
  t.match(answer, { status: 'success', result: 'abc', metadata: { streamed: false, state: 'completed' } })
  t.same(updates.filter((u) => u.type === 'artifact').map((u) => u.type === 'artifact' && [u.content, u.append]), [['a', false], ['bc', true]])
})

t.test('the caller\'s own signal: the remote task is cancelled and the call rejects with the signal\'s reason', async (t) => {
  const { call, requestId } = caller()
  const stop = new AbortController()
  const before = remote.received.length
  const pending = call('scanner', 'slow', {}, { signal: stop.signal })
  const taskId = await remoteTask(before)
  const reason = new Error('the agent gave up')
  stop.abort(reason)
  await t.rejects(pending, reason)
  t.ok(remote.cancels.includes(taskId), 'the executor saw the cancel')
  t.match(audited(requestId), [{ success: false, details: { status: 'failure', error: 'the call was stopped: the agent gave up' } }])
})

t.test('the run\'s signal stops a call that did not pass one', async (t) => {
  const { call, run } = caller()
  const before = remote.received.length
  const pending = call('plain', 'slow', {})
  const taskId = await remoteTask(before)
  run.abort(new Error('run over'))
  await t.rejects(pending, { message: 'run over' })
  t.ok(remote.cancels.includes(taskId), 'the executor saw the cancel')
})

t.test('a call whose signal already fired reaches nothing, and is recorded', async (t) => {
  const { call, run, requestId } = caller()
  run.abort(new Error('too late'))
  const before = remote.received.length
  await t.rejects(call('scanner', 'echo', {}), { message: 'too late' })
  t.equal(remote.received.length, before)
  t.match(audited(requestId), [{ success: false, details: { error: 'the call was stopped: too late' } }])
})

t.test('an onUpdate that throws cancels the remote task and rejects the call with its error', async (t) => {
  const { call, requestId } = caller()
  const before = remote.received.length
  const broken = new Error('the agent\'s handler broke')
  const seen: A2AUpdate[] = []
  await t.rejects(call('scanner', 'slow', {}, { onUpdate: (u) => { seen.push(u); throw broken } }), broken)
  t.equal(seen.length, 1, 'no update after the throw')
  t.ok(remote.cancels.includes(await remoteTask(before)), 'the executor saw the cancel')
  t.match(audited(requestId), [{ success: false, details: { error: /onUpdate threw: the agent's handler broke/ } }])
})

t.test('a remote that goes away mid-call is a failure; the task is still cancelled once it can be reached', async (t) => {
  const { call } = caller()
  const before = remote.received.length
  const pending = call('scanner', 'slow', {})
  const taskId = await remoteTask(before)
  remote.drop()
  const answer = await pending
  t.match(answer, { status: 'failure', metadata: { task_id: taskId, state: 'working', cancelled: true, error: /^"scanner" failed: / } })
  t.ok(remote.cancels.includes(taskId))
})

t.test('a signal fired with a reason that is not an Error: the call rejects with it as it is', async (t) => {
  const { call, requestId } = caller()
  const stop = new AbortController()
  stop.abort('enough')
  await t.rejects(call('scanner', 'echo', {}, { signal: stop.signal }), 'enough')
  t.match(audited(requestId), [{ details: { error: 'the call was stopped: enough' } }])
})

t.test('closing the registry gives up the calls still going, and cancels their remote tasks', async (t) => {
  const { call } = caller()
  const before = remote.received.length
  const pending = call('scanner', 'slow', {})
  const taskId = await remoteTask(before)
  await app.a2aAgents.close()
  await t.rejects(pending, { code: 'AH_ERR_RUN_ABORTED', kind: 'shutdown' })
  t.ok(remote.cancels.includes(taskId))
  // closed: every later call is given up at once
  await t.rejects(caller().call('scanner', 'echo', {}), { code: 'AH_ERR_RUN_ABORTED', kind: 'shutdown' })
})

t.test('options that are not an object are refused', async (t) => {
  await t.rejects(caller().call('scanner', 'echo', {}, null as unknown as undefined), { code: 'AH_ERR_REMOTE_CALL_INVALID', message: /options must be an object/ })
  await t.rejects(caller().call('scanner', 'echo', {}, { onUpdate: 'x' as unknown as undefined }), { code: 'AH_ERR_REMOTE_CALL_INVALID', message: /onUpdate must be a function/ })
})

t.test('a call that cannot be recorded (the database closed) still answers; the failure is logged', async (t) => {
  await app.close()
  t.match(await caller().call('nobody', 'echo', {}), { status: 'failure', metadata: { error: /no external agent "nobody"/ } })
})
