import t from 'tap'
import { buildApp } from '../../src/app.js'
import { build, testConfig } from '../helper.js'

const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8'

t.test('GET / sends a browser to the playground, and tells anyone else what is here', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const browser = await app.inject({ url: '/', headers: { accept: BROWSER_ACCEPT } })
  t.equal(browser.statusCode, 302)
  t.equal(browser.headers.location, '/playground/')

  const curl = await app.inject({ url: '/', headers: { accept: '*/*' } })
  t.equal(curl.statusCode, 200, 'curl gets JSON, not a 404')
  t.match(curl.json(), { name: 'agent-host', version: String, links: { playground: '/playground/', docs: '/docs', openapi: '/openapi.json', assist: '/v1/assist', agents: '/v1/agents', health: '/health', metrics: '/metrics' } })
  for (const path of Object.values(curl.json().links as Record<string, string>).filter((p) => p !== '/v1/assist')) {
    const res = await app.inject({ url: path })
    t.ok(res.statusCode < 400 || path === '/playground/', `${path} is there (${res.statusCode})`)
  }
})

t.test('with the playground off, a browser goes to Swagger UI and the links leave the playground out', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', PLAYGROUND: 'false' })
  const browser = await app.inject({ url: '/', headers: { accept: BROWSER_ACCEPT } })
  t.equal(browser.headers.location, '/docs')
  t.notOk('playground' in (await app.inject({ url: '/' })).json().links)
})

t.test('GET / is public: with API keys on, it needs none', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', AUTH_MODE: 'apikey', API_KEYS: JSON.stringify([{ name: 'admin', key: 'sk-test-0123456789abcdefghij', scopes: ['admin'] }]) })
  t.equal((await app.inject({ url: '/' })).statusCode, 200)
  t.equal((await app.inject({ url: '/v1/agents' })).statusCode, 401, 'while the API is not')
})

t.test('once listening, the start log names the pages a person opens, at the address to open them', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const app = await buildApp(testConfig(t, { LOG_LEVEL: 'info', WORKERS_PER_TYPE: '0' }), { logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } } })
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
  const ready = lines.find((l) => typeof l.msg === 'string' && l.msg.startsWith('ready:'))
  t.ok(ready, 'a ready line')
  t.equal(ready?.msg, `ready: the playground at ${base}/playground/, Swagger UI at ${base}/docs, the API at ${base}/v1/assist, health at ${base}/health`)
  t.match(ready?.urls, { playground: `${base}/playground/`, docs: `${base}/docs`, openapi: `${base}/openapi.json`, health: `${base}/health` })
})

t.test('a server bound to every interface names loopback in its start log', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const app = await buildApp(testConfig(t, { LOG_LEVEL: 'info', WORKERS_PER_TYPE: '0', PLAYGROUND: 'false' }), { logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } } })
  t.teardown(() => app.close())
  // 0.0.0.0 is only bound here, never connected to
  await app.listen({ host: '0.0.0.0', port: 0 })
  const port = (app.server.address() as { port: number }).port
  const ready = lines.find((l) => typeof l.msg === 'string' && l.msg.startsWith('ready:'))
  t.equal(ready?.msg, `ready: Swagger UI at http://127.0.0.1:${port}/docs, the API at http://127.0.0.1:${port}/v1/assist, health at http://127.0.0.1:${port}/health`)
})
