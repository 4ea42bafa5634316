import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { build, envelope, FIXTURE_AGENTS_DIR } from '../helper.js'
import { checkErrorBody, checkServiceResponse } from '../sse.js'

const INSPECT = 'f0000000-0000-4000-8000-000000000001'
type Body = ReturnType<typeof envelope>
type TapTest = Pick<typeof t, 'equal' | 'ok'>

async function send (app: FastifyInstance, payload: unknown, headers: Record<string, string> = {}) {
  return await app.inject({ method: 'POST', url: '/v1/assist', headers, payload: payload as Record<string, unknown> })
}

/** What the inspect agent received. */
async function received (app: FastifyInstance, body: unknown): Promise<{ request: Record<string, any>, session: Record<string, any> }> {
  const res = await send(app, body)
  t.equal(res.statusCode, 200, res.body)
  return checkServiceResponse(res.json()).output as never
}

function without (body: Body, path: string): unknown {
  const copy = structuredClone(body) as Record<string, any>
  const keys = path.split('.')
  const last = keys.pop() as string
  let target = copy
  for (const k of keys) target = target[k]
  Reflect.deleteProperty(target, last)
  return copy
}

function withValue (body: Body, path: string, value: unknown): unknown {
  const copy = structuredClone(body) as Record<string, any>
  const keys = path.split('.')
  const last = keys.pop() as string
  let target = copy
  for (const k of keys) target = target[k]
  target[last] = value
  return copy
}

async function expect400 (t: TapTest, app: FastifyInstance, payload: unknown, path: string): Promise<void> {
  const res = await send(app, payload)
  t.equal(res.statusCode, 400, `${path}: ${res.body}`)
  const body = checkErrorBody(res.json())
  t.equal(body.code, 'AH_ERR_VALIDATION')
  const paths = (body.details?.errors as Array<{ path: string }>).map((e) => e.path)
  t.ok(paths.includes(path), `${path} in ${JSON.stringify(paths)}`)
}

t.test('a minimal envelope is accepted and the agent sees CAP\'s defaults', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(INSPECT, { n: 1 })
  const before = Date.now()
  const { request, session } = await received(app, body)
  t.match(request.request_id, /^[0-9a-f-]{36}$/)
  t.not(request.request_id, body.request_id, 'payload.request_id defaults to a new uuid')
  t.equal(request.root_request_id, request.request_id)
  t.notOk('parent_request_id' in request)
  t.ok(Math.abs(Date.parse(request.timestamp) - before) < 5000)
  t.same(request.metadata, {})
  t.same(request.capabilities, { supported_events: [], prefers_markdown: true })
  t.same(request.payload, { n: 1 })
  t.same(request.context, body.context)
  t.same(session, { session_id: body.context.session_id, identity: body.context.user })
})

t.test('unknown keys are dropped at every level of the envelope, kept inside payload and metadata', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(INSPECT, { n: 1, extra_arg: 'kept' }, { agentRequest: { metadata: { anything: { goes: true } }, capabilities: { supported_events: ['MARKDOWN_BLOCK'], junk: 1 }, junk: 2 } }) as any
  body.junk = 1
  body.context.junk = 1
  body.context.user.junk = 1
  body.context.trace.junk = 1
  const { request } = await received(app, body)
  t.notOk('junk' in request)
  t.notOk('junk' in request.context)
  t.notOk('junk' in request.context.user)
  t.notOk('junk' in request.context.trace)
  t.same(request.capabilities, { supported_events: ['MARKDOWN_BLOCK'], prefers_markdown: true })
  t.same(request.payload, { n: 1, extra_arg: 'kept' })
  t.same(request.metadata, { anything: { goes: true } })
})

t.test('lineage: parent_request_id needs root_request_id; given ids pass through', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const ids = { request_id: 'aaaaaaaa-0000-4000-8000-000000000001', root_request_id: 'aaaaaaaa-0000-4000-8000-000000000002', parent_request_id: 'aaaaaaaa-0000-4000-8000-000000000003', timestamp: '2026-11-22T10:00:00+05:00' }
  const { request } = await received(app, envelope(INSPECT, {}, { agentRequest: ids }))
  t.match(request, ids)
  await expect400(t, app, envelope(INSPECT, {}, { agentRequest: { parent_request_id: ids.parent_request_id } }), '/payload/root_request_id')
})

t.test('session ids must agree', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  await expect400(t, app, withValue(envelope(INSPECT), 'payload.session_id', 'bbbbbbbb-0000-4000-8000-000000000001'), '/payload/session_id')
})

t.test('each required field missing is a 400 naming its path', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const required = ['request_id', 'context', 'payload', 'context.session_id', 'context.agent_id', 'context.user', 'context.user.user_id',
    'context.user.tier', 'context.user.locale', 'context.trace', 'context.trace.trace_id', 'context.trace.span_id', 'context.permissions',
    'context.created_at', 'payload.session_id', 'payload.payload']
  for (const path of required) await expect400(t, app, without(envelope(INSPECT), path), `/${path.replaceAll('.', '/')}`)
})

t.test('ids must be bare RFC 4122 uuids, times RFC 3339, and types are not coerced', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const bad: Array<[string, unknown]> = [
    ['request_id', 'not-a-uuid'], ['request_id', 'urn:uuid:aaaaaaaa-0000-4000-8000-000000000001'], ['context.session_id', '123'],
    ['context.agent_id', 'echo'], ['context.trace.trace_id', 'x'], ['context.trace.span_id', 'x'], ['context.trace.parent_id', 'x'],
    ['payload.request_id', 'x'], ['payload.root_request_id', 'x'], ['payload.parent_request_id', 'x'],
    ['context.created_at', '22/11/2026'], ['payload.timestamp', 'now'],
    ['context.user.tier', 5], ['context.permissions', 'admin'], ['context.user.user_id', ''], ['payload.payload', 'text'],
    ['payload.metadata', []], ['payload.capabilities', { prefers_markdown: 'true' }], ['payload.capabilities', { image_resolution: 'huge' }]
  ]
  for (const [path, value] of bad) {
    const expectPath = path === 'payload.capabilities'
      ? `/payload/capabilities/${Object.keys(value as object)[0] ?? ''}`
      : `/${path.replaceAll('.', '/')}`
    await expect400(t, app, withValue(envelope(INSPECT), path, value), expectPath)
  }
})

t.test('agent input is checked against the capability\'s inputs schema', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const strict = { agentRequest: { metadata: { capability: 'strict' } } }
  const ok = await send(app, envelope(INSPECT, { query: 'q' }, strict))
  t.same(ok.json().output, { ok: true })
  await expect400(t, app, envelope(INSPECT, {}, strict), '/payload/payload/query')
  await expect400(t, app, envelope(INSPECT, { query: 1 }, strict), '/payload/payload/query')
  await expect400(t, app, envelope(INSPECT, { query: 'q', other: 1 }, strict), '/payload/payload/other')
  await expect400(t, app, envelope(INSPECT, { n: -1 }), '/payload/payload/n')
  await expect400(t, app, envelope(INSPECT, {}, { agentRequest: { metadata: { capability: 'nope' } } }), '/payload/metadata/capability')
})

t.test('a result() that breaks the outputs schema ends the run with agent_contract_violation', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const res = await send(app, envelope(INSPECT, { query: 'q', bad: true }, { agentRequest: { metadata: { capability: 'strict' } } }))
  t.equal(res.statusCode, 502, 'nothing else was produced')
  t.same(checkErrorBody(res.json()).details, {
    error: { code: 'agent_contract_violation', message: 'The agent\'s result does not match its outputs schema', severity: 'FATAL', details: { errors: [{ path: '/result/ok', message: 'must be boolean' }] } }
  })
})

t.test('bad bodies get clear 4xx codes', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, BODY_LIMIT: '2048' })
  const cases: Array<[string, Record<string, string>, string | undefined, number, string]> = [
    ['malformed JSON', { 'content-type': 'application/json' }, '{"request_id": ', 400, 'AH_ERR_BODY_MALFORMED'],
    ['empty JSON body', { 'content-type': 'application/json' }, '', 400, 'AH_ERR_BODY_MALFORMED'],
    ['__proto__', { 'content-type': 'application/json' }, '{"__proto__": {"polluted": true}}', 400, 'AH_ERR_BODY_MALFORMED'],
    ['constructor.prototype', { 'content-type': 'application/json' }, '{"constructor": {"prototype": {"polluted": true}}}', 400, 'AH_ERR_BODY_MALFORMED'],
    ['not JSON', { 'content-type': 'text/plain' }, 'hello', 415, 'AH_ERR_MEDIA_TYPE_UNSUPPORTED'],
    ['too large', { 'content-type': 'application/json' }, JSON.stringify({ pad: 'x'.repeat(4096) }), 413, 'AH_ERR_BODY_TOO_LARGE'],
    ['not an object', { 'content-type': 'application/json' }, '[1, 2]', 400, 'AH_ERR_VALIDATION']
  ]
  for (const [name, headers, payload, status, code] of cases) {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers, payload })
    t.equal(res.statusCode, status, name)
    t.equal(checkErrorBody(res.json()).code, code, name)
  }
  t.equal(({} as Record<string, unknown>).polluted, undefined, 'nothing was polluted')
  const bad = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json', 'content-length': '5' }, payload: '{}' })
  t.equal(bad.statusCode, 400)
  t.equal(checkErrorBody(bad.json()).code, 'AH_ERR_REQUEST_INVALID')
})

t.test('an unknown agent is a 404; POST /assist answers like /v1/assist', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const res = await send(app, envelope('dddddddd-0000-4000-8000-000000000000'))
  t.equal(res.statusCode, 404)
  t.equal(checkErrorBody(res.json()).code, 'AH_ERR_AGENT_NOT_FOUND')
  const alias = await app.inject({ method: 'POST', url: '/assist', payload: envelope(INSPECT, { n: 2 }) })
  t.equal(alias.statusCode, 200)
  t.same((alias.json().output as { request: { payload: unknown } }).request.payload, { n: 2 })
})
