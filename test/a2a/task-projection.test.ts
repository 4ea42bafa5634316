import t from 'tap'
import { randomUUID } from 'node:crypto'
import { Role, TaskState, type StreamResponse } from '@a2a-js/sdk'
import { TaskProjection } from '../../src/a2a/task-projection.js'
import type { StreamPacket } from '../../src/protocol/packets.js'
import { build, FIXTURE_AGENTS_DIR, SCRIPTED } from '../helper.js'
import { parseSse } from '../sse.js'

/** The JSON-RPC results of an A2A SSE answer, in order. */
function results (body: string): Array<Record<string, any>> {
  return body.split('\n\n').filter((block) => block.startsWith('data: ')).map((block) => (JSON.parse(block.slice(6)) as { result: Record<string, any> }).result)
}

t.test('CAP packets as A2A stream events: thoughts and progress as working statuses, data, citations, media and result as artifacts, a warning as a status, usage in the task', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  const script = [
    { op: 'thought', content: 'thinking', status: 'planning' },
    { op: 'progress', label: 'step 1', status: 'running', percent: 0.5 },
    { op: 'data', data: { rows: 3 }, title: 'Table', view_hint: 'table' },
    { op: 'citations', citations: [{ source_id: 's1', uri: 'https://example.com', title: 'Example', confidence: 0.9 }] },
    { op: 'media', items: [{ url: 'https://example.com/a.png', mime_type: 'image/png', alt_text: 'a picture' }] },
    { op: 'error', message: 'a hiccup', recoverable: true },
    { op: 'usage', usage: { input_tokens: 10, output_tokens: 4 }, cost: 0.01 },
    { op: 'markdown', content: 'Hello ' },
    { op: 'markdown', content: 'world' },
    { op: 'result', value: { answer: 42 } }
  ]
  const res = await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}`, headers: { 'a2a-version': '1.0' }, payload: { jsonrpc: '2.0', id: 1, method: 'SendStreamingMessage', params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ data: { script } }] } } } })
  t.match(res.headers['content-type'], /^text\/event-stream/)
  const events = results(res.body)
  t.ok(events[0]?.task !== undefined, 'the task first')
  const statuses = events.filter((e) => e.statusUpdate !== undefined).map((e) => e.statusUpdate.status)
  t.match(statuses[0], { state: 'TASK_STATE_WORKING', message: { role: 'ROLE_AGENT', parts: [{ text: 'thinking' }, { data: { event: { type: 'THOUGHT_TRACE', status: 'planning' } } }] } })
  t.match(statuses[1], { state: 'TASK_STATE_WORKING', message: { parts: [{ text: 'step 1' }, { data: { event: { type: 'PROGRESS_INDICATOR', status: 'running', progress_percent: 0.5 } } }] } })
  t.match(statuses[2], { state: 'TASK_STATE_WORKING', message: { parts: [{ text: 'Warning: a hiccup' }, { data: { error: { severity: 'WARNING' } } }] } })
  t.match(statuses.at(-1), { state: 'TASK_STATE_COMPLETED' })
  t.notOk('message' in statuses.at(-1), 'a completed task\'s last status has no message')
  const artifacts = events.filter((e) => e.artifactUpdate !== undefined).map((e) => e.artifactUpdate)
  t.match(artifacts[0], { artifact: { name: 'Table', parts: [{ data: { rows: 3 } }], metadata: { view_hint: 'table' } } })
  t.match(artifacts[1], { artifact: { name: 'citations', parts: [{ data: { citations: [{ source_id: 's1' }] } }] } })
  t.match(artifacts[2], { artifact: { name: 'media', parts: [{ url: 'https://example.com/a.png', mediaType: 'image/png', metadata: { alt_text: 'a picture' } }] } })
  t.match(artifacts[3], { artifact: { name: 'response', parts: [{ text: 'Hello ' }] } })
  t.match(artifacts[4], { append: true, artifact: { parts: [{ text: 'world' }] } }, 'the next markdown block is appended to the response')
  t.match(artifacts[5], { artifact: { artifactId: 'result', parts: [{ data: { answer: 42 } }] } })

  const taskId = events[0]?.task.id as string
  const got = (await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}`, headers: { 'a2a-version': '1.0' }, payload: { jsonrpc: '2.0', id: 2, method: 'GetTask', params: { id: taskId, historyLength: 0 } } })).json().result
  t.match(got.metadata, { agent_host: { agent: 'scripted', usage: { input_tokens: 10, output_tokens: 4, cost: 0.01 } } }, 'usage in the task\'s metadata')
  t.notOk('history' in got, 'historyLength 0: no history')
  t.same(got.artifacts.find((a: { name: string }) => a.name === 'response').parts, [{ text: 'Hello ' }, { text: 'world' }])
})

t.test('a run that fails: the task fails with the error that ended it, over JSON-RPC and as CAP saw it', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  const body = { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ data: { script: [{ op: 'markdown', content: 'partial' }, { op: 'throw', message: 'it broke' }] } }] } } }
  const task = (await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}`, headers: { 'a2a-version': '1.0' }, payload: body })).json().result.task
  t.match(task.status, { state: 'TASK_STATE_FAILED', message: { role: 'ROLE_AGENT', parts: [{ text: /.+/ }, { data: { error: { code: 'agent_failed', severity: 'FATAL' } } }] } })
  t.match(task.artifacts, [{ name: 'response', parts: [{ text: 'partial' }] }], 'what it made before it failed')
  const cap = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: { request_id: randomUUID(), context: { session_id: task.contextId, agent_id: SCRIPTED, user: { user_id: 'u', tier: 'free', locale: 'en' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() }, payload: { session_id: task.contextId, payload: { script: [] } } } })
  t.equal(cap.statusCode, 200, 'the contextId is the CAP session: a CAP client of the same caller goes on in it')
  t.equal(parseSse(cap.body).packets.at(-1)?.op, 'CLOSE')
})

t.test('the projection by itself: shutdown and cancel end states, a stream\'s title names its artifact, an aborted stream is a status', async (t) => {
  const main = randomUUID()
  const side = randomUUID()
  const at = '2026-11-26T00:00:00.000Z'
  const seed = { taskId: randomUUID(), contextId: randomUUID(), mainStreamId: main, request: { messageId: 'm', contextId: '', taskId: '', role: Role.ROLE_USER, parts: [], metadata: undefined, extensions: [], referenceTaskIds: [] }, submittedAt: at, metadata: {} }
  const p = (stream: string, seq: number, rest: Record<string, unknown>): StreamPacket => ({ stream_id: stream, seq, t: at, ...rest }) as StreamPacket
  const projection = new TaskProjection(seed)
  const out: StreamResponse[] = [
    ...projection.apply(p(side, 1, { op: 'EVENT', p: { type: 'STREAM_START', title: 'Draft' } })),
    ...projection.apply(p(side, 2, { op: 'DELTA', p: 'abc' })),
    ...projection.apply(p(side, 3, { op: 'ERROR', p: { code: 'stream_aborted', message: 'gave up', severity: 'FATAL' } })),
    ...projection.apply(p(side, 4, { op: 'CLOSE', p: 'aborted' })),
    ...projection.apply(p(main, 1, { op: 'CLOSE', p: 'shutdown' }))
  ]
  t.match(out[0], { payload: { $case: 'artifactUpdate', value: { artifact: { artifactId: side, name: 'Draft' } } } })
  t.match(out[1], { payload: { $case: 'statusUpdate', value: { status: { state: TaskState.TASK_STATE_WORKING } } } }, 'the side stream\'s abort: a status, the task goes on')
  t.match(out[2], { payload: { $case: 'statusUpdate', value: { status: { state: TaskState.TASK_STATE_FAILED, message: { parts: [{ content: { value: /shut down/ } }] } } } } })
  t.equal(out.length, 3, 'a side stream\'s CLOSE is no event')
  t.ok(projection.ended)

  const cancelled = new TaskProjection(seed)
  t.match(cancelled.apply(p(main, 1, { op: 'CLOSE', p: 'cancelled' })), [{ payload: { value: { status: { state: TaskState.TASK_STATE_CANCELED, message: undefined } } } }])
  t.same(new TaskProjection(seed).task({ historyLength: 1 }).history.length, 1)
})
