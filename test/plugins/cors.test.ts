import t from 'tap'
import { request } from 'node:http'
import { loadConfig } from '../../src/config.js'
import { AGENTS, build, envelope, listen } from '../helper.js'

const APP = 'http://app.example.test:5173'
const OTHER = 'https://evil.example.test'

const preflight = (origin: string, url = '/v1/assist', method = 'POST') => ({
  method: 'OPTIONS' as const,
  url,
  headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'content-type,authorization,last-event-id,traceparent' }
})
const corsHeaders = (headers: Record<string, unknown>): string[] => Object.keys(headers).filter((h) => h.startsWith('access-control-'))

t.test('by default there is no CORS at all: nothing says another origin may read; bound to loopback, its requests are refused', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  for (const req of [preflight(APP), { method: 'GET' as const, url: '/v1/agents', headers: { origin: APP } }]) {
    const res = await app.inject(req)
    t.equal(res.statusCode, 403, `${req.method}: the DNS-rebinding guard refuses another origin`)
    t.equal(res.json().code, 'AH_ERR_HOST_REFUSED')
    t.same(corsHeaders(res.headers), [])
  }
  const elsewhere = await build(t, { WORKERS_PER_TYPE: '0', HOST: '0.0.0.0', ALLOW_INSECURE: 'true' })
  const pre = await elsewhere.inject(preflight(APP))
  t.equal(pre.statusCode, 404, 'not bound to loopback: a preflight is a 404')
  t.same(corsHeaders(pre.headers), [])
  const res = await elsewhere.inject({ method: 'GET', url: '/v1/agents', headers: { origin: APP } })
  t.equal(res.statusCode, 200)
  t.same(corsHeaders(res.headers), [])
})

t.test('a listed origin: its preflight names what a client needs, and every answer lets it read', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: `${APP}, http://localhost:3000` })
  for (const url of ['/v1/assist', '/v1/agents', `/v1/assist/${envelope(AGENTS.echo).request_id}/cancel`, '/v1/sessions/abc']) {
    const pre = await app.inject(preflight(APP, url, url.startsWith('/v1/sessions') ? 'DELETE' : 'POST'))
    t.equal(pre.statusCode, 204, `preflight of ${url}`)
    t.equal(pre.headers['access-control-allow-origin'], APP)
    t.match(pre.headers['access-control-allow-methods'], /POST/)
    t.match(pre.headers['access-control-allow-methods'], /DELETE/)
    for (const h of ['content-type', 'authorization', 'last-event-id', 'traceparent']) t.match(pre.headers['access-control-allow-headers'], h)
    t.equal(pre.headers['access-control-max-age'], '600')
    t.match(pre.headers.vary, /origin/i)
    t.notOk(pre.headers['access-control-allow-credentials'], 'no credentials unless configured')
  }
  const ok = await app.inject({ method: 'POST', url: '/v1/assist', headers: { origin: APP, accept: 'application/json' }, payload: envelope(AGENTS.echo) })
  t.equal(ok.statusCode, 200)
  t.equal(ok.headers['access-control-allow-origin'], APP)
  for (const h of ['x-ratelimit-remaining', 'retry-after', 'traceparent']) t.match(ok.headers['access-control-expose-headers'], h)
  const missing = await app.inject({ method: 'POST', url: '/v1/assist', headers: { origin: APP }, payload: envelope('00000000-0000-4000-8000-00000000dead') })
  t.equal(missing.statusCode, 404)
  t.equal(missing.headers['access-control-allow-origin'], APP, 'an error is readable too, with its code')
  t.equal(missing.json().code, 'AH_ERR_AGENT_NOT_FOUND')
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents', headers: { origin: 'http://localhost:3000' } })).headers['access-control-allow-origin'], 'http://localhost:3000')
})

t.test('an origin not listed, or none at all, gets no CORS header; bound to loopback, the other origin is refused', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: APP })
  for (const req of [preflight(OTHER), { method: 'POST' as const, url: '/v1/assist', headers: { origin: OTHER }, payload: envelope(AGENTS.echo) }]) {
    const res = await app.inject(req)
    t.equal(res.statusCode, 403, `${req.method}: the DNS-rebinding guard refuses an origin not listed`)
    t.equal(res.json().code, 'AH_ERR_HOST_REFUSED')
    t.same(corsHeaders(res.headers), [])
  }
  t.same(corsHeaders((await app.inject({ method: 'GET', url: '/v1/agents' })).headers), [], 'curl sends no Origin')
  const bare = await app.inject({ method: 'OPTIONS', url: '/v1/assist' })
  t.equal(bare.statusCode, 404, 'an OPTIONS that is no preflight')

  const elsewhere = await build(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: APP, HOST: '0.0.0.0', ALLOW_INSECURE: 'true' })
  const pre = await elsewhere.inject(preflight(OTHER))
  t.equal(pre.statusCode, 404, 'not bound to loopback: its preflight is a 404')
  t.same(corsHeaders(pre.headers), [])
  const res = await elsewhere.inject({ method: 'POST', url: '/v1/assist', headers: { origin: OTHER }, payload: envelope(AGENTS.echo) })
  t.equal(res.statusCode, 200, 'the server still answers (CORS is the browser\'s to enforce)')
  t.same(corsHeaders(res.headers), [])
})

t.test('preflights pass before authentication and rate limits; refusals are readable', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: APP, AUTH_MODE: 'apikey', RATE_LIMIT_MAX: '2', AUTH_FAILURE_MAX: '0' })
  for (let i = 0; i < 4; i++) t.equal((await app.inject(preflight(APP))).statusCode, 204, `preflight ${i + 1}, without a key`)
  const denied = await app.inject({ method: 'POST', url: '/v1/assist', headers: { origin: APP }, payload: envelope(AGENTS.echo) })
  t.equal(denied.statusCode, 401)
  t.equal(denied.headers['access-control-allow-origin'], APP)
  t.equal(denied.json().code, 'AH_ERR_AUTH_REQUIRED')
  const { key } = await app.keys.create({ name: 'page', scopes: ['assist:invoke', 'agents:read'] })
  const headers = { origin: APP, authorization: `Bearer ${key}` }
  const codes = []
  for (let i = 0; i < 3; i++) codes.push(await app.inject({ method: 'GET', url: '/v1/agents', headers }))
  const limited = codes.at(-1)
  t.equal(limited?.statusCode, 429)
  t.equal(limited?.headers['access-control-allow-origin'], APP)
  t.ok(limited?.headers['retry-after'], 'Retry-After, which the page may read')
  t.match(limited?.headers['access-control-expose-headers'], 'retry-after')
})

t.test('an SSE stream to a listed origin carries the CORS headers on the socket', async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: APP })
  const headers = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const req = request(`${url}/v1/assist`, { method: 'POST', headers: { origin: APP, 'content-type': 'application/json', accept: 'text/event-stream' } }, (res) => {
      res.resume()
      res.on('end', () => { resolve(res.headers) })
    })
    req.on('error', reject)
    req.end(JSON.stringify(envelope(AGENTS.echoStream, { query: 'one two three' })))
  })
  t.match(headers['content-type'], 'text/event-stream')
  t.equal(headers['access-control-allow-origin'], APP)
  t.match(headers['access-control-expose-headers'], 'traceparent')
})

t.test('CORS_ORIGINS=* lets any page read; credentials only when asked, and never with *', async (t) => {
  const any = await build(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: '*' })
  const pre = await any.inject(preflight(OTHER))
  t.equal(pre.statusCode, 204)
  t.equal(pre.headers['access-control-allow-origin'], '*')
  const withCredentials = await build(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: APP, CORS_CREDENTIALS: 'true' })
  t.equal((await withCredentials.inject(preflight(APP))).headers['access-control-allow-credentials'], 'true')
  t.throws(() => loadConfig({ CORS_ORIGINS: '*', CORS_CREDENTIALS: 'true' }), { code: 'AH_ERR_CONFIG_INVALID', message: /CORS_CREDENTIALS/ })
  for (const bad of ['app.example.com', 'https://app.example.com/', 'https://app.example.com/path', 'ftp://x.example', 'http://']) {
    t.throws(() => loadConfig({ CORS_ORIGINS: `${APP},${bad}` }), { code: 'AH_ERR_CONFIG_INVALID', message: /CORS_ORIGINS/ }, bad)
  }
})
