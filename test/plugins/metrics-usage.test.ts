import t from 'tap'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify, { type FastifyInstance } from 'fastify'
import configPlugin from '../../src/plugins/config.js'
import metricsPlugin from '../../src/plugins/metrics.js'
import storagePlugin from '../../src/plugins/storage.js'
import { AH_ERR_VALIDATION, errorBody } from '../../src/errors.js'
import { MAX_MODELS } from '../../src/metrics.js'
import { AGENTS, build, envelope, FIXTURE_AGENTS_DIR, listen, SCRIPTED, testConfig } from '../helper.js'
import { sample, samples } from '../metrics-text.js'
import { open, until } from '../socket.js'
import { parseSse } from '../sse.js'
import { fakeProvider, openai, type FakeProvider } from '../fixtures/providers.js'

/** The metered test agent (test/fixtures/usage-agents/metered): one LLM call, with or without capBridge. */
const METERED = 'f0000000-0000-4000-8000-0000000000a1'
const USAGE_AGENTS_DIR = fileURLToPath(new URL('../fixtures/usage-agents/', import.meta.url))
const PRICES = { 'test-model': { input: 2, output: 10 }, 'big-model': { input: 3, output: 15 } }
const JSON_ACCEPT = { accept: 'application/json' }
const SSE_ACCEPT = { accept: 'text/event-stream' }

function openAiEnv (fake: FakeProvider): Record<string, string> {
  return { LLM_PROVIDER: 'openai', OPENAI_BASE_URL: `${fake.url}/v1`, OPENAI_MODEL: 'test-model', LLM_MAX_RETRIES: '0', LLM_PRICES: JSON.stringify(PRICES) }
}

async function scrape (app: FastifyInstance, headers: Record<string, string> = {}): Promise<string> {
  const res = await app.inject({ url: '/metrics', headers })
  if (res.statusCode !== 200) throw new Error(`GET /metrics answered ${res.statusCode}`)
  return res.body
}

/** Scrape until `check` holds (what a run tells at its end is told once its end is recorded). */
async function scrapeUntil (app: FastifyInstance, what: string, check: (text: string) => boolean, headers: Record<string, string> = {}): Promise<string> {
  const deadline = Date.now() + 5000
  for (let text = await scrape(app, headers); ; text = await scrape(app, headers)) {
    if (check(text)) return text
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

const tokens = (text: string, agent: string, model: string, direction: 'input' | 'output'): number | undefined =>
  sample(text, 'agent_host_tokens_total', { agent, model, direction })
const cost = (text: string, agent: string, model: string): number | undefined => sample(text, 'agent_host_cost_usd_total', { agent, model })
const near = (value: number | undefined, expected: number): boolean => value !== undefined && Math.abs(value - expected) < 1e-12

t.test('a backend call counts its tokens and cost once, by agent and the model it called (llm-chat, SSE and JSON)', async (t) => {
  const fake = await fakeProvider(t)
  const app = await build(t, openAiEnv(fake))
  fake.script({ frames: openai.text(['Hello'], [12, 4]) })
  const sse = await app.inject({ method: 'POST', url: '/v1/assist', headers: SSE_ACCEPT, payload: envelope(AGENTS.llmChat, { query: 'hi' }) })
  const usage = parseSse(sse.body).packets.filter((p) => p.op === 'EVENT' && (p.p as { type: string }).type === 'USAGE')
  t.equal(usage.length, 1, 'the agent reported the call\'s usage (capBridge): the client still gets it')
  fake.script({ frames: openai.text(['again'], [20, 1]) })
  const json = await app.inject({ method: 'POST', url: '/v1/assist', headers: JSON_ACCEPT, payload: envelope(AGENTS.llmChat, { query: 'again' }) })
  t.match(json.json().metrics, { usage: { input_tokens: 20, output_tokens: 1 } })

  const text = await scrape(app)
  t.equal(tokens(text, 'llm-chat', 'test-model', 'input'), 32)
  t.equal(tokens(text, 'llm-chat', 'test-model', 'output'), 5)
  t.ok(near(cost(text, 'llm-chat', 'test-model'), (32 * 2 + 5 * 10) / 1e6), 'priced from LLM_PRICES, in US dollars')
  t.same(samples(text, 'agent_host_tokens_total').map((s) => s.labels.model), ['test-model', 'test-model'], 'the agent\'s usage() reports of the same tokens are not counted again')
})

t.test('tokens count whether or not the agent reports them, under the model it chose; its own reports count as model "unknown"', async (t) => {
  const fake = await fakeProvider(t)
  const app = await build(t, { AGENTS_DIR: USAGE_AGENTS_DIR, ...openAiEnv(fake) })
  const call = async (payload: Record<string, unknown>, headers = JSON_ACCEPT): Promise<Record<string, unknown>> => {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers, payload: envelope(METERED, payload) })
    t.equal(res.statusCode, 200)
    return headers === JSON_ACCEPT ? res.json() : {}
  }

  fake.script({ frames: openai.text(['quiet'], [7, 3]) })
  const quiet = await call({ query: 'q' })
  t.notOk('usage' in (quiet.metrics as object), 'the agent reported no usage')
  let text = await scrape(app)
  t.equal(tokens(text, 'metered', 'test-model', 'input'), 7)
  t.equal(tokens(text, 'metered', 'test-model', 'output'), 3)
  t.ok(near(cost(text, 'metered', 'test-model'), (7 * 2 + 3 * 10) / 1e6))

  fake.script({ frames: openai.text(['big'], [5, 2]) })
  await call({ query: 'q', model: 'big-model', bridge: true }, SSE_ACCEPT)
  t.equal(fake.received.at(-1)?.body.model, 'big-model')
  text = await scrape(app)
  t.equal(tokens(text, 'metered', 'big-model', 'input'), 5, 'the model the session called, not the configured one')
  t.equal(tokens(text, 'metered', 'big-model', 'output'), 2)
  t.ok(near(cost(text, 'metered', 'big-model'), (5 * 3 + 2 * 15) / 1e6))
  t.equal(tokens(text, 'metered', 'unknown', 'input'), undefined, 'capBridge\'s report of the call is not counted again')

  fake.script({ frames: openai.text(['own'], [1, 1]) })
  await call({ query: 'q', bridge: true, own: { usage: { input_tokens: 100, output_tokens: 50 }, cost: 0.5 } })
  await call({ query: 'q', bridge: true, own: { usage: { input_tokens: 10, output_tokens: 5 } } })
  text = await scrape(app)
  t.equal(tokens(text, 'metered', 'unknown', 'input'), 110, 'reports made outside a backend\'s hand-over are the agent\'s own')
  t.equal(tokens(text, 'metered', 'unknown', 'output'), 55)
  t.equal(cost(text, 'metered', 'unknown'), 0.5, 'a report without a cost adds none')
  t.equal(tokens(text, 'metered', 'test-model', 'input'), 9, 'and the two calls themselves')
})

t.test('an agent\'s own usage() reports count as model "unknown", JSON and SSE alike', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  await app.inject({ method: 'POST', url: '/v1/assist', headers: JSON_ACCEPT, payload: envelope(SCRIPTED, { script: [{ op: 'usage', usage: { input_tokens: 10, output_tokens: 3 }, cost: 0.25 }, { op: 'usage', usage: { input_tokens: 5, output_tokens: 2 } }] }) })
  await app.inject({ method: 'POST', url: '/v1/assist', headers: SSE_ACCEPT, payload: envelope(SCRIPTED, { script: [{ op: 'usage', usage: { input_tokens: 1, output_tokens: 1 }, cost: 0.5 }] }) })
  await app.inject({ method: 'POST', url: '/v1/assist', headers: JSON_ACCEPT, payload: envelope(SCRIPTED, { script: [{ op: 'usage', usage: { input_tokens: -1, output_tokens: 1 } }], catch: true }) })
  const text = await scrape(app)
  t.equal(tokens(text, 'scripted', 'unknown', 'input'), 16, 'a refused report counts nothing')
  t.equal(tokens(text, 'scripted', 'unknown', 'output'), 6)
  t.equal(cost(text, 'scripted', 'unknown'), 0.75)
})

t.test('a backend that names no model counts as model "unknown", once (cli-agent over the local backend)', async (t) => {
  const app = await build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: JSON_ACCEPT, payload: envelope(AGENTS.cliAgent, { query: 'one two three' }) })
  const usage = res.json().metrics.usage as { input_tokens: number, output_tokens: number }
  t.ok(usage.input_tokens > 0 && usage.output_tokens > 0, 'the local agent reported usage')
  const text = await scrape(app)
  t.equal(tokens(text, 'cli-agent', 'unknown', 'input'), usage.input_tokens, 'counted at the backend, not again at capBridge\'s report')
  t.equal(tokens(text, 'cli-agent', 'unknown', 'output'), usage.output_tokens)
})

t.test('time to first packet: from the run\'s start to its first packet journaled and sent, once per run, while the run goes on', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  await app.inject({ method: 'POST', url: '/v1/assist', headers: JSON_ACCEPT, payload: envelope(SCRIPTED, { script: [{ op: 'sleep', ms: 100 }, { op: 'markdown', content: 'late' }, { op: 'markdown', content: 'more' }] }) })
  let text = await scrape(app)
  t.equal(sample(text, 'agent_host_assist_first_packet_seconds_count', { agent: 'scripted', mode: 'request_response' }), 1, 'three packets, one observation')
  t.ok((sample(text, 'agent_host_assist_first_packet_seconds_sum', { agent: 'scripted', mode: 'request_response' }) ?? 0) >= 0.1, 'from the start of the run, before the agent\'s pause')

  const body = envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'first' }, { op: 'wait_abort' }] })
  const client = await open(url, body)
  await until('the first packet', () => client.text().includes('MARKDOWN_BLOCK'))
  text = await scrape(app)
  t.equal(sample(text, 'agent_host_assist_first_packet_seconds_count', { agent: 'scripted', mode: 'server_sent_events' }), 1, 'observed at the first packet')
  t.equal(sample(text, 'agent_host_assist_duration_seconds_count', { agent: 'scripted', mode: 'server_sent_events' }), undefined, 'while the run has not ended')
  t.equal((await app.inject({ method: 'POST', url: `/v1/assist/${body.request_id}/cancel` })).statusCode, 202)
  await client.ended
  text = await scrapeUntil(app, 'the run\'s end', (text) => sample(text, 'agent_host_assist_duration_seconds_count', { agent: 'scripted', mode: 'server_sent_events' }) === 1)
  t.equal(sample(text, 'agent_host_assist_first_packet_seconds_count', { agent: 'scripted', mode: 'server_sent_events' }), 1, 'not again at the CLOSE')
})

t.test('errors by code: every AH_ERR_* answered over HTTP (refusals included), every run that ended with an ERROR packet', async (t) => {
  const admin = 'admin-key-'.padEnd(32, 'a')
  const reader = 'reader-key-'.padEnd(32, 'r')
  const app = await build(t, {
    AGENTS_DIR: FIXTURE_AGENTS_DIR,
    AUTH_MODE: 'apikey',
    API_KEYS: JSON.stringify([{ name: 'admin', key: admin, scopes: ['admin'] }, { name: 'reader', key: reader, scopes: ['agents:read'] }])
  })
  const as = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` })
  const assist = async (key: string, payload: unknown, accept = JSON_ACCEPT): Promise<number> =>
    (await app.inject({ method: 'POST', url: '/v1/assist', headers: { ...as(key), ...accept }, payload: payload as Record<string, unknown> })).statusCode

  t.equal((await app.inject({ url: '/v1/agents' })).statusCode, 401)
  t.equal(await assist(reader, envelope(SCRIPTED, { script: [] })), 403)
  t.equal(await assist(admin, { nonsense: true }), 400)
  t.equal((await app.inject({ url: '/v1/nowhere/AH_ERR_MADE_UP', headers: as(admin) })).statusCode, 404)
  t.equal((await app.inject({ url: '/v1/agents/nobody', headers: as(admin) })).statusCode, 404)
  t.equal(await assist(admin, envelope(SCRIPTED, { script: [{ op: 'throw', message: 'no' }] })), 502, 'a run that failed before any output: its JSON answer, and its ERROR packet')
  t.equal(await assist(admin, envelope(SCRIPTED, { script: [{ op: 'wait_abort' }] }, { agentRequest: { metadata: { timeout_ms: 50 } } })), 504)
  t.equal(await assist(admin, envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'x' }, { op: 'error', message: 'gave up' }] }), SSE_ACCEPT), 200)
  t.equal(await assist(admin, envelope(SCRIPTED, { script: [{ op: 'error', message: 'minor', recoverable: true }, { op: 'markdown', content: 'x' }] })), 200, 'a WARNING does not end the run')
  t.equal(await assist(admin, envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'fine' }] }), SSE_ACCEPT), 200)

  const text = await scrapeUntil(app, 'every run recorded', (text) => sample(text, 'agent_host_assist_runs_total', { mode: 'server_sent_events', end: 'done' }) === 1, as(admin))
  const errors = samples(text, 'agent_host_errors_total').map((s) => `${s.labels.source} ${s.labels.code} ${s.value}`).sort()
  t.same(errors, [
    'http AH_ERR_AGENT_FAILED 1',
    'http AH_ERR_AGENT_NOT_FOUND 1',
    'http AH_ERR_AUTH_REQUIRED 1',
    'http AH_ERR_FORBIDDEN 1',
    'http AH_ERR_ROUTE_NOT_FOUND 1',
    'http AH_ERR_RUN_TIMEOUT 1',
    'http AH_ERR_VALIDATION 1',
    'run agent_error 1',
    'run agent_failed 1',
    'run run_timeout 1'
  ], 'each error once, under its catalogue code; nothing from the request (its path) becomes a label')
})

t.test('a run the server\'s shutdown ended counts as shutting_down', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  await app.ready()
  const answer = app.inject({ method: 'POST', url: '/v1/assist', headers: JSON_ACCEPT, payload: envelope(SCRIPTED, { script: [{ op: 'wait_abort' }] }) })
  await until('the run started', () => app.runs.size === 1)
  await app.close()
  t.equal((await answer).statusCode, 503)
  const text = await app.metrics.registry.getSingleMetricAsString('agent_host_errors_total')
  t.same(samples(text, 'agent_host_errors_total').map((s) => `${s.labels.source} ${s.labels.code} ${s.value}`).sort(), ['http AH_ERR_SHUTTING_DOWN 1', 'run shutting_down 1'])
})

t.test('label values stay bounded: codes only from the catalogues, at most MAX_MODELS models', async (t) => {
  const app = await build(t)
  const { metrics } = app
  metrics.httpError('AH_ERR_MADE_UP')
  metrics.httpError(42)
  metrics.httpError('AH_ERR_VALIDATION')
  for (const code of ['made_up', 'toString', 'agent_failed']) metrics.runObserver.failed?.({ agent: 'a', mode: 'request_response', code })
  for (let i = 0; i < MAX_MODELS + 5; i++) metrics.runObserver.usage?.({ agent: 'a', model: `m${i}`, input: 1, output: 1 })
  metrics.runObserver.usage?.({ agent: 'a', model: 'm0', input: 1, output: 1 })
  const text = await scrape(app)
  t.same(samples(text, 'agent_host_errors_total').map((s) => s.labels), [{ code: 'AH_ERR_VALIDATION', source: 'http' }, { code: 'agent_failed', source: 'run' }])
  const models = new Set(samples(text, 'agent_host_tokens_total').map((s) => s.labels.model))
  t.equal(models.size, MAX_MODELS + 1)
  t.equal(tokens(text, 'a', 'other', 'input'), 5, 'models past the cap count as "other"')
  t.equal(tokens(text, 'a', 'm0', 'input'), 2, 'a model already seen keeps its own series')
})

t.test('an observer that throws is logged: the run and the other observers go on', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const told: string[] = []
  const broken = (event: string) => () => { told.push(event); throw new Error('broken observer') }
  // before the app is ready: told before the metrics' own observer
  app.assist.observe({ firstPacket: broken('firstPacket'), usage: broken('usage'), failed: broken('failed') })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: JSON_ACCEPT, payload: envelope(SCRIPTED, { script: [{ op: 'usage', usage: { input_tokens: 1, output_tokens: 2 } }, { op: 'markdown', content: 'x' }, { op: 'error', message: 'gave up' }] }) })
  t.equal(res.statusCode, 200)
  t.match(res.json().metrics, { usage: { input_tokens: 1, output_tokens: 2 } })
  t.same(told.sort(), ['failed', 'firstPacket', 'usage'])
  const text = await scrape(app)
  t.equal(sample(text, 'agent_host_assist_first_packet_seconds_count', { agent: 'scripted' }), 1)
  t.equal(tokens(text, 'scripted', 'unknown', 'output'), 2)
  t.equal(sample(text, 'agent_host_errors_total', { code: 'agent_error', source: 'run' }), 1)
})

t.test('an error answer is counted by the code in its body, whoever sent it; the plugin does without the run engine', async (t) => {
  const config = testConfig(t)
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(configPlugin, { config })
  await app.register(storagePlugin)
  await app.register(metricsPlugin)
  app.get('/coded', async (_request, reply) => await reply.code(400).send(errorBody(new AH_ERR_VALIDATION('bad'))))
  app.get('/plain', async (_request, reply) => await reply.code(400).type('text/plain').send('AH_ERR_VALIDATION'))
  app.get('/fine', async () => ({ code: 'AH_ERR_VALIDATION' }))
  for (const url of ['/coded', '/plain', '/fine']) await app.inject({ url })
  const text = await app.metrics.registry.getSingleMetricAsString('agent_host_errors_total')
  t.same(samples(text, 'agent_host_errors_total'), [{ labels: { code: 'AH_ERR_VALIDATION', source: 'http' }, value: 1 }], 'only the error answer with a JSON body')
})
