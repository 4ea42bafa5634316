import t from 'tap'
import { build, envelope, FIXTURE_AGENTS_DIR, SCRIPTED } from '../helper.js'

t.test('GET /v1/agents/:id/metrics: calls, failures by how runs ended, and p50/p95/p99 latency; the same in /metrics', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0' })
  const before = (await app.inject({ url: `/v1/agents/${SCRIPTED}/metrics` })).json()
  t.match(before, { agent_id: SCRIPTED, name: 'scripted', calls: 0, failures: 0, by_end: {}, latency_ms: null, window_seconds: 600 })
  const json = { accept: 'application/json' }
  for (const ms of [5, 20]) {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: envelope(SCRIPTED, { script: [{ op: 'sleep', ms }, { op: 'result', value: { ok: true } }] }) })
    t.equal(res.statusCode, 200)
  }
  const failed = await app.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: envelope(SCRIPTED, { script: [{ op: 'throw', message: 'no' }] }) })
  t.equal(failed.statusCode, 502)
  const after = (await app.inject({ url: '/v1/agents/scripted/metrics' })).json()
  t.match(after, { calls: 3, failures: 1, by_end: { done: 2, aborted: 1 } })
  t.ok(after.latency_ms.p50 > 0 && after.latency_ms.p50 <= after.latency_ms.p95 && after.latency_ms.p95 <= after.latency_ms.p99, JSON.stringify(after.latency_ms))
  t.ok(after.latency_ms.p99 >= 20, 'the slowest run is in the tail')
  t.equal((await app.inject({ url: '/v1/agents/nobody/metrics' })).statusCode, 404)
  t.match((await app.inject({ url: '/metrics' })).body, /agent_host_agent_latency_seconds\{quantile="0\.99",agent="scripted"\} \d/)
})
