import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildApp } from '../src/app.js'
import { AGENTS, build, envelope, testConfig } from './helper.js'
import { fakeProvider, openai } from './fixtures/providers.js'

const LLM_CHAT = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a06'

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
    t.match(about('/v1/agents').map((l) => l.msg), ['incoming request', 'request completed'], `${level}: other requests are logged as before`)
  }
})
