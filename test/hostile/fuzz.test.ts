import t from 'tap'
import fc from 'fast-check'
import { createHmac } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { AGENTS, build, envelope } from '../helper.js'
import { checkErrorBody } from '../sse.js'

/**
 * Random and mutated input thrown at the server: never a 5xx, never a crash, always a JSON error
 * with a stable code. FUZZ_RUNS sets the runs per property (CI: the default 60; locally, for
 * example, `FUZZ_RUNS=5000 npx tap test/hostile/fuzz.test.ts`).
 */
const RUNS = Number(process.env.FUZZ_RUNS ?? 60)
const CODE = /^AH_ERR_[A-Z]+(_[A-Z]+)*$/

/** Long local runs must reach the parsers, not the rate limits (which have their own tests). */
const UNLIMITED = { RATE_LIMIT_MAX: '0', RATE_LIMIT_AGENT_MAX: '0', AUTH_FAILURE_MAX: '0' }

interface Answer { statusCode: number, body: string, headers: Record<string, unknown> }

/** Every answer is below 500; an error is a catalogue error body. */
function checkAnswer (res: Answer, what: string): void {
  if (res.statusCode >= 500) throw new Error(`${what}: ${res.statusCode} ${res.body.slice(0, 300)}`)
  if (res.statusCode >= 400) {
    const body = checkErrorBody(JSON.parse(res.body))
    if (!CODE.test(body.code)) throw new Error(`${what}: unstable code ${body.code}`)
  }
}

/** A JSON value that may carry pollution keys. */
const hostileKey = fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString', 'request_id', 'context', 'payload', '')
const json = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, fc.constant(null), fc.boolean(), fc.double(), fc.integer(), fc.string(), fc.string({ unit: 'binary' }), tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 5 }),
  object: fc.dictionary(fc.oneof(fc.string(), hostileKey), tie('value'), { maxKeys: 5 })
})).value

/** A path into `value` and a new value (or deletion) there. */
function mutate (base: unknown, path: string[], replacement: unknown, remove: boolean): unknown {
  const copy = structuredClone(base) as Record<string, unknown>
  let node: Record<string, unknown> = copy
  for (const key of path.slice(0, -1)) {
    const next = node[key]
    if (typeof next !== 'object' || next === null) return copy
    node = next as Record<string, unknown>
  }
  const last = path.at(-1)
  if (last === undefined) return replacement
  if (remove) Reflect.deleteProperty(node, last)
  else node[last] = replacement
  return copy
}

const ENVELOPE_PATHS = [
  [], ['request_id'], ['context'], ['context', 'session_id'], ['context', 'agent_id'], ['context', 'user'], ['context', 'user', 'user_id'],
  ['context', 'user', 'tier'], ['context', 'trace'], ['context', 'trace', 'trace_id'], ['context', 'trace', 'span_id'], ['context', 'permissions'],
  ['context', 'created_at'], ['payload'], ['payload', 'session_id'], ['payload', 'payload'], ['payload', 'payload', 'query'],
  ['payload', 'metadata'], ['payload', 'metadata', 'capability'], ['payload', 'metadata', 'on_disconnect'], ['payload', 'capabilities'],
  ['payload', 'parent_request_id'], ['payload', 'timestamp']
]

async function post (app: FastifyInstance, url: string, body: string, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json', ...headers }, payload: body })
  return { statusCode: res.statusCode, body: res.body, headers: res.headers }
}

t.test('random JSON bodies at /v1/assist and /v1/tasks', async (t) => {
  const app = await build(t, { ...UNLIMITED, WORKERS_PER_TYPE: '0' })
  await fc.assert(fc.asyncProperty(json, fc.constantFrom('/v1/assist', '/v1/tasks', '/assist'), async (body, url) => {
    checkAnswer(await post(app, url, JSON.stringify(body) ?? 'null'), url)
  }), { numRuns: RUNS })
  t.pass(`${RUNS} random bodies, no 5xx`)
})

t.test('mutated valid envelopes: each field replaced or removed', async (t) => {
  const app = await build(t, UNLIMITED)
  await fc.assert(fc.asyncProperty(
    fc.constantFrom(...ENVELOPE_PATHS), json, fc.boolean(), fc.constantFrom(AGENTS.echo, AGENTS.echoStream),
    fc.constantFrom('application/json', 'text/event-stream', '*/*', 'text/html', 'application/json, text/event-stream'),
    async (path, replacement, remove, agent, accept) => {
      const body = mutate(envelope(agent, { query: 'fuzz', delay_ms: 0 }), path, replacement, remove)
      checkAnswer(await post(app, '/v1/assist', JSON.stringify(body) ?? 'null', { accept }), `${path.join('/')} := ${JSON.stringify(replacement)?.slice(0, 100)}`)
    }
  ), { numRuns: RUNS * 3 })
  t.pass('no 5xx')
})

t.test('random headers on a valid request', async (t) => {
  const app = await build(t, UNLIMITED)
  const header = fc.string({ unit: fc.constantFrom(...'abcXYZ0123:;,=/*-_ \t'.split('')), maxLength: 60 })
  await fc.assert(fc.asyncProperty(header, header, header, async (accept, contentType, lastEventId) => {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept, 'content-type': contentType, 'last-event-id': lastEventId }, payload: JSON.stringify(envelope(AGENTS.echo, { query: 'x' })) })
    checkAnswer({ statusCode: res.statusCode, body: res.body, headers: res.headers }, `accept=${accept} content-type=${contentType} last-event-id=${lastEventId}`)
  }), { numRuns: RUNS })
  t.pass('no 5xx')
})

t.test('random and mutated bearer tokens in JWT mode: a 401 with a stable code, never a 5xx', async (t) => {
  const secret = 'a-shared-secret-of-at-least-32-characters'
  const app = await build(t, { ...UNLIMITED, AUTH_MODE: 'jwt', JWT_SECRET: secret, JWT_ISSUER: 'iss', JWT_AUDIENCE: 'aud', WORKERS_PER_TYPE: '0' })
  const b64 = (v: unknown): string => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url')
  const sign = (input: string): string => createHmac('sha256', secret).update(input).digest('base64url')
  const header = fc.record({
    alg: fc.oneof(fc.constantFrom('HS256', 'none', 'None', 'RS256', 'ES256', 'HS512', ''), fc.string(), json),
    kid: fc.oneof(fc.constantFrom('../../../etc/passwd', 'kid\r\nx: y', '__proto__'), fc.string(), json),
    typ: fc.oneof(fc.constant('JWT'), json),
    crit: fc.oneof(fc.constant(['exp']), json)
  }, { requiredKeys: [] })
  const claims = fc.record({
    iss: fc.oneof(fc.constant('iss'), json),
    aud: fc.oneof(fc.constant('aud'), fc.constant(['aud', 'x']), json),
    sub: fc.oneof(fc.constant('s'), json),
    exp: fc.oneof(fc.constant(4102444800), fc.double(), fc.string(), json),
    nbf: fc.oneof(fc.integer(), json),
    scope: fc.oneof(fc.constant('agents:read'), json)
  }, { requiredKeys: [] })
  const token = fc.oneof(
    fc.tuple(header, claims).map(([h, c]) => { const input = `${b64(h)}.${b64(c)}`; return `${input}.${sign(input)}` }),
    fc.tuple(header, claims, fc.string()).map(([h, c, sig]) => `${b64(h)}.${b64(c)}.${b64(sig)}`),
    fc.tuple(fc.string(), fc.string(), fc.string()).map((parts) => parts.join('.')),
    fc.array(fc.string({ unit: 'binary' }), { maxLength: 5 }).map((parts) => parts.map(b64).join('.')),
    fc.string({ unit: fc.constantFrom(...'eyJ.-_=+/abcXYZ0123 '.split('')), maxLength: 400 })
  )
  await fc.assert(fc.asyncProperty(token, async (jwt) => {
    const res = await app.inject({ url: '/v1/agents', headers: { authorization: `Bearer ${jwt}` } })
    checkAnswer({ statusCode: res.statusCode, body: res.body, headers: res.headers }, `token ${jwt.slice(0, 200)}`)
    if (res.statusCode !== 200 && res.statusCode !== 401 && res.statusCode !== 403) throw new Error(`token ${jwt.slice(0, 200)}: ${res.statusCode}`)
  }), { numRuns: RUNS * 4 })
  t.pass('no 5xx; 200, 401 or 403 only')
})

t.test('targeted hostile cases', async (t) => {
  const app = await build(t, { ...UNLIMITED, WORKERS_PER_TYPE: '0' })
  const deep = '['.repeat(100_000) + ']'.repeat(100_000)
  let res = await post(app, '/v1/assist', deep)
  checkAnswer(res, 'deep nesting')
  t.equal(res.statusCode, 400, 'deeply nested JSON is refused')

  const nestedObject = JSON.stringify(envelope(AGENTS.echo, { query: 'x', extra: JSON.parse('{"a":'.repeat(2000) + '1' + '}'.repeat(2000)) }))
  checkAnswer(await post(app, '/v1/assist', nestedObject), 'deep payload')

  res = await post(app, '/v1/assist', JSON.stringify(envelope(AGENTS.echo, { query: 'x'.repeat(2_000_000) })))
  t.equal(res.statusCode, 413, 'a body over BODY_LIMIT')
  t.equal(JSON.parse(res.body).code, 'AH_ERR_BODY_TOO_LARGE')

  res = await post(app, '/v1/assist', '{"request_id": "x", "__proto__": {"polluted": true}}')
  t.equal(JSON.parse(res.body).code, 'AH_ERR_BODY_MALFORMED', '__proto__ is refused')
  res = await post(app, '/v1/assist', '{"constructor": {"prototype": {"polluted": true}}}')
  t.equal(JSON.parse(res.body).code, 'AH_ERR_BODY_MALFORMED', 'constructor.prototype is refused')
  t.equal(({} as Record<string, unknown>).polluted, undefined, 'nothing was polluted')

  const invalidUtf8 = Buffer.concat([Buffer.from('{"request_id": "'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')])
  const raw = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: invalidUtf8 })
  checkAnswer({ statusCode: raw.statusCode, body: raw.body, headers: raw.headers }, 'invalid UTF-8')
  t.equal(raw.statusCode, 400)

  for (const id of ['abc\r\nevent: injected', '11111111-1111-4111-8111-111111111111\ndata: x']) {
    const body = envelope(AGENTS.echoStream, { query: 'x' })
    body.request_id = id
    res = await post(app, '/v1/assist', JSON.stringify(body), { accept: 'text/event-stream' })
    t.equal(res.statusCode, 400, 'CR/LF in a request id never reaches an SSE line')
    t.notMatch(res.body, /^event: injected/m)
  }
  res = await post(app, '/v1/assist', JSON.stringify(envelope(AGENTS.echoStream, { query: 'x' })), { accept: 'text/event-stream', 'last-event-id': 'abc\r\ndata: injected' })
  t.equal(res.statusCode, 400, 'a CR/LF Last-Event-ID is refused')

  for (const id of ['../../etc/passwd', '..%2F..%2Fetc', '%00', 'a/../../b']) {
    const r = await app.inject({ url: `/v1/agents/${id}` })
    checkAnswer({ statusCode: r.statusCode, body: r.body, headers: r.headers }, id)
    t.equal(r.statusCode, 404, `agent id ${id}`)
  }
  const traversal = envelope(AGENTS.echo)
  traversal.context.agent_id = '../agents/echo'
  t.equal((await post(app, '/v1/assist', JSON.stringify(traversal))).statusCode, 400, 'agent_id must be a uuid')
  const taskIds = await post(app, '/v1/tasks', JSON.stringify({ id: '../../x\r\n', type: 'wordcount' }))
  checkAnswer(taskIds, 'task id with traversal')
})
