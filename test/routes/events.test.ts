import t from 'tap'
import { request } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { build, envelope, FIXTURE_AGENTS_DIR, listen } from '../helper.js'
import { observed } from '../fixtures/agents/scripted/index.js'

// The event log's own contract, on SQLite and on PostgreSQL, is test/storage/events-contract.test.ts;
// here: events through the app (what agents emit, GET /v1/events and its SSE tail).
const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'
const cloudEvent = (id: string, extra: Record<string, unknown> = {}) => ({ specversion: '1.0', id, source: '/agents/test', type: 'com.example.step', time: '2026-11-22T10:00:00+02:00', data: { n: 1 }, ...extra })
const graphEvent = { event_type: 'NODE_DONE', run_id: 'run-1', node_id: 'n1', timestamp: '2026-11-22T10:00:00Z', payload: { ok: true } }

t.test('emitted CloudEvents and graph events are stored with their request, session and trace', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, {
    script: [
      { op: 'emit', event: cloudEvent('c1', { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', customext: 'x' }) },
      { op: 'emit', event: graphEvent },
      { op: 'log', level: 'warn', message: 'careful' }
    ]
  })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  t.equal(res.statusCode, 200)
  const events = await app.events.list({ request_id: body.request_id })
  t.same(events.map((e) => [e.kind, e.type]), [['cloudevent', 'com.example.step'], ['graph', 'NODE_DONE'], ['cloudevent', 'agent.log']])
  for (const e of events) {
    t.equal(e.session_id, body.context.session_id)
    t.equal(e.trace_id, (body.context.trace as { trace_id: string }).trace_id)
    t.equal(e.visibility, 'internal')
  }
  t.equal(events[0]?.time, '2026-11-22T08:00:00.000Z', 'times are stored in UTC')
  t.match(events[0]?.event, { customext: 'x', data: { n: 1 } })
  t.match(events[2]?.event, { specversion: '1.0', data: { level: 'warn', message: 'careful', metadata: { step: 'log' } } })
  t.same(res.json().output.events, [], 'internal events never reach the client')
})

t.test('malformed events are refused to the agent and nothing is stored', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const bad = [
    { specversion: '0.3', id: 'x', source: '/s', type: 't' },
    { specversion: '1.0', source: '/s', type: 't' },
    { specversion: '1.0', id: 'x', source: '/s', type: 't', time: 'yesterday' },
    { specversion: '1.0', id: 'x', source: '/s', type: 't', traceparent: 'nope' },
    { specversion: '1.0', id: 'x', source: '/s', type: 't', 'Bad-Ext': 1 },
    { ...graphEvent, event_type: 'node_done' },
    { ...graphEvent, payload: 'x' },
    { hello: 'world' }
  ]
  const body = envelope(SCRIPTED, { script: bad.map((event) => ({ op: 'emit', event })), catch: true })
  await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  const errors = observed.errors.filter((e) => e.sessionId === body.context.session_id)
  t.equal(errors.length, bad.length)
  t.ok(errors.every((e) => e.code === 'AH_ERR_EVENT_INVALID'))
  t.same(await app.events.list({ request_id: body.request_id }), [])
})

t.test('GET /v1/events filters by session, request, type and time, and pages with after/next', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const a = envelope(SCRIPTED, { script: [1, 2, 3].map((i) => ({ op: 'emit', event: cloudEvent(`a${i}`, { type: i === 2 ? 'two' : 'other' }) })) })
  const b = envelope(SCRIPTED, { script: [{ op: 'emit', event: cloudEvent('b1', { time: '2030-01-01T00:00:00Z' }) }] })
  for (const body of [a, b]) await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  const get = async (qs: string) => (await app.inject({ url: `/v1/events?${qs}` })).json()
  t.equal((await get(`session_id=${a.context.session_id}`)).events.length, 3)
  t.equal((await get(`request_id=${b.request_id}`)).events.length, 1)
  t.same((await get('type=two')).events.map((e: { event: { id: string } }) => e.event.id), ['a2'])
  t.same((await get('since=2029-01-01T00:00:00Z')).events.map((e: { event: { id: string } }) => e.event.id), ['b1'])
  const page1 = await get('limit=2')
  t.equal(page1.events.length, 2)
  t.type(page1.next, 'number')
  const page2 = await get(`limit=2&after=${page1.next as number}`)
  t.same(page2.events.map((e: { event: { id: string } }) => e.event.id), ['a3', 'b1'])
  t.notOk('next' in (await get('limit=10')), 'no next on the last page')
  t.equal((await app.inject({ url: '/v1/events?since=yesterday' })).statusCode, 400)
})

t.test('GET /v1/events?follow=true tails new events as SSE, from Last-Event-ID', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, SSE_HEARTBEAT_MS: '50' })
  const first = envelope(SCRIPTED, { script: [{ op: 'emit', event: cloudEvent('old') }] })
  await app.inject({ method: 'POST', url: '/v1/assist', payload: first })
  const oldSeq = (await app.events.list())[0]?.seq ?? 0
  let text = ''
  const res = await new Promise<import('node:http').IncomingMessage>((resolve) => {
    request(`${url}/v1/events?follow=true&type=com.example.step`, { headers: { 'last-event-id': String(oldSeq) } }, resolve).end()
  })
  t.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8')
  res.on('data', (c: Buffer) => { text += c.toString() })
  await sleep(120)
  const next = envelope(SCRIPTED, { script: [{ op: 'emit', event: cloudEvent('new') }, { op: 'emit', event: cloudEvent('other', { type: 'x' }) }] })
  await app.inject({ method: 'POST', url: '/v1/assist', payload: next })
  const deadline = Date.now() + 3000
  while (!text.includes('"new"') && Date.now() < deadline) await sleep(10)
  const frames = text.split('\n\n').filter((f) => f.startsWith('event: agent.event'))
  t.equal(frames.length, 1, 'only the new matching event, not the one before the cursor')
  const [, idLine, dataLine] = frames[0]?.split('\n') ?? []
  const event = JSON.parse(dataLine?.slice(6) ?? '{}')
  t.equal(idLine, `id: ${event.seq as number}`)
  t.equal(event.event.id, 'new')
  t.match(text, /: ping/, 'heartbeats keep the tail open')
  const ended = new Promise((resolve) => res.on('end', resolve))
  await app.close()
  await ended
  t.pass('the tail ends when the server closes')
})

t.test('regression (issue 31): GET /v1/events with Accept: text/event-stream alone tails as follow=true does; otherwise a page', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const res = await new Promise<import('node:http').IncomingMessage>((resolve) => {
    request(`${url}/v1/events`, { headers: { accept: 'text/event-stream' } }, resolve).end()
  })
  t.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8')
  res.destroy()
  const page = await app.inject({ url: '/v1/events', headers: { accept: 'application/json, text/event-stream' } })
  t.match(page.json(), { events: [] }, 'both types: a page')
  t.match((await app.inject({ url: '/v1/events?follow=false', headers: { accept: 'text/event-stream' } })).json(), { events: [] }, 'follow=false: a page')
})
