import t from 'tap'
import { request } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { AGENTS, build, envelope, FIXTURE_AGENTS_DIR, listen } from './helper.js'
import { sample } from './metrics-text.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

t.test('GET /metrics after a scripted workload: names, labels and values', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0', SSE_HEARTBEAT_MS: '30', RATE_LIMIT_AGENT_MAX: '3' })
  await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'hi' }] }) })
  await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(SCRIPTED, { script: [{ op: 'sleep', ms: 100 }, { op: 'markdown', content: 'after a pause' }] }) })
  await app.inject({ method: 'POST', url: '/v1/assist', payload: { nonsense: true } })
  await app.inject({ url: '/v1/agents/nobody' })

  const body = JSON.stringify(envelope(SCRIPTED, { script: [{ op: 'wait_abort' }] }, { agentRequest: { metadata: { on_disconnect: 'cancel' } } }))
  await new Promise<void>((resolve) => {
    const req = request(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' } }, (res) => {
      res.once('data', () => { req.destroy(); resolve() })
    })
    req.on('error', () => {})
    req.end(body)
  })
  await sleep(100)
  const limited = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(SCRIPTED, { script: [] }) })
  t.equal(limited.statusCode, 429, 'a fourth run of the agent')

  const store = app.tasks
  await store.create([{ id: 'a', type: 'x' }, { id: 'b', type: 'x', max_attempts: 3 }])
  const a = await store.claim('x', 'w1', 60_000)
  await store.complete(a?.id as string, { owner: 'w1', attempt: 1 }, {})
  const b = await store.claim('x', 'w1', 1)
  await sleep(20)
  t.equal((await store.reap()).length, 1)
  await t.rejects(store.complete(b?.id as string, { owner: 'w1', attempt: 1 }, {}), { code: 'AH_ERR_TASK_STALE_CLAIM' })

  const res = await app.inject({ url: '/metrics' })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  const text = res.body
  t.equal(sample(text, 'agent_host_http_requests_total', { route: '/v1/assist', method: 'POST', status: '200' }), 3, 'JSON and SSE (hijacked) answers alike')
  t.equal(sample(text, 'agent_host_http_requests_total', { route: '/v1/assist', method: 'POST', status: '400' }), 1)
  t.equal(sample(text, 'agent_host_http_requests_total', { route: '/v1/agents/:id', method: 'GET', status: '404' }), 1, 'the route pattern, not the URL')
  t.equal(sample(text, 'agent_host_assist_duration_seconds_count', { agent: 'scripted', mode: 'request_response' }), 1)
  t.equal(sample(text, 'agent_host_assist_duration_seconds_count', { agent: 'scripted', mode: 'server_sent_events' }), 2)
  t.ok((sample(text, 'agent_host_assist_duration_seconds_sum', { agent: 'scripted', mode: 'server_sent_events' }) ?? 0) >= 0.1)
  t.equal(sample(text, 'agent_host_assist_runs_total', { agent: 'scripted', mode: 'server_sent_events', end: 'done' }), 1)
  t.equal(sample(text, 'agent_host_assist_runs_total', { agent: 'scripted', mode: 'server_sent_events', end: 'cancelled' }), 1, 'the run whose only client left, with on_disconnect cancel')
  t.equal(sample(text, 'agent_host_sse_open_streams'), 0, 'every stream closed')
  t.equal(sample(text, 'agent_host_sse_packets_sent_total'), 2, 'the SSE run\'s EVENT and CLOSE')
  t.ok((sample(text, 'agent_host_sse_heartbeats_total') ?? 0) >= 1, 'the pause produced heartbeats')
  t.equal(sample(text, 'agent_host_sse_disconnects_total', { why: 'client_disconnected' }), 1)
  t.equal(sample(text, 'agent_host_rate_limited_total', { limit: 'agent' }), 1)
  t.equal(sample(text, 'agent_host_http_requests_total', { route: '/v1/assist', method: 'POST', status: '429' }), 1)
  t.equal(sample(text, 'agent_host_task_claims_total'), 2)
  t.equal(sample(text, 'agent_host_task_lease_expiries_total'), 1)
  t.equal(sample(text, 'agent_host_task_stale_completions_total', { operation: 'complete' }), 1)
  t.equal(sample(text, 'agent_host_tasks', { status: 'COMPLETED' }), 1)
  t.equal(sample(text, 'agent_host_tasks', { status: 'PENDING' }), 1)
  t.equal(sample(text, 'agent_host_tasks', { status: 'FAILED' }), 0)
  t.ok((sample(text, 'agent_host_audit_rows') ?? 0) >= 3, 'audit rows')
  t.ok(sample(text, 'agent_host_process_resident_memory_bytes') !== undefined || sample(text, 'agent_host_nodejs_heap_size_used_bytes') !== undefined, 'process metrics')

  await sleep(1100)
  const again = await store.claim('x', 'w2', 60_000)
  t.equal(again?.attempt, 2)
  t.equal(sample((await app.inject({ url: '/metrics' })).body, 'agent_host_task_reclaims_total'), 1, 'a second attempt is a reclaim')
})

t.test('two apps in one process keep their own counters', async (t) => {
  const one = await build(t)
  const two = await build(t)
  await one.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo) })
  const text = (await two.inject({ url: '/metrics' })).body
  t.equal(sample(text, 'agent_host_http_requests_total', { route: '/v1/assist' }), undefined)
})

t.test('the event bus counts publications and deliveries by outcome', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', BUS_POLL_MS: '10' })
  let calls = 0
  await app.bus.subscribe({ id: 'metrics:probe', patterns: ['m.*'], maxAttempts: 2, backoffMs: 1, handler: (event) => { calls++; if (event.key === 'bad') throw new Error('no') } })
  const publish = async (key: string): Promise<void> => { await app.inject({ method: 'POST', url: '/v1/bus/events', payload: { event: { type: 'm.x', key, data: {} } } }) }
  await publish('good')
  await publish('good')
  await publish('bad')
  const settled = async (): Promise<boolean> => (await app.bus.deadLetters({})).length === 1 && calls >= 3
  while (!await settled()) await sleep(5)
  const text = (await app.inject({ url: '/metrics' })).body
  t.equal(sample(text, 'agent_host_bus_events_published_total', { duplicate: 'false' }), 2)
  t.equal(sample(text, 'agent_host_bus_events_published_total', { duplicate: 'true' }), 1)
  t.equal(sample(text, 'agent_host_bus_deliveries_total', { outcome: 'handled' }), 1)
  t.equal(sample(text, 'agent_host_bus_deliveries_total', { outcome: 'retried' }), 1)
  t.equal(sample(text, 'agent_host_bus_deliveries_total', { outcome: 'dead_lettered' }), 1)
})
