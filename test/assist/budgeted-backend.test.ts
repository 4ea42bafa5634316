// Budgets enforced on runs, end to end: an agent calling a fake OpenAI-compatible provider (each call
// reports 100 tokens) is stopped at its limit by a refused backend call, the next run is refused before
// it starts, and what was used passes the limit by at most the one call in flight.
import t, { type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { build, envelope, tempDataDir } from '../helper.js'
import { parseSse } from '../sse.js'
import { sample } from '../metrics-text.js'
import { fakeProvider, openai, type FakeProvider } from '../fixtures/providers.js'
import { pgDatabase } from '../pg.js'

const AGENTS_DIR = fileURLToPath(new URL('../fixtures/budget-agents/', import.meta.url))
const LOOPER = 'f0000000-0000-4000-8000-0000000000b1'
const QUIET = 'f0000000-0000-4000-8000-0000000000b2'
const SSE = { accept: 'text/event-stream' }
const ADA = 'ada-key-0123456789abcdefghij'
const BOB = 'bob-key-0123456789abcdefghij'

/** A server of the looper on `fake` with `budgets` as its BUDGETS_FILE (a second one on the same file with `again`). */
async function app (t: Test, budgets: object, env: Record<string, string> = {}): Promise<{ app: FastifyInstance, fake: FakeProvider, again: () => Promise<FastifyInstance> }> {
  const fake = await fakeProvider(t)
  // every call: one word, 60 tokens in and 40 out
  fake.script({ frames: openai.text(['ok'], [60, 40]) })
  const file = join(tempDataDir(t), 'budgets.json')
  writeFileSync(file, JSON.stringify(budgets))
  const settings = {
    AGENTS_DIR,
    LLM_PROVIDER: 'openai',
    OPENAI_BASE_URL: `${fake.url}/v1`,
    OPENAI_MODEL: 'test-model',
    LLM_MAX_RETRIES: '0',
    LLM_PRICES: JSON.stringify({ 'test-model': { input: 1, output: 2 } }),
    BUDGETS_FILE: file,
    BUDGET_CALL_ESTIMATE_TOKENS: '100',
    ...env
  }
  return { app: await build(t, settings), fake, again: async () => await build(t, settings) }
}

async function loop (app: FastifyInstance, calls: number, headers: Record<string, string> = {}): Promise<{ said: string[], errors: Array<Record<string, unknown>> }> {
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { ...SSE, ...headers }, payload: envelope(LOOPER, { query: 'go', calls }) })
  if (res.statusCode !== 200) throw new Error(`the run was refused: ${res.statusCode} ${res.body}`)
  const packets = parseSse(res.body).packets
  const said = packets.filter((p) => p.op === 'EVENT' && (p.p as { type: string }).type === 'MARKDOWN_BLOCK').map((p) => ((p.p as { data: { content: string } }).data.content).trim())
  return { said, errors: packets.filter((p) => p.op === 'ERROR').map((p) => p.p as Record<string, unknown>) }
}

t.test('a run\'s calls stop at its tenant\'s limit, and its next run is refused before it starts', async (t) => {
  const { app: server, fake } = await app(t, { default: { day: { tokens: 350 } } })
  const run = await loop(server, 10)
  t.same(run.said, ['call 1', 'call 2', 'call 3', 'call 4'], 'three calls fit; the fourth runs alone past the estimate (used 300 of 350)')
  t.equal(fake.received.length, 4, 'the refused call never reached the provider')
  t.equal(run.errors.length, 1)
  t.match(run.errors[0], { code: 'budget_exceeded', severity: 'TRANSIENT', message: /daily token budget of tenant default \(350 tokens\) is used up \(400 tokens used\); it resets at / })
  t.match(run.errors[0]?.details, { subject: 'tenant', tenant: 'default', period: 'day', measure: 'tokens', limit: 350, used: 400 })

  const refused = await server.inject({ method: 'POST', url: '/v1/assist', headers: SSE, payload: envelope(LOOPER, { query: 'again', calls: 1 }) })
  t.equal(refused.statusCode, 429)
  t.match(refused.json(), { code: 'AH_ERR_BUDGET_EXCEEDED', details: { period: 'day', limit: 350, used: 400, resets_at: /T00:00:00.000Z$/ } })
  const retryAfter = Number(refused.headers['retry-after'])
  t.ok(retryAfter >= 1 && retryAfter <= 86_400, `Retry-After is the seconds until the day resets (${retryAfter})`)
  const a2a = await server.inject({ method: 'POST', url: `/a2a/${LOOPER}`, headers: { 'a2a-version': '1.0' }, payload: { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ data: { query: 'again', calls: 1 } }] } } } })
  t.match({ status: a2a.statusCode, code: a2a.json().code, retryAfter: Number(a2a.headers['retry-after']) }, { status: 429, code: 'AH_ERR_BUDGET_EXCEEDED', retryAfter: Number }, 'A2A: the same 429 before a run starts, with Retry-After')
  t.equal(fake.received.length, 4, 'no run started')

  const quiet = await server.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(QUIET, { query: 'hi' }) })
  t.equal(quiet.statusCode, 200, 'an agent that calls no model still runs')

  const usage = await server.inject({ url: '/v1/usage' })
  t.equal(usage.statusCode, 200)
  const day = (usage.json() as { budgets: Array<Record<string, unknown>> }).budgets.find((b) => b.key === null && b.period === 'day')
  t.match(day, { tenant: 'default', limit: { tokens: 350 }, used: { tokens: 400, cost_usd: 4 * (60 * 1 + 40 * 2) / 1e6 }, reserved: { tokens: 0, calls: 0 } }, 'usage passed the limit by at most the one call in flight, and holds nothing')

  const metrics = await server.inject({ url: '/metrics' })
  t.equal(sample(metrics.body, 'agent_host_tokens_total', { tenant: 'default', agent: 'looper', model: 'test-model', direction: 'output' }), 160, 'the metrics count tokens by tenant')
})

t.test('a key\'s limit stops that key, not the others of its tenant', async (t) => {
  const keys = JSON.stringify([{ name: 'ada', key: ADA, scopes: ['assist:invoke'] }, { name: 'bob', key: BOB, scopes: ['assist:invoke'] }])
  const { app: server } = await app(t, { default: { day: { tokens: 100_000 } }, keys: { 'config:ada': { day: { tokens: 150 } } } }, { AUTH_MODE: 'apikey', API_KEYS: keys })
  const ada = await loop(server, 5, { authorization: `Bearer ${ADA}` })
  t.same(ada.said, ['call 1', 'call 2'])
  t.match(ada.errors[0], { code: 'budget_exceeded', details: { subject: 'key', key: 'config:ada', limit: 150, used: 200 } })
  const bob = await loop(server, 5, { authorization: `Bearer ${BOB}` })
  t.same(bob.said.length, 5, 'bob is held to the tenant\'s limit only')
  const again = await server.inject({ method: 'POST', url: '/v1/assist', headers: { ...SSE, authorization: `Bearer ${ADA}` }, payload: envelope(LOOPER, { query: 'again', calls: 1 }) })
  t.match({ status: again.statusCode, body: again.json() }, { status: 429, body: { code: 'AH_ERR_BUDGET_EXCEEDED', details: { key: 'config:ada' } } })
})

t.test('without BUDGETS_FILE nothing is held or refused', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: openai.text(['ok'], [60, 40]) })
  const server = await build(t, { AGENTS_DIR, LLM_PROVIDER: 'openai', OPENAI_BASE_URL: `${fake.url}/v1`, LLM_MAX_RETRIES: '0' })
  t.same((await loop(server, 3)).said, ['call 1', 'call 2', 'call 3'])
  t.same((await server.inject({ url: '/v1/usage' })).json(), { budgets: [] })
})

t.test('PostgreSQL: two instances running loops for one tenant at once stop at its limit, passing it by at most the one call in flight', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const LIMIT = 1_000
  const { app: one, fake, again } = await app(t, { default: { day: { tokens: LIMIT } } }, { DATABASE_URL: url, WORKERS_PER_TYPE: '0' })
  const other = await again()
  // three runs of 10 calls on each instance at once: 60 calls of 100 tokens asked for, 10 fit
  const runs = await Promise.all([one, other].flatMap((server) => [1, 2, 3].map(async () => await loop(server, 10))))
  const made = runs.reduce((n, r) => n + r.said.length, 0)
  t.equal(fake.received.length, made, 'every call said made reached the provider; no refused one did')
  t.ok(made >= LIMIT / 100 && made <= LIMIT / 100 + 1, `the calls made stop at the limit, one past it at most (${made})`)
  t.ok(runs.every((r) => r.errors.length === 1 && r.errors[0]?.code === 'budget_exceeded'), 'every run ends at a refused call')
  const day = ((await other.inject({ url: '/v1/usage' })).json() as { budgets: Array<{ key: string | null, period: string, used: { tokens: number }, reserved: { calls: number } }> }).budgets.find((b) => b.key === null && b.period === 'day')
  t.ok((day?.used.tokens ?? 0) <= LIMIT + 100, `usage is within one call of the limit on both instances (${String(day?.used.tokens)} of ${LIMIT})`)
  t.equal(day?.used.tokens, made * 100, 'every call made is counted once')
  t.equal(day?.reserved.calls, 0, 'nothing left reserved')
})
