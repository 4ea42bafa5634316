import t from 'tap'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { loadConfig } from '../../src/config.js'
import { rebindingGuard, rebindingRefusal } from '../../src/plugins/dns-rebinding.js'
import { AGENTS, build, envelope } from '../helper.js'
import { checkErrorBody } from '../sse.js'

const REBOUND = 'rebind.attacker.example:3000'
const REBOUND_ORIGIN = 'http://rebind.attacker.example:3000'

/** Every route the app registered, method by method, read from `printRoutes` (Fastify keeps no other list). */
function routesOf (app: FastifyInstance): Array<{ method: string, url: string }> {
  const routes: Array<{ method: string, url: string }> = []
  const above: string[] = []
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const node = /^((?:│ {3}| {4})*)(?:├── |└── )(.+?)(?: \(([A-Z, ]+)\))?$/.exec(line)
    if (node === null) continue
    const depth = (node[1] as string).length / 4
    above.length = depth
    const url = `${above[depth - 1] ?? ''}${node[2] as string}`
    above.push(url)
    for (const method of node[3]?.split(', ') ?? []) routes.push({ method, url })
  }
  return routes
}

/** A request path for a route pattern: an agent for `:agent_id`, a UUID for other parameters, a file for `*`. */
function pathOf (url: string): string {
  return url.replace(/\/:agent_id/g, `/${AGENTS.echo}`).replace(/\/:[a-z_]+/g, '/00000000-0000-4000-8000-000000000000').replace(/\*$/, 'x.js')
}

/** Whether the DNS-rebinding guard refused the answer. */
function refused (res: LightMyRequestResponse, method: string): boolean {
  if (res.statusCode !== 403) return false
  const body = method === 'HEAD' ? undefined : res.json()
  // /mcp answers its refusals as JSON-RPC errors, the host's error body in error.data
  return method === 'HEAD' || (body.code ?? body.error?.data?.code) === 'AH_ERR_HOST_REFUSED'
}

async function sweep (app: FastifyInstance, headers: Record<string, string>): Promise<Array<{ route: string, res: LightMyRequestResponse }>> {
  await app.ready()
  const routes = routesOf(app)
  const out = []
  for (const { method, url } of routes) {
    const res = await app.inject({ method: method as 'GET', url: pathOf(url), headers })
    out.push({ route: `${method} ${url}`, res })
  }
  return out
}

t.test('the routes swept are the ones the app registered', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  await app.ready()
  const routes = routesOf(app).map((r) => `${r.method} ${r.url}`)
  t.ok(routes.length > 50, `${routes.length} routes`)
  for (const route of ['POST /v1/assist', 'POST /v1/tasks', 'GET /v1/audit', 'POST /a2a/:agent_id', 'POST /mcp', 'GET /health', 'GET /playground', 'POST /a2a/:agent_id/rest/message:send']) t.ok(routes.includes(route), route)
})

t.test('regression (issue 27, fault 4): bound to loopback with AUTH_MODE=off, a rebound Host is refused on every route, before anything runs', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  await app.ready()
  const audited = await app.audit.list({ limit: 100 })
  for (const headers of [{ host: REBOUND, origin: REBOUND_ORIGIN }, { host: REBOUND }] as Array<Record<string, string>>) {
    for (const { route, res } of await sweep(app, headers)) t.ok(refused(res, route.split(' ')[0] as string), `${route} with ${JSON.stringify(headers)}: ${res.statusCode}`)
  }
  const unknown = await app.inject({ url: '/nothing/here', headers: { host: REBOUND } })
  t.match(checkErrorBody(unknown.json()), { code: 'AH_ERR_HOST_REFUSED', message: /Host "rebind\.attacker\.example:3000" is not a name of this server/ })

  // the attacks of the report: a run, an audit read, a task that rewrites files
  const attacks = [
    { method: 'POST' as const, url: '/v1/assist', payload: envelope(AGENTS.echo) },
    { method: 'POST' as const, url: `/a2a/${AGENTS.echo}`, payload: { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: 'm1', role: 'ROLE_USER', parts: [{ text: 'hi' }] } } } },
    { method: 'GET' as const, url: '/v1/audit' },
    { method: 'POST' as const, url: '/v1/tasks', payload: { id: 'rewrite', type: 'refactor', inputs: { path: 'x.py' } } }
  ]
  for (const attack of attacks) {
    const res = await app.inject({ ...attack, headers: { host: REBOUND, origin: REBOUND_ORIGIN } })
    t.equal(res.statusCode, 403, `${attack.method} ${attack.url}`)
    t.equal(res.json().code, 'AH_ERR_HOST_REFUSED')
    t.equal(res.headers['access-control-allow-origin'], undefined, 'nothing lets the page read it')
  }
  t.same(await app.audit.list({ limit: 100 }), audited, 'nothing was run or audited')
  t.same((await app.inject({ url: '/v1/tasks' })).json().tasks, [], 'no task was made')
})

t.test('bound to loopback: localhost, 127.0.0.1, [::1], the bound address and ALLOWED_HOSTS are served on every route', async (t) => {
  // with keys on, a request that passed the guard meets authentication (401): nothing runs
  const app = await build(t, { WORKERS_PER_TYPE: '0', AUTH_MODE: 'apikey', AUTH_FAILURE_MAX: '0', HOST: '127.0.0.5', ALLOWED_HOSTS: 'agents.internal, My-Laptop.local' })
  for (const host of ['localhost:3000', '127.0.0.1:3000', '[::1]:3000', '127.0.0.5:3000', 'agents.internal:3000']) {
    const answers = await sweep(app, { host })
    t.same(answers.filter(({ route, res }) => refused(res, route.split(' ')[0] as string)).map(({ route }) => route), [], `Host ${host}`)
    t.same(answers.filter(({ route, res }) => route.startsWith('POST ') && res.statusCode !== 401).map(({ route, res }) => `${route} ${res.statusCode}`), [], `Host ${host}: POSTs reached authentication`)
  }
  for (const host of ['LOCALHOST', 'agents.internal', 'my-laptop.local:8080', '[0:0:0:0:0:0:0:1]:3000']) t.equal((await app.inject({ url: '/health', headers: { host } })).statusCode, 200, `Host ${host}`)
  for (const host of ['127.0.0.6:3000', 'internal:3000', 'agents.internal.attacker.example']) {
    t.equal((await app.inject({ url: '/health', headers: { host } })).statusCode, 403, `Host ${JSON.stringify(host)}`)
  }
  t.equal((await app.inject({ url: '/health' })).statusCode, 200, 'inject\'s own Host (localhost:80)')
})

t.test('bound to loopback, the Origin rule: a page of another origin is refused on every route; its own origin and CORS_ORIGINS pass', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', AUTH_MODE: 'apikey', CORS_ORIGINS: 'http://localhost:5173,https://app.example.com' })
  for (const origin of ['http://attacker.example', 'null']) {
    const answers = await sweep(app, { host: 'localhost:3000', origin })
    t.same(answers.filter(({ route, res }) => !refused(res, route.split(' ')[0] as string)).map(({ route }) => route), [], `Origin ${origin}`)
  }
  for (const origin of ['http://localhost:3000', 'http://localhost:5173']) {
    const answers = await sweep(app, { host: 'localhost:3000', origin })
    t.same(answers.filter(({ route, res }) => refused(res, route.split(' ')[0] as string)).map(({ route }) => route), [], `Origin ${origin}`)
  }
  t.equal((await app.inject({ url: '/health', headers: { host: 'app.example.com', origin: 'https://app.example.com' } })).statusCode, 200, 'a CORS_ORIGINS host is a name of this server')
  t.equal((await app.inject({ url: '/health', headers: { host: 'localhost:3000', origin: 'http://localhost:5174' } })).statusCode, 403, 'another port is another origin')
})

t.test('bound to a non-loopback address, the guard does not apply (but /mcp keeps its Origin rule)', async (t) => {
  for (const HOST of ['0.0.0.0', '::', '192.0.2.10']) {
    const app = await build(t, { WORKERS_PER_TYPE: '0', AUTH_MODE: 'apikey', AUTH_FAILURE_MAX: '0', HOST })
    if (HOST !== '0.0.0.0') {
      t.equal((await app.inject({ url: '/v1/agents', headers: { host: REBOUND, origin: REBOUND_ORIGIN } })).statusCode, 401, `HOST ${HOST}: not refused (the key is asked for)`)
      continue
    }
    for (const headers of [{ host: REBOUND }, { host: 'agents.example.com', origin: 'https://agents.example.com' }] as Array<Record<string, string>>) {
      const answers = await sweep(app, headers)
      t.same(answers.filter(({ route, res }) => refused(res, route.split(' ')[0] as string)).map(({ route }) => route), [], `HOST ${HOST}, ${JSON.stringify(headers)}`)
    }
    const foreign = await sweep(app, { host: 'agents.example.com', origin: 'https://attacker.example' })
    t.same(foreign.filter(({ route, res }) => refused(res, route.split(' ')[0] as string)).map(({ route }) => route), ['POST /mcp', 'GET /mcp', 'HEAD /mcp', 'DELETE /mcp'], `HOST ${HOST}: a foreign Origin is refused by /mcp only`)
  }
})

t.test('bound to a non-loopback address with ALLOWED_HOSTS, every route takes only those names (and loopback ones), never the wildcard address', async (t) => {
  for (const HOST of ['0.0.0.0', '::']) {
    const app = await build(t, { WORKERS_PER_TYPE: '0', AUTH_MODE: 'apikey', AUTH_FAILURE_MAX: '0', HOST, ALLOWED_HOSTS: 'agents.example.com,192.0.2.10' })
    const rebound = await sweep(app, { host: REBOUND })
    t.same(rebound.filter(({ route, res }) => !refused(res, route.split(' ')[0] as string)).map(({ route }) => route), [], `HOST ${HOST}: a rebound Host is refused on every route`)
    for (const host of ['agents.example.com', 'agents.example.com:8443', '192.0.2.10:3000', 'localhost:3000', '127.0.0.1']) {
      t.equal((await app.inject({ url: '/health', headers: { host } })).statusCode, 200, `HOST ${HOST}: ${host} is served`)
    }
    for (const host of ['0.0.0.0:3000', '[::]:3000']) t.equal((await app.inject({ url: '/health', headers: { host } })).statusCode, 403, `HOST ${HOST}: ${host} is no name of the server`)
    t.equal((await app.inject({ url: '/health', headers: { host: 'agents.example.com', origin: 'https://attacker.example' } })).statusCode, 403, `HOST ${HOST}: a foreign Origin is refused`)
  }
})

t.test('ALLOWED_HOSTS: names or addresses without a port, comma-separated; anything else is refused at boot', async (t) => {
  t.equal(loadConfig({}).ALLOWED_HOSTS, '')
  for (const bad of ['http://agents.internal', 'agents.internal:3000', 'agents.internal/x', '*', 'a b', 'user@agents.internal', '[::1']) {
    t.throws(() => loadConfig({ ALLOWED_HOSTS: `ok.internal,${bad}` }), { code: 'AH_ERR_CONFIG_INVALID', message: /ALLOWED_HOSTS/ }, bad)
  }
  const app = await build(t, { WORKERS_PER_TYPE: '0', ALLOWED_HOSTS: '::1, 10.0.0.7, fd00::7' })
  for (const host of ['10.0.0.7:3000', '[fd00::7]:3000', '[::1]']) t.equal((await app.inject({ url: '/health', headers: { host } })).statusCode, 200, host)
})

t.test('the guard itself: which Host and Origin headers pass', async (t) => {
  const guard = rebindingGuard('127.0.0.1', true, ['https://app.example.com'], ['agents.internal'])
  for (const host of ['localhost:3000', '127.0.0.1:3000', '[::1]:3000', 'LOCALHOST:3000', 'app.example.com', 'agents.internal:80']) t.equal(rebindingRefusal(guard, host, undefined), undefined, `Host ${host}`)
  for (const host of [undefined, 'attacker.example:3000', '127.0.0.2:3000', 'a b']) t.match(rebindingRefusal(guard, host, undefined), /^Host ".*" is not a name of this server/, `Host ${String(host)}`)
  t.equal(rebindingRefusal(guard, 'localhost:3000', 'http://localhost:3000'), undefined, 'its own origin')
  t.equal(rebindingRefusal(guard, 'localhost:3000', 'https://app.example.com'), undefined, 'a listed origin')
  for (const origin of ['http://localhost:5173', 'http://attacker.example', 'null']) t.match(rebindingRefusal(guard, 'localhost:3000', origin), /^Origin ".*" may not call this server/, `Origin ${origin}`)
  t.equal(rebindingRefusal(rebindingGuard('127.0.0.2', true, [], []), '127.0.0.2:3000', undefined), undefined, 'the bound address')
  t.equal(rebindingRefusal(rebindingGuard('::1', true, [], []), '[::1]:3000', undefined), undefined)

  t.match(rebindingRefusal(rebindingGuard('0.0.0.0', false, [], ['agents.internal']), 'agents.example.com', undefined), /^Host/, 'not bound to loopback with ALLOWED_HOSTS: only those names')
  t.equal(rebindingRefusal(rebindingGuard('0.0.0.0', false, [], ['agents.internal']), 'agents.internal:3000', undefined), undefined)
  const open = rebindingGuard('0.0.0.0', false, [], [])
  t.equal(rebindingRefusal(open, 'agents.example.com', undefined), undefined, 'not bound to loopback, no ALLOWED_HOSTS: any Host')
  t.equal(rebindingRefusal(open, undefined, undefined), undefined)
  t.equal(rebindingRefusal(open, 'agents.example.com', 'https://agents.example.com'), undefined, 'its own origin')
  t.match(rebindingRefusal(open, 'agents.example.com', 'https://attacker.example'), /^Origin/)
  t.match(rebindingRefusal(open, undefined, 'https://attacker.example'), /^Origin/)
  t.equal(rebindingRefusal(rebindingGuard('0.0.0.0', false, ['*'], []), 'agents.example.com', 'https://anyone.example'), undefined, 'CORS_ORIGINS=*')
})
