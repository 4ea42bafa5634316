import t from 'tap'
import { readFileSync } from 'node:fs'
import { compileSchema } from '../../src/agents/json-schema.js'
import { AgentDefinition } from '../../src/protocol/manifest.js'
import { generateOpenApiPath } from '../../src/protocol/openapi.js'
import { AGENTS, build } from '../helper.js'
import { checkErrorBody } from '../sse.js'

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
const validManifest = compileSchema(AgentDefinition)

t.test('GET /v1/agents serves every example manifest, valid and filled in', async (t) => {
  const app = await build(t)
  const res = await app.inject({ url: '/v1/agents' })
  t.equal(res.statusCode, 200)
  const { agents } = res.json() as { agents: Array<Record<string, any>> }
  t.same(agents.map((a) => a.metadata.id).sort(), Object.values(AGENTS).sort())
  for (const manifest of agents) {
    t.ok(validManifest(manifest), `${manifest.metadata.name as string} is a valid AgentDefinition`)
    t.match(manifest, {
      metadata: { requires_auth: false },
      config: { nodes: [], edges: [], model_config: { model: 'none', temperature: 0 } },
      dependencies: { tools: [], libraries: [] },
      status: 'draft'
    })
    for (const cap of manifest.capabilities) t.ok(cap.inputs !== undefined && cap.outputs !== undefined)
  }
})

t.test('GET /v1/agents/:id finds by uuid (any case) or name', async (t) => {
  const app = await build(t)
  for (const key of [AGENTS.echo, AGENTS.echo.toUpperCase(), 'echo']) {
    const res = await app.inject({ url: `/v1/agents/${key}` })
    t.equal(res.statusCode, 200)
    t.equal(res.json().metadata.id, AGENTS.echo)
  }
  const missing = await app.inject({ url: '/v1/agents/nobody' })
  t.equal(missing.statusCode, 404)
  t.equal(checkErrorBody(missing.json()).code, 'AH_ERR_AGENT_NOT_FOUND')
})

t.test('GET /health reports status, instance id, version and uptime', async (t) => {
  const app = await build(t)
  const body = (await app.inject({ url: '/health' })).json()
  t.match(body, { status: 'ok', instance_id: /^[0-9a-f-]{36}$/, version: pkg.version })
  t.notOk('agent_id' in body, 'the instance is not an agent: its id is instance_id')
  t.type(body.uptime_seconds, 'number')
  const pinned = await build(t, { INSTANCE_ID: 'ABCDEF00-0000-4000-8000-000000000000' })
  t.equal((await pinned.inject({ url: '/health' })).json().instance_id, 'abcdef00-0000-4000-8000-000000000000')
})

t.test('an unknown route is a 404 with the catalogue body', async (t) => {
  const app = await build(t)
  const res = await app.inject({ url: '/v2/nothing' })
  t.equal(res.statusCode, 404)
  t.equal(checkErrorBody(res.json()).code, 'AH_ERR_ROUTE_NOT_FOUND')
})

t.test('a known path with a method it does not serve is a 405 with Allow and the catalogue body', async (t) => {
  const app = await build(t)
  for (const [method, url, allow] of [
    ['GET', '/v1/assist', 'POST'],
    ['PUT', '/v1/assist?x=1', 'POST'],
    ['DELETE', `/v1/assist/${AGENTS.echo}/cancel`, 'POST'],
    ['GET', '/v1/plans', 'POST'],
    ['POST', '/v1/agents', 'GET, HEAD'],
    ['PATCH', '/v1/tasks', 'GET, HEAD, POST']
  ] as const) {
    const res = await app.inject({ method, url })
    t.equal(res.statusCode, 405, `${method} ${url}`)
    t.equal(res.headers.allow, allow, `${method} ${url}: Allow`)
    const body = checkErrorBody(res.json())
    t.equal(body.code, 'AH_ERR_METHOD_NOT_ALLOWED')
    t.match(body.message, allow)
  }
  t.equal((await app.inject({ method: 'GET', url: '/v1/assist/nothing/more/here' })).statusCode, 404, 'a path no method serves is still a 404')
  for (const url of ['/docs/static/no-such-file.js', '/playground/vendor/no-such.js']) {
    const missing = await app.inject({ method: 'GET', url })
    t.equal(missing.statusCode, 404, `${url}: a route of this method that finds nothing is a 404, not a 405 naming its own method`)
    t.equal(missing.json().code, 'AH_ERR_ROUTE_NOT_FOUND')
  }
})

t.test('the OpenAPI document holds exactly generateOpenApiPath() for /v1/assist', async (t) => {
  const app = await build(t)
  const doc = (await app.inject({ url: '/openapi.json' })).json()
  t.equal(doc.openapi, '3.1.0')
  t.same(doc.paths['/v1/assist'], generateOpenApiPath())
  t.notOk('/assist' in doc.paths, 'the alias is not documented')
  for (const path of ['/v1/agents', '/v1/agents/{id}', '/health', '/v1/assist/{request_id}/cancel', '/v1/sessions/{session_id}/history', '/v1/events', '/v1/audit', '/v1/audit/verify']) {
    t.ok(path in doc.paths, path)
  }
  const item = generateOpenApiPath() as { post: { responses: Record<string, { content: Record<string, unknown> }> } }
  t.same(Object.keys(item.post.responses['200']?.content ?? {}), ['application/json', 'text/event-stream'])
  t.same(Object.keys(item.post.responses).sort(), ['200', '400', '401', '403', '404', '406', '409', '410', '413', '415', '429', '500', '502', '503', '504'])
})

t.test('Swagger UI is served at /docs', async (t) => {
  const app = await build(t)
  let res = await app.inject({ url: '/docs' })
  for (let hops = 0; res.statusCode >= 300 && res.statusCode < 400 && hops < 3; hops++) {
    const location = String(res.headers.location)
    res = await app.inject({ url: location.startsWith('/') ? location : `/docs/${location.replace(/^\.\//, '')}` })
  }
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /text\/html/)
  t.match(res.body, /swagger/i)
})

t.test('cancel: unknown ids are a 404, malformed ones a 400', async (t) => {
  const app = await build(t)
  const unknown = await app.inject({ method: 'POST', url: '/v1/assist/aaaaaaaa-0000-4000-8000-000000000000/cancel' })
  t.equal(checkErrorBody(unknown.json()).code, 'AH_ERR_RUN_NOT_FOUND')
  const bad = await app.inject({ method: 'POST', url: '/v1/assist/nope/cancel' })
  t.equal(bad.statusCode, 400)
  t.match(checkErrorBody(bad.json()).details, { errors: [{ path: '/params/request_id' }] })
})

t.test('GET /v1/audit pages and filters; /v1/audit/verify checks the chain', async (t) => {
  const app = await build(t)
  const rows = (await app.inject({ url: '/v1/audit' })).json().rows as Array<{ action: string }>
  t.match(rows, [{ action: 'boot', actor: 'agent-host' }])
  for (let i = 0; i < 3; i++) app.audit.append({ actor: 'u', action: 'x', resource: `r${i}`, success: true })
  const page = (await app.inject({ url: '/v1/audit?limit=2' })).json()
  t.equal(page.rows.length, 2)
  t.equal(page.next, 2)
  const rest = (await app.inject({ url: `/v1/audit?limit=2&after=${page.next as number}` })).json()
  t.same(rest.rows.map((r: { resource: string }) => r.resource), ['r1', 'r2'])
  t.equal((await app.inject({ url: '/v1/audit?action=x&resource=r2' })).json().rows.length, 1)
  t.match((await app.inject({ url: '/v1/audit/verify' })).json(), { ok: true, rows: 4, keyed_rows: 0, checkpoints_checked: 1 })
  const checkpoint = (await app.inject({ url: '/v1/audit/checkpoint' })).json()
  t.match(checkpoint, { rows: 4, head: /^[0-9a-f]{64}$/, key_id: null, signature: null }, 'unsigned without AUDIT_KEY')
})
