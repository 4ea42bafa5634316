import t from 'tap'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { MCP_MAX_BATCH } from '../../src/protocol/mcp.js'
import { build } from '../helper.js'
import { pgDatabase } from '../pg.js'
import { checkRpcError } from './client.js'

const KEYS = { a: 'a'.repeat(32), b: 'b'.repeat(32) }
const API_KEYS = JSON.stringify(Object.entries(KEYS).map(([name, key]) => ({ name, key, scopes: ['assist:invoke', 'sessions:read'] })))
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' }

interface Answer { id: number, result?: { isError?: boolean, content: Array<{ text: string }> }, error?: { message: string } }

/** An MCP session of `key` (initialized, `notifications/initialized` sent: two requests of its rate limit). */
async function session (app: FastifyInstance, key: string): Promise<(body: unknown) => Promise<LightMyRequestResponse>> {
  const headers = { ...HEADERS, authorization: `Bearer ${key}` }
  const init = await app.inject({ method: 'POST', url: '/mcp', headers, payload: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'limits', version: '1' } } } })
  const id = init.headers['mcp-session-id'] as string
  const send = async (body: unknown): Promise<LightMyRequestResponse> => await app.inject({ method: 'POST', url: '/mcp', headers: { ...headers, 'mcp-session-id': id }, payload: body as Record<string, unknown> })
  await send({ jsonrpc: '2.0', method: 'notifications/initialized' })
  return send
}

/** A batch of `n` calls of `tool` (ids 1 to n). */
function calls (n: number, tool = 'echo'): unknown[] {
  return Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: i + 1, method: 'tools/call', params: { name: tool, arguments: { query: `call ${i + 1}`, delay_ms: 0 } } }))
}

/** The JSON-RPC responses of an SSE answer, by id (they come as the calls end). */
function answers (res: LightMyRequestResponse): Answer[] {
  return res.body.split('\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as Answer & { method?: string })
    .filter((m) => m.method === undefined).sort((x, y) => String(x.id).localeCompare(String(y.id), 'en', { numeric: true }))
}

/** The runs the audit log saw. */
async function runs (app: FastifyInstance): Promise<number> {
  return (await app.audit.list({ action: 'assist', limit: 1000 })).length
}

t.test('regression (issue 27, fault 5): each tools/call of a batch takes its own stream slot; past MAX_STREAMS_PER_CALLER the batch is refused whole, before anything runs', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', API_KEYS, MAX_STREAMS_PER_CALLER: '2', WORKERS_PER_TYPE: '0' })
  const a = await session(app, KEYS.a)
  const atCap = await a(calls(2, 'echo-stream'))
  t.equal(atCap.statusCode, 200, 'a batch of exactly the cap')
  t.same(answers(atCap).map((m) => [m.id, m.result?.isError ?? false]), [[1, false], [2, false]])
  t.equal(await runs(app), 2)

  for (const n of [3, 12]) {
    const over = await a(calls(n, 'echo-stream'))
    t.equal(over.statusCode, 429, `a batch of ${n}: one call past the cap, or more`)
    t.match(checkRpcError(over.json()).error.data, { code: 'AH_ERR_TOO_MANY_STREAMS', details: { limit: 'caller_streams', max: 2 } })
    t.ok(over.headers['retry-after'])
  }
  t.equal(await runs(app), 2, 'no call of a refused batch ran')
  const b = await session(app, KEYS.b)
  t.equal((await b(calls(2, 'echo-stream'))).statusCode, 200, 'another key holds its own slots')
  t.equal((await a(calls(1, 'echo-stream'))).statusCode, 200, 'the slots came back when the batches ended')
  const results = Array.from({ length: 3 }, (_, i) => ({ jsonrpc: '2.0', id: 100 + i, method: 'tasks/result', params: { taskId: `0000000${i}-0000-4000-8000-000000000000` } }))
  const waits = await a(results)
  t.equal(waits.statusCode, 429, 'a tasks/result waits on a run as a call does: it takes a slot too')
  t.match(checkRpcError(waits.json()).error.data, { code: 'AH_ERR_TOO_MANY_STREAMS' })
})

t.test('regression (issue 27, fault 5): each JSON-RPC request of a batch counts once against its caller\'s RATE_LIMIT_MAX, and only its caller\'s', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', API_KEYS, RATE_LIMIT_MAX: '10', WORKERS_PER_TYPE: '0' })
  const a = await session(app, KEYS.a)
  const b = await session(app, KEYS.b)
  // each key made two requests (initialize, notifications/initialized): 8 left
  const over = await a([...calls(8), { jsonrpc: '2.0', id: 'list', method: 'tools/list' }])
  t.equal(over.statusCode, 429, 'a batch of one more than the caller has left')
  t.match(checkRpcError(over.json()).error.data, { code: 'AH_ERR_RATE_LIMITED', details: { limit: 'caller', max: 10 } })
  t.equal(over.headers['x-ratelimit-remaining'], '0')
  t.equal(await runs(app), 0, 'nothing of it ran')

  const exact = await b([...calls(7), { jsonrpc: '2.0', id: 'list', method: 'tools/list' }])
  t.equal(exact.statusCode, 200, 'another key\'s batch of exactly what it has left')
  t.equal(exact.headers['x-ratelimit-remaining'], '0', 'each request of it counted')
  const got = answers(exact)
  t.equal(got.length, 8)
  t.notOk(got.some((m) => m.result?.isError === true || m.error !== undefined), 'every call ran')
  t.equal(await runs(app), 7)
  t.equal((await b({ jsonrpc: '2.0', id: 9, method: 'tools/list' })).statusCode, 429, 'then its budget is spent')
})

t.test('regression (issue 27, fault 5): RATE_LIMIT_AGENT_MAX counts each call of a batch; the calls past it are refused one by one', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', API_KEYS, RATE_LIMIT_AGENT_MAX: '5', WORKERS_PER_TYPE: '0' })
  const a = await session(app, KEYS.a)
  const first = await a(calls(3))
  t.same(answers(first).map((m) => m.result?.isError ?? false), [false, false, false])
  // 2 runs left for echo, all callers together
  const over = await a(calls(3))
  t.equal(over.statusCode, 200)
  const results = answers(over)
  t.equal(results.filter((m) => m.result?.isError !== true).length, 2, 'the budget left ran')
  t.match(results.filter((m) => m.result?.isError === true), [{ result: { content: [{ text: /^AH_ERR_RATE_LIMITED: .*agent "echo" may be given 5 new runs/ }] } }], 'the one call past it was refused, alone')
  t.equal(await runs(app), 5)
})

t.test('regression (issue 27, fault 5): a batch refused at the door spends nothing of another key\'s agent budget', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', API_KEYS, RATE_LIMIT_AGENT_MAX: '5', MAX_STREAMS_PER_CALLER: '5', WORKERS_PER_TYPE: '0' })
  const a = await session(app, KEYS.a)
  const b = await session(app, KEYS.b)
  t.equal((await a(calls(6))).statusCode, 429, 'past a\'s stream cap')
  const exact = await b(calls(5))
  t.same(answers(exact).map((m) => m.result?.isError ?? false), [false, false, false, false, false], 'b has the agent\'s whole budget')
})

t.test(`a batch holds at most ${MCP_MAX_BATCH} messages (MCP_MAX_BATCH), rate limits or none: one more is a 400`, async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', RATE_LIMIT_MAX: '0' })
  const a = await session(app, KEYS.a)
  const list = (n: number): unknown[] => Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: i + 1, method: 'tools/list' }))
  const atCap = await a(list(MCP_MAX_BATCH))
  t.equal(atCap.statusCode, 200)
  t.equal(answers(atCap).length, MCP_MAX_BATCH)
  const over = await a(list(MCP_MAX_BATCH + 1))
  t.equal(over.statusCode, 400)
  const body = checkRpcError(over.json()).error.data as unknown as { code: string, details: { errors: Array<{ path: string, message: string }> } }
  t.equal(body.code, 'AH_ERR_VALIDATION')
  t.ok(body.details.errors.some((e) => e.path === '/' && e.message === `must NOT have more than ${MCP_MAX_BATCH} items`), 'it says why')
})

t.test('on PostgreSQL (limits shared by the cluster): the same stream cap, caller and agent budgets per call of a batch', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const app = await build(t, { DATABASE_URL: url, AUTH_MODE: 'apikey', API_KEYS, MAX_STREAMS_PER_CALLER: '3', RATE_LIMIT_MAX: '9', RATE_LIMIT_AGENT_MAX: '3', WORKERS_PER_TYPE: '0' })
  const a = await session(app, KEYS.a)
  const b = await session(app, KEYS.b)
  t.equal((await a(calls(4))).statusCode, 429, 'past the stream cap: refused whole')
  t.equal(await runs(app), 0)
  const ran = await b(calls(3))
  t.equal(ran.statusCode, 200)
  t.equal(ran.headers['x-ratelimit-remaining'], '4', 'three requests of b counted')
  t.same(answers(ran).map((m) => m.result?.isError ?? false), [false, false, false], 'the agent\'s whole budget, untouched by a')
  const over = await a(calls(2))
  t.same(answers(over).map((m) => m.result?.isError ?? false), [true, true], 'then the agent\'s budget is spent, call by call')
  t.equal((await a(calls(3))).statusCode, 429, 'and a is past its own requests (2 + 4 + 2 + 3 of 9)')
})
