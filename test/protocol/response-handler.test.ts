import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { AGENTS, build, envelope, FIXTURE_AGENTS_DIR } from '../helper.js'
import { checkErrorBody, checkServiceResponse, parseSse } from '../sse.js'
import { observed } from '../fixtures/agents/scripted/index.js'
import type { Transcript } from '../../src/protocol/response.js'
import type { StreamPacket } from '../../src/protocol/packets.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

async function post (app: FastifyInstance, script: unknown[], mode: 'json' | 'sse', extra: Record<string, unknown> = {}, agentRequest: Record<string, unknown> = {}) {
  const body = envelope(SCRIPTED, { script, ...extra }, { agentRequest })
  const res = await app.inject({
    method: 'POST',
    url: '/v1/assist',
    headers: { accept: mode === 'json' ? 'application/json' : 'text/event-stream' },
    payload: body
  })
  return { res, key: body.context.session_id }
}

async function json (app: FastifyInstance, script: unknown[], extra: Record<string, unknown> = {}) {
  const { res, key } = await post(app, script, 'json', extra)
  t.equal(res.statusCode, 200, res.body)
  const raw = res.json()
  const body = checkServiceResponse(raw, 'events' in raw.output)
  return { output: body.output as unknown as Transcript, body, key }
}

async function sse (app: FastifyInstance, script: unknown[], extra: Record<string, unknown> = {}, agentRequest: Record<string, unknown> = {}) {
  const { res, key } = await post(app, script, 'sse', extra, agentRequest)
  t.equal(res.statusCode, 200)
  return { packets: parseSse(res.body).packets, key }
}

const EVERY_EVENT = [
  { op: 'thought', content: 'thinking' },
  { op: 'thought', content: 'done thinking', status: 'COMPLETE' },
  { op: 'markdown', content: '# Title\n' },
  { op: 'data', data: { a: 1 }, title: 'A table', view_hint: 'TABLE' },
  { op: 'data', data: { b: 2 } },
  { op: 'citations', citations: [{ source_id: 's1', uri: 'https://x.test/1', title: 'One', confidence: 0.5 }] },
  { op: 'progress', label: 'step', status: 'running', percent: 0.5 },
  { op: 'progress', label: 'step' },
  { op: 'media', items: [{ url: 'https://x.test/i.png', mime_type: 'image/png' }] },
  { op: 'emit', event: { id: '9b2f3c4d-0000-4000-8000-000000000001', timestamp: '2026-11-22T10:00:00.000Z', type: 'MARKDOWN_BLOCK', data: { content: 'emitted' } } },
  { op: 'open', name: 's', title: 'Stream', metadata: { k: 'v' } },
  { op: 'write', name: 's', chunk: 'hello ' },
  { op: 'write', name: 's', chunk: 'world' },
  { op: 'close', name: 's' }
]

t.test('every handler method maps to the packets of CAP.md §5, in order', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { packets } = await sse(app, EVERY_EVENT)
  const main = packets.at(-1)?.stream_id
  const ops = packets.map((p) => `${p.stream_id === main ? 'main' : 'sub'}:${p.op}:${p.op === 'EVENT' ? p.p.type : typeof p.p === 'string' ? p.p : (p.p as { code: string }).code}`)
  t.same(ops, [
    'main:EVENT:THOUGHT_TRACE', 'main:EVENT:THOUGHT_TRACE', 'main:EVENT:MARKDOWN_BLOCK', 'main:EVENT:DATA', 'main:EVENT:DATA',
    'main:EVENT:CITATION_BLOCK', 'main:EVENT:PROGRESS_INDICATOR', 'main:EVENT:PROGRESS_INDICATOR', 'main:EVENT:MEDIA_CAROUSEL',
    'main:EVENT:MARKDOWN_BLOCK', 'sub:EVENT:STREAM_START', 'sub:DELTA:hello ', 'sub:DELTA:world', 'sub:CLOSE:done', 'main:CLOSE:done'
  ])
  const p = (i: number) => (packets[i] as StreamPacket & { op: 'EVENT' }).p as unknown as Record<string, unknown>
  t.match(p(0), { type: 'THOUGHT_TRACE', data: { thought: 'thinking', status: 'IN_PROGRESS' } })
  t.match(p(1), { data: { status: 'COMPLETE' } })
  t.match(p(3), { type: 'DATA', title: 'A table', view_hint: 'TABLE', data: { a: 1 } })
  t.match(p(4), { type: 'DATA', view_hint: 'JSON', data: { b: 2 } })
  t.notOk('title' in p(4), 'absent optional fields are left out, not null')
  t.match(p(6), { data: { label: 'step', status: 'running', progress_percent: 0.5 } })
  t.same(p(7).data, { label: 'step', status: 'running' })
  t.same(p(10), { type: 'STREAM_START', title: 'Stream', metadata: { k: 'v' } })
  t.equal(p(9).id, '9b2f3c4d-0000-4000-8000-000000000001', 'emit() sends the event as given')
})

t.test('JSON mode: the same script gives a lossless transcript', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { output, body } = await json(app, [...EVERY_EVENT, { op: 'error', message: 'careful', recoverable: true }])
  t.equal(output.text, '# Title\nemittedhello world')
  t.same(output.events.map((e) => e.type), [
    'THOUGHT_TRACE', 'THOUGHT_TRACE', 'MARKDOWN_BLOCK', 'DATA', 'DATA', 'CITATION_BLOCK', 'PROGRESS_INDICATOR',
    'PROGRESS_INDICATOR', 'MEDIA_CAROUSEL', 'MARKDOWN_BLOCK', 'STREAM_START'
  ])
  t.equal(output.streams.length, 1)
  t.match(output.streams[0], { title: 'Stream', text: 'hello world', state: 'closed' })
  t.notOk('reason' in (output.streams[0] as object))
  t.same(output.errors, [{ code: 'agent_error', message: 'careful', severity: 'WARNING' }])
  t.equal(body.metrics?.packets, 16)
  t.ok((body.metrics?.latency_ms ?? -1) >= 0)
})

t.test('result() makes the JSON output exactly the object, and a RESULT event in SSE', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const value = { answer: 42, nested: { list: [1, 'two', null] } }
  const { output } = await json(app, [{ op: 'thought', content: 'x' }, { op: 'result', value }])
  t.same(output, value)
  const { packets } = await sse(app, [{ op: 'result', value }])
  t.same(packets[0]?.p, { type: 'RESULT', data: value })
})

t.test('result() may be called once, and only with a plain object', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { key, output } = await json(app, [
    { op: 'result', value: [1] }, { op: 'result', value: { a: 1 } }, { op: 'result', value: { a: 2 } }
  ], { catch: true })
  t.same(output, { a: 1 })
  t.same(observed.errors.filter((e) => e.sessionId === key).map((e) => e.code), ['AH_ERR_EVENT_INVALID', 'AH_ERR_EVENT_INVALID'])
})

t.test('invalid presentation payloads are refused and never reach the wire', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { packets, key } = await sse(app, [
    { op: 'citations', citations: [{ source_id: 's', uri: 'u', title: 't', confidence: 7 }] },
    { op: 'progress', label: 'x', status: 'bogus' },
    { op: 'media', items: [{ url: 'u' }] },
    { op: 'data', data: 'not an object' },
    { op: 'emit', event: { type: 'THOUGHT_TRACE', data: { thought: 'no id' } } },
    { op: 'emit', event: 'a string' },
    { op: 'open', name: 's', metadata: [1] },
    { op: 'error', message: 'm', details: 'not an object' },
    { op: 'thought', content: 'still fine' }
  ], { catch: true })
  t.equal(observed.errors.filter((e) => e.sessionId === key && e.code === 'AH_ERR_EVENT_INVALID').length, 8)
  t.same(packets.map((p) => p.op), ['EVENT', 'CLOSE'])
})

t.test('emit() of a non-presentation event is recorded internally, not sent', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { packets } = await sse(app, [
    { op: 'emit', event: { specversion: '1.0', type: 'com.example.thing', source: '/x', id: '1' } },
    { op: 'log', level: 'warn', message: 'a log line' },
    { op: 'log', level: 'nonsense', message: 'falls back to info' },
    { op: 'audit' }
  ])
  t.same(packets.map((p) => p.op), ['CLOSE'])
})

t.test('stream.abort() sends ERROR stream_aborted then CLOSE "aborted" on that stream only', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const script = [
    { op: 'open', name: 'a', title: 'A' }, { op: 'open', name: 'b', title: 'B' },
    { op: 'write', name: 'a', chunk: 'a1' }, { op: 'write', name: 'b', chunk: 'b1' },
    { op: 'abort', name: 'a', reason: 'gave up' }, { op: 'abort', name: 'a', reason: 'again' },
    { op: 'write', name: 'b', chunk: 'b2' }, { op: 'close', name: 'b' }, { op: 'close', name: 'b' }
  ]
  const { packets } = await sse(app, script)
  const a = packets.filter((p) => p.op !== 'EVENT' && p.seq > 1 && packets.find((q) => q.stream_id === p.stream_id && q.op === 'EVENT' && (q.p as { title?: string }).title === 'A'))
  t.same(a.map((p) => [p.op, p.p]), [
    ['DELTA', 'a1'],
    ['ERROR', { code: 'stream_aborted', message: 'gave up', severity: 'FATAL' }],
    ['CLOSE', 'aborted']
  ])
  t.equal(packets.at(-1)?.p, 'done', 'the response itself ends normally')
  const { output } = await json(app, script)
  t.same(output.streams.map((s) => [s.title, s.text, s.state, s.reason]), [['A', 'a1', 'aborted', 'gave up'], ['B', 'b1b2', 'closed', undefined]])
})

t.test('interleaved streams keep their own seq counters', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const script: unknown[] = [{ op: 'open', name: 'a' }, { op: 'open', name: 'b' }, { op: 'open', name: 'c' }]
  for (let i = 0; i < 5; i++) for (const n of ['a', 'b', 'c']) script.push({ op: 'write', name: n, chunk: `${n}${i}` })
  script.push({ op: 'close', name: 'b' })
  const { packets } = await sse(app, script)
  const ids = new Set(packets.map((p) => p.stream_id))
  t.equal(ids.size, 4)
  for (const id of ids) {
    const seqs = packets.filter((p) => p.stream_id === id).map((p) => p.seq)
    t.same(seqs, seqs.map((_, i) => i + 1))
  }
  const closes = packets.filter((p) => p.op === 'CLOSE')
  t.equal(closes.length, 4, 'streams left open are closed when assist() returns')
  t.same(closes.map((p) => p.p), ['done', 'done', 'done', 'done'])
})

t.test('writes after close throw to the agent and the stream stays valid', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { packets, key } = await sse(app, [
    { op: 'open', name: 's' }, { op: 'close', name: 's' }, { op: 'write', name: 's', chunk: 'late' },
    { op: 'open', name: 't' }, { op: 'abort', name: 't', reason: 'r' }, { op: 'write', name: 't', chunk: 'late' },
    { op: 'open', name: 'u' }, { op: 'write', name: 'u', chunk: 42 },
    { op: 'markdown', content: 'goes on' }
  ], { catch: true })
  t.same(observed.errors.filter((e) => e.sessionId === key).map((e) => e.code), ['AH_ERR_STREAM_CLOSED', 'AH_ERR_STREAM_CLOSED', 'AH_ERR_EVENT_INVALID'])
  t.notOk(packets.some((p) => p.p === 'late'))
  t.equal(packets.at(-1)?.op, 'CLOSE')
})

t.test('a FATAL error() ends every stream with "aborted", fires the signal, and later calls reject', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { packets, key } = await sse(app, [
    { op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'partial' },
    { op: 'error', message: 'cannot go on', details: { why: 'x' } },
    { op: 'markdown', content: 'too late' }, { op: 'write', name: 's', chunk: 'too late' }
  ], { catch: true })
  const tail = packets.slice(-3).map((p) => [p.op, p.p])
  t.same(tail, [['ERROR', { code: 'agent_error', message: 'cannot go on', severity: 'FATAL', details: { why: 'x' } }], ['CLOSE', 'aborted'], ['CLOSE', 'aborted']])
  t.equal(packets.at(-1)?.stream_id, packets[0]?.stream_id === packets.at(-1)?.stream_id ? packets[0]?.stream_id : packets.at(-1)?.stream_id)
  t.same(observed.errors.filter((e) => e.sessionId === key).map((e) => e.code), ['AH_ERR_STREAM_CLOSED', 'AH_ERR_STREAM_CLOSED'])
  t.match(observed.aborts.find((a) => a.sessionId === key)?.reason, { name: 'AbortError', kind: 'agent_error' })
  const { output } = await json(app, [{ op: 'markdown', content: 'some' }, { op: 'error', message: 'fatal' }])
  t.equal(output.text, 'some')
  t.match(output.errors, [{ code: 'agent_error', severity: 'FATAL' }])
})

t.test('an agent that throws: agent_failed with the message hidden, unless marked safe', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { packets } = await sse(app, [
    { op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'x' }, { op: 'throw', message: 'password=hunter2 at db.internal' }
  ])
  t.same(packets.slice(-3).map((p) => [p.op, p.p]), [
    ['ERROR', { code: 'agent_failed', message: 'The agent failed', severity: 'FATAL' }], ['CLOSE', 'aborted'], ['CLOSE', 'aborted']
  ])
  t.notOk(JSON.stringify(packets).includes('hunter2'))
  const safe = await sse(app, [{ op: 'throw', message: 'Quota reached, try tomorrow', safe: true, details: { quota: 10 } }])
  t.same(safe.packets[0]?.p, { code: 'agent_failed', message: 'Quota reached, try tomorrow', severity: 'FATAL', details: { quota: 10 } })
  const after = await app.inject({ method: 'GET', url: '/health' })
  t.equal(after.statusCode, 200, 'the server is still up')
})

t.test('JSON mode: a fatal failure with no output is a 502 with the agent error in details', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { res } = await post(app, [{ op: 'throw', message: 'internal secret' }], 'json')
  t.equal(res.statusCode, 502)
  const body = checkErrorBody(res.json())
  t.equal(body.code, 'AH_ERR_AGENT_FAILED')
  t.same(body.details, { error: { code: 'agent_failed', message: 'The agent failed', severity: 'FATAL' } })
  t.notOk(res.body.includes('internal secret'))
  const fatal = await post(app, [{ op: 'error', message: 'no data for you' }], 'json')
  t.equal(fatal.res.statusCode, 502)
  t.match(fatal.res.json().details, { error: { code: 'agent_error', message: 'no data for you' } })
  const partial = await json(app, [{ op: 'thought', content: 'x' }, { op: 'throw', message: 'boom' }])
  t.match(partial.output.errors, [{ code: 'agent_failed' }], 'with output it is a 200 carrying the error')
})

t.test('supported_events filters presentation events off the SSE wire without gaps in seq', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const script = [
    { op: 'thought', content: 't' }, { op: 'markdown', content: 'm' }, { op: 'data', data: { a: 1 } },
    { op: 'progress', label: 'p' }, { op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'x' }
  ]
  const { packets } = await sse(app, script, {}, { capabilities: { supported_events: ['MARKDOWN_BLOCK'] } })
  t.same(packets.filter((p) => p.op === 'EVENT').map((p) => (p.p as { type: string }).type), ['MARKDOWN_BLOCK', 'DATA', 'STREAM_START'])
  const body = envelope(SCRIPTED, { script }, { agentRequest: { capabilities: { supported_events: ['MARKDOWN_BLOCK'] } } })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
  t.equal((res.json().output as Transcript).events.length, 5, 'the JSON transcript keeps every event')
})

t.test('the session records each interaction and keeps stored values', async (t) => {
  const app = await build(t)
  const sessionId = '7e57e57e-0000-4000-8000-000000000001'
  for (const expected of [1, 2, 3]) {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo, { query: `q${expected}` }, { sessionId }) })
    t.same(res.json().output, { echo: `q${expected}`, calls: expected })
  }
  const handle = app.sessions.open(sessionId, { user_id: 'u', tier: 'free', locale: 'en' })
  const history = await handle.history(2)
  t.same(history.map((h) => h.input), [{ query: 'q2' }, { query: 'q3' }], 'newest last')
  t.same((await handle.history(1, 1)).map((h) => h.output), [{ echo: 'q2', calls: 2 }])
  t.same(await handle.get('calls'), 3)
  t.equal(await handle.get('missing', 'fallback'), 'fallback')
  const hits = await handle.recall('q2 echo', 5, 0.5)
  t.equal(hits[0]?.kind, 'interaction')
  t.ok(hits.every((h) => h.score >= 0.5 && h.score <= 1))
  await handle.store('colour', { name: 'ultramarine' })
  const [hit, ...rest] = await handle.recall('Ultramarine', 1)
  t.match(hit, { kind: 'value', ref: 'colour', content: { key: 'colour', value: { name: 'ultramarine' } } })
  t.ok((hit?.score ?? 0) > 0 && (hit?.score ?? 1) < 1, 'a normalised BM25 score')
  t.same(rest, [])
  t.same(await handle.recall('', 5), [])
})
