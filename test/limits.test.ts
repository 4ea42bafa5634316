import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { build, envelope, FIXTURE_AGENTS_DIR } from './helper.js'
import { checkErrorBody, parseSse } from './sse.js'
import { observed } from './fixtures/agents/scripted/index.js'

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
  for (let i = 0; i < 5 && res.statusCode !== 503; i++) {
    block(400)
    await sleep(30)
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
