import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { AGENTS, build, envelope, FIXTURE_AGENTS_DIR, listen } from '../helper.js'
import { open, until } from '../socket.js'
import { checkErrorBody, parseSse } from '../sse.js'
import { observed } from '../fixtures/agents/scripted/index.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'
const timeout = (ms: unknown) => ({ agentRequest: { metadata: { timeout_ms: ms } } })

t.test('a run past its timeout ends with run_timeout (TRANSIENT) and the agent\'s signal fires', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'x' }, { op: 'wait_abort' }] }, timeout(200))
  const started = Date.now()
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: body })
  t.ok(Date.now() - started < 2000)
  const packets = parseSse(res.body).packets
  t.match(packets.filter((p) => p.op === 'ERROR').map((p) => p.p), [{ code: 'run_timeout', severity: 'TRANSIENT', details: { timeout_ms: 200 } }])
  t.same(packets.filter((p) => p.op === 'CLOSE').map((p) => p.p), ['aborted', 'aborted'])
  t.match(observed.aborts.find((a) => a.sessionId === body.context.session_id)?.reason, { kind: 'timeout' })
})

t.test('JSON mode: a run that times out with nothing produced is a 504; RUN_TIMEOUT_MS caps what a request asks', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_TIMEOUT_MS: '150' })
  const started = Date.now()
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(SCRIPTED, { script: [{ op: 'wait_abort' }] }, timeout(60_000)) })
  t.ok(Date.now() - started < 2000, 'the server\'s limit won over the request\'s 60 s')
  t.equal(res.statusCode, 504)
  t.match(checkErrorBody(res.json()), { code: 'AH_ERR_RUN_TIMEOUT', details: { error: { code: 'run_timeout', details: { timeout_ms: 150 } } } })
  for (const bad of ['soon', 0, -5, 1.5]) {
    const r = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(SCRIPTED, { script: [] }, timeout(bad)) })
    t.equal(r.statusCode, 400, `timeout_ms ${String(bad)}`)
    t.match(checkErrorBody(r.json()).details, { errors: [{ path: '/payload/metadata/timeout_ms' }] })
  }
  const quick = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'in time' }] }, timeout(100)) })
  t.equal(quick.statusCode, 200, 'a run that ends in time is untouched')
})

t.test('under pressure: 503 AH_ERR_OVERLOADED with Retry-After; /health says degraded; /metrics still answers', async (t) => {
  const app = await build(t, { MAX_EVENT_LOOP_DELAY_MS: '100', PRESSURE_SAMPLE_MS: '20' })
  await app.ready()
  const block = (ms: number): void => { const end = Date.now() + ms; while (Date.now() < end); }
  // a loaded CI machine can start with a delayed loop (the boot itself): wait until it settles
  let res = await app.inject({ url: '/v1/agents' })
  for (let i = 0; i < 250 && res.statusCode !== 200; i++) {
    await sleep(20)
    res = await app.inject({ url: '/v1/agents' })
  }
  t.equal(res.statusCode, 200, 'fine before')
  // the sampler may land between blocks on a loaded machine: block until it sees one (bounded).
  // Ask right after the sampler's overdue tick (a 1 ms timer fires after it): a later tick sees an
  // idle loop again and lifts the pressure before the request is made.
  for (let i = 0; i < 20 && res.statusCode !== 503; i++) {
    block(400)
    await sleep(1)
    res = await app.inject({ url: '/v1/agents' })
  }
  t.equal(res.statusCode, 503)
  t.match(checkErrorBody(res.json()), { code: 'AH_ERR_OVERLOADED', message: /eventLoopDelay/ })
  t.equal(res.headers['retry-after'], '1')
  const health = await app.inject({ url: '/health' })
  t.equal(health.statusCode, 200)
  t.equal(health.json().status, 'degraded')
  const metrics = await app.inject({ url: '/metrics' })
  t.equal(metrics.statusCode, 200)
  t.match(metrics.body, /agent_host_overloaded_total\{type="eventLoopDelay"\} [1-9]/)
  let recovered = false
  for (let i = 0; i < 250 && !recovered; i++) {
    await sleep(20)
    recovered = (await app.inject({ url: '/health' })).json().status === 'ok'
  }
  t.ok(recovered, 'back to ok once the loop is idle')
  t.equal((await app.inject({ url: '/v1/agents' })).statusCode, 200)
})

t.test('rate limit per caller: 429 AH_ERR_RATE_LIMITED with Retry-After past RATE_LIMIT_MAX; each key counts alone', async (t) => {
  // windows of 3 s: a loaded CI machine must not roll one over between the requests that fill it
  const app = await build(t, { AUTH_MODE: 'apikey', RATE_LIMIT_MAX: '3', RATE_LIMIT_WINDOW_MS: '3000', WORKERS_PER_TYPE: '0' })
  const a = { authorization: `Bearer ${(await app.keys.create({ name: 'a', scopes: ['agents:read'] })).key}` }
  const b = { authorization: `Bearer ${(await app.keys.create({ name: 'b', scopes: ['agents:read'] })).key}` }
  const remaining: string[] = []
  for (let i = 0; i < 3; i++) {
    const res = await app.inject({ url: '/v1/agents', headers: a })
    t.equal(res.statusCode, 200)
    remaining.push(String(res.headers['x-ratelimit-remaining']))
  }
  t.same(remaining, ['2', '1', '0'], 'X-RateLimit-Remaining counts down')
  const refused = await app.inject({ url: '/v1/agents', headers: a })
  t.equal(refused.statusCode, 429)
  t.match(checkErrorBody(refused.json()), { code: 'AH_ERR_RATE_LIMITED', message: /this caller may make 3 requests per 3 s/, details: { limit: 'caller', max: 3, window_ms: 3000 } })
  t.ok(Number(refused.headers['retry-after']) >= 1, 'Retry-After is set')
  t.equal((await app.inject({ url: '/v1/agents', headers: b })).statusCode, 200, 'another key has its own budget')
  for (let i = 0; i < 5; i++) t.equal((await app.inject({ url: '/health' })).statusCode, 200, 'public routes are not limited')
  await sleep(3100)
  t.equal((await app.inject({ url: '/v1/agents', headers: a })).statusCode, 200, 'a new window, a new budget')
  const metrics = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${(await app.keys.create({ name: 'm', scopes: ['admin'] })).key}` } })
  t.match(metrics.body, /agent_host_rate_limited_total\{limit="caller"\} 1\n/)
})

t.test('rate limit per caller with auth off: each client address counts alone', async (t) => {
  const app = await build(t, { RATE_LIMIT_MAX: '2', WORKERS_PER_TYPE: '0' })
  for (let i = 0; i < 2; i++) t.equal((await app.inject({ url: '/v1/agents', remoteAddress: '10.0.0.1' })).statusCode, 200)
  t.equal((await app.inject({ url: '/v1/agents', remoteAddress: '10.0.0.1' })).statusCode, 429)
  t.equal((await app.inject({ url: '/v1/agents', remoteAddress: '10.0.0.2' })).statusCode, 200)
})

t.test('rate limit per agent: RATE_LIMIT_AGENT_MAX new runs per window across callers; a retry of a known request is free', async (t) => {
  const app = await build(t, { RATE_LIMIT_AGENT_MAX: '2', RATE_LIMIT_MAX: '0', WORKERS_PER_TYPE: '0' })
  const first = envelope(AGENTS.echo)
  const json = { accept: 'application/json' }
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: first, remoteAddress: '10.0.0.1' })).statusCode, 200)
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: envelope(AGENTS.echo), remoteAddress: '10.0.0.2' })).statusCode, 200)
  const refused = await app.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: envelope(AGENTS.echo), remoteAddress: '10.0.0.3' })
  t.equal(refused.statusCode, 429, 'a third caller finds the agent\'s budget spent')
  t.match(checkErrorBody(refused.json()), { code: 'AH_ERR_RATE_LIMITED', message: /agent "echo" may be given 2 new runs per/, details: { limit: 'agent', max: 2 } })
  t.ok(Number(refused.headers['retry-after']) >= 1)
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: first })).statusCode, 200, 'the retry of a known request id is answered from the journal')
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: envelope(AGENTS.echoStream) })).statusCode, 200, 'another agent has its own budget')
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: envelope(AGENTS.echo, { nope: 1 }) })).statusCode, 400, 'a bad request is refused before it counts')
  t.match((await app.inject({ url: '/metrics' })).body, /agent_host_rate_limited_total\{limit="agent"\} 1\n/)
})

t.test('SSE stream caps: MAX_STREAMS_PER_CALLER (429) and MAX_STREAMS (503); a slot frees when its stream ends', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, AUTH_MODE: 'apikey', MAX_STREAMS_PER_CALLER: '2', MAX_STREAMS: '3', WORKERS_PER_TYPE: '0' })
  const key = async (name: string): Promise<Record<string, string>> => ({ authorization: `Bearer ${(await app.keys.create({ name, scopes: ['assist:invoke', 'events:internal'] })).key}` })
  const a = await key('a')
  const b = await key('b')
  const waiting = (): ReturnType<typeof envelope> => envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'wait_abort' }] })
  const a1 = await open(url, waiting(), undefined, a)
  const a2 = await open(url, waiting(), undefined, a)
  t.same([a1.res.statusCode, a2.res.statusCode], [200, 200])
  const third = waiting()
  const a3 = await open(url, third, undefined, a)
  await a3.ended
  t.equal(a3.res.statusCode, 429, 'a third stream for the same key')
  // regression: the cap was checked after the run had started, so a refused caller's agent ran anyway
  const cancel = await fetch(`${url}/v1/assist/${third.request_id}/cancel`, { method: 'POST', headers: a })
  t.equal(cancel.status, 404, 'the refused request started no run')
  t.match(checkErrorBody(JSON.parse(a3.text())), { code: 'AH_ERR_TOO_MANY_STREAMS', message: /this caller holds 2 open already/, details: { limit: 'caller_streams', max: 2 } })
  t.equal(a3.res.headers['retry-after'], '1')
  const json = await open(url, envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'json' }] }), 'application/json', a)
  await json.ended
  t.equal(json.res.statusCode, 200, 'a JSON answer takes no stream slot')

  const b1 = await open(url, waiting(), undefined, b)
  t.equal(b1.res.statusCode, 200)
  const follow = await fetch(`${url}/v1/events?follow=true`, { headers: b })
  t.equal(follow.status, 503, 'the server is full: an event feed is a stream too')
  t.match(checkErrorBody(await follow.json()), { code: 'AH_ERR_TOO_MANY_STREAMS', details: { limit: 'total_streams', max: 3 } })
  t.equal(follow.headers.get('retry-after'), '1')
  t.equal(app.limits.streams.open, 3)

  a1.res.destroy()
  await until('the slot to be freed', () => app.limits.streams.open === 2)
  const again = await fetch(`${url}/v1/events?follow=true`, { headers: b })
  t.equal(again.status, 200, 'a freed slot can be taken')
  await again.body?.cancel()
  await until('the feed to be closed', () => app.limits.streams.open === 2)
  const metrics = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${(await app.keys.create({ name: 'm', scopes: ['admin'] })).key}` } })
  t.match(metrics.body, /agent_host_rate_limited_total\{limit="caller_streams"\} 1\n/)
  t.match(metrics.body, /agent_host_rate_limited_total\{limit="total_streams"\} 1\n/)
  for (const s of [a2, b1]) s.res.destroy()
  await until('every slot to be freed', () => app.limits.streams.open === 0)
})

t.test('failed authentications: 401 and audited up to AUTH_FAILURE_MAX per address, then 429 and not audited; good keys still pass', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', AUTH_FAILURE_MAX: '3', RATE_LIMIT_WINDOW_MS: '3000', WORKERS_PER_TYPE: '0' })
  const good = { authorization: `Bearer ${(await app.keys.create({ name: 'good', scopes: ['agents:read'] })).key}` }
  const bad = { authorization: 'Bearer ahk_0000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }
  const denials = async (): Promise<number> => (await app.audit.list({ action: 'auth.deny', limit: 1000 })).length
  for (const headers of [bad, {}, bad]) t.equal((await app.inject({ url: '/v1/agents', headers, remoteAddress: '10.0.0.9' })).statusCode, 401)
  t.equal(await denials(), 3)
  for (let i = 0; i < 5; i++) {
    const res = await app.inject({ url: '/v1/agents', headers: bad, remoteAddress: '10.0.0.9' })
    t.equal(res.statusCode, 429)
    t.match(checkErrorBody(res.json()), { code: 'AH_ERR_RATE_LIMITED', message: /this address failed to authenticate 3 times per 3 s/, details: { limit: 'auth_failures', max: 3 } })
    t.ok(Number(res.headers['retry-after']) >= 1)
  }
  t.equal(await denials(), 3, 'the refusals past the limit are not audited')
  t.equal((await app.inject({ url: '/v1/agents', headers: good, remoteAddress: '10.0.0.9' })).statusCode, 200, 'a good key from the same address still passes')
  t.equal((await app.inject({ url: '/v1/agents', headers: bad, remoteAddress: '10.0.0.8' })).statusCode, 401, 'another address has its own count')
  await sleep(3100)
  t.equal((await app.inject({ url: '/v1/agents', headers: bad, remoteAddress: '10.0.0.9' })).statusCode, 401, 'a new window')
  const metrics = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${(await app.keys.create({ name: 'm', scopes: ['admin'] })).key}` } })
  t.match(metrics.body, /agent_host_rate_limited_total\{limit="auth_failures"\} 5\n/)
})
