import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildApp } from '../../src/app.js'
import { AGENTS, build, envelope, FIXTURE_AGENTS_DIR, testConfig } from '../helper.js'
import { fakeProvider, openai } from '../fixtures/providers.js'

const LLM_CHAT = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a06'
const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

t.test('traceparent: continued when valid, started when not, on JSON and SSE answers', async (t) => {
  const app = await build(t)
  const incoming = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { traceparent: incoming }, payload: envelope(AGENTS.echo) })
  const out = String(res.headers.traceparent)
  t.match(out, /^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/, 'same trace')
  t.not(out.split('-')[2], '00f067aa0ba902b7', 'a span of our own')
  for (const bad of ['garbage', '00-00000000000000000000000000000000-00f067aa0ba902b7-01', '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01']) {
    const fresh = String((await app.inject({ url: '/health', headers: { traceparent: bad } })).headers.traceparent)
    t.match(fresh, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/)
    t.not(fresh.split('-')[1], '4bf92f3577b34da6a3ce929d0e0e4736')
  }
  const sse = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream', traceparent: incoming }, payload: envelope(AGENTS.echoStream, { query: 'a', delay_ms: 0 }) })
  t.match(String(sse.headers.traceparent), /^00-4bf92f3577b34da6a3ce929d0e0e4736-/, 'SSE answers carry it too')
})

t.test('a planted secret reaches no log line, event, journal, audit row, stored answer or error body', async (t) => {
  const SECRET = 'sk-PLANTED-7f3a9c2e51'
  const fake = await fakeProvider(t)
  const lines: string[] = []
  const config = testConfig(t, { LOG_LEVEL: 'trace', OPENAI_BASE_URL: `${fake.url}/v1`, OPENAI_API_KEY: SECRET, LLM_MAX_RETRIES: '0' })
  const app = await buildApp(config, { logStream: { write: (line: string) => { lines.push(line) } } })
  t.teardown(() => app.close())
  const headers = { authorization: `Bearer ${SECRET}`, cookie: `session=${SECRET}`, 'x-api-key': SECRET, 'proxy-authorization': `Basic ${SECRET}` }
  const bodies: string[] = []
  fake.script({ frames: openai.text(['hello']) })
  bodies.push((await app.inject({ method: 'POST', url: '/v1/assist', headers: { ...headers, accept: 'text/event-stream' }, payload: envelope(LLM_CHAT, { query: 'hi' }) })).body)
  fake.script({ status: 401, json: { error: { message: 'Incorrect API key provided', type: 'invalid_request_error' } } })
  bodies.push((await app.inject({ method: 'POST', url: '/v1/assist', headers, payload: envelope(LLM_CHAT, { query: 'hi' }) })).body)
  bodies.push((await app.inject({ method: 'POST', url: '/v1/assist', headers, payload: { broken: true } })).body)
  bodies.push((await app.inject({ url: '/v1/backends', headers })).body)
  bodies.push((await app.inject({ url: '/v1/audit', headers })).body)
  bodies.push((await app.inject({ url: '/v1/events', headers })).body)
  bodies.push((await app.inject({ url: '/metrics', headers })).body)
  t.equal(fake.received[0]?.headers.authorization, `Bearer ${SECRET}`, 'the provider did get the key')
  await app.close()

  t.ok(lines.length > 10, `${lines.length} log lines at trace level`)
  t.same(lines.filter((l) => l.includes(SECRET)), [], 'no log line')
  t.same(bodies.filter((b) => b.includes(SECRET)), [], 'no response body')
  for (const file of readdirSync(config.DATA_DIR).filter((f) => f.startsWith('agent-host.db'))) {
    t.notOk(readFileSync(join(config.DATA_DIR, file)).includes(SECRET), `not in ${file} (journal, events, audit, sessions, answers)`)
  }
})

t.test('health checks are logged at debug, not as two info lines each; other requests still are', async (t) => {
  for (const level of ['info', 'debug'] as const) {
    const lines: Array<Record<string, unknown>> = []
    const app = await buildApp(testConfig(t, { LOG_LEVEL: level, WORKERS_PER_TYPE: '0' }), { logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } } })
    t.teardown(() => app.close())
    lines.length = 0
    await app.inject({ url: '/health' })
    await app.inject({ url: '/health?probe=lb' })
    const about = (url: string): Array<Record<string, unknown>> => {
      const requests = new Set(lines.filter((l) => JSON.stringify(l).includes(url)).map((l) => l.reqId))
      return lines.filter((l) => requests.has(l.reqId))
    }
    if (level === 'info') t.same(about('/health'), [], 'nothing at info')
    else t.match(about('/health'), [{ level: 20, msg: 'health check', url: '/health' }, { level: 20, msg: 'health check', url: '/health?probe=lb' }], 'one debug line each')
    await app.inject({ url: '/v1/agents' })
    t.same(about('/v1/agents').map((l) => l.msg), level === 'info' ? ['request completed'] : ['incoming request', 'request completed'], `${level}: other requests are logged, one line at info`)
    const [done] = about('/v1/agents').filter((l) => l.msg === 'request completed')
    t.match(done, { level: 30, req: { method: 'GET', url: '/v1/agents' }, res: { statusCode: 200 }, responseTime: Number }, 'that line names the request, its status and its time')
  }
})

t.test('one trace id: without traceparent the envelope\'s trace.trace_id names the response header, every log line, the audit row and the run\'s events', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const app = await buildApp(testConfig(t, { LOG_LEVEL: 'info', WORKERS_PER_TYPE: '0', AGENTS_DIR: FIXTURE_AGENTS_DIR }), { logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } } })
  t.teardown(() => app.close())
  const linesOf = (reqId: unknown): Array<Record<string, unknown>> => lines.filter((l) => l.reqId === reqId)
  for (const accept of ['application/json', 'text/event-stream']) {
    const body = envelope(SCRIPTED, { script: [{ op: 'emit', event: { specversion: '1.0', id: `e-${accept}`, source: '/t', type: 't.step', data: {} } }, { op: 'markdown', content: 'hi' }] })
    const traceId = (body.context.trace as { trace_id: string }).trace_id
    const w3c = traceId.replaceAll('-', '')
    lines.length = 0
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept }, payload: body })
    t.equal(res.statusCode, 200)
    t.match(String(res.headers.traceparent), new RegExp(`^00-${w3c}-[0-9a-f]{16}-01$`), `${accept}: the response header`)
    const reqId = lines.find((l) => l.msg === 'request completed')?.reqId
    t.match(linesOf(reqId).map((l) => l.msg), ['run ended', 'request completed'], `${accept}: the run's end and the access log's one line`)
    t.same([...new Set(linesOf(reqId).map((l) => l.traceId))], [w3c], `${accept}: every line of the request`)
    const audit = (await app.inject({ url: `/v1/audit?request_id=${body.request_id}` })).json() as { rows: Array<{ action: string, trace_id: string }> }
    t.same(audit.rows.filter((e) => e.action === 'assist').map((e) => e.trace_id.replaceAll('-', '')), [w3c], `${accept}: the audit row`)
    const events = (await app.inject({ url: `/v1/events?request_id=${body.request_id}` })).json() as { events: Array<{ trace_id: string }> }
    t.same(events.events.map((e) => e.trace_id.replaceAll('-', '')), [w3c], `${accept}: the run's events`)
  }

  lines.length = 0
  const broken = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: '{"not json' })
  t.equal(broken.statusCode, 400)
  const reqId = lines.find((l) => l.msg === 'request completed')?.reqId
  t.same(linesOf(reqId).map((l) => l.msg), ['request rejected', 'request completed'], 'a body that never parsed: its refusal, then the access log\'s line')
  t.same([...new Set(linesOf(reqId).map((l) => l.traceId))], [String(broken.headers.traceparent).split('-')[1]], 'with the trace id of its response')

  const continued = '4bf92f3577b34da6a3ce929d0e0e4736'
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { traceparent: `00-${continued}-00f067aa0ba902b7-01` }, payload: envelope(SCRIPTED, { script: [] }) })
  t.match(String(res.headers.traceparent), new RegExp(`^00-${continued}-`), 'a traceparent header still wins over the envelope')
})

t.test('LOG_FORMAT=pretty logs through pino-pretty, and is refused clearly where pino-pretty is not installed', async (t) => {
  const app = await buildApp(testConfig(t, { LOG_FORMAT: 'pretty', LOG_LEVEL: 'silent', WORKERS_PER_TYPE: '0' }))
  t.equal((await app.inject({ url: '/health' })).statusCode, 200)
  await app.close()
  const { buildApp: withoutPretty } = await t.mockImport<typeof import('../../src/app.js')>('../../src/app.js', {
    'node:module': { createRequire: () => ({ resolve: () => { throw new Error('Cannot find module \'pino-pretty\'') } }) }
  })
  await t.rejects(withoutPretty(testConfig(t, { LOG_FORMAT: 'pretty' })), { code: 'AH_ERR_CONFIG_INVALID', message: /LOG_FORMAT=pretty needs pino-pretty, a dev dependency/ })
})
