import t from 'tap'
import { hostAgent } from '../../src/agents/hosted-agent.js'
import { loadConfig } from '../../src/config.js'
import { AGENTS, build, envelope, FIXTURE_AGENTS_DIR, tempDataDir } from '../helper.js'
import { checkErrorBody, checkServiceResponse, parseSse } from '../sse.js'
import { observed } from '../fixtures/agents/scripted/index.js'
import { BackendRegistry, createBackends } from '../../src/backends/registry.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

t.test('usage() adds up into the JSON metrics and is a USAGE event; bad figures are refused', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const script = [
    { op: 'usage', usage: { input_tokens: 10, output_tokens: 3 }, cost: 0.25 },
    { op: 'usage', usage: { input_tokens: 5, output_tokens: 2 } },
    { op: 'usage', usage: { input_tokens: -1, output_tokens: 2 } },
    { op: 'usage', usage: { input_tokens: 1, output_tokens: 1 }, cost: -3 },
    { op: 'usage', usage: null },
    { op: 'markdown', content: 'done' }
  ]
  const body = envelope(SCRIPTED, { script, catch: true })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
  const answer = checkServiceResponse(res.json(), true)
  t.match(answer.metrics, { usage: { input_tokens: 15, output_tokens: 5 }, cost: 0.25 })
  t.same((answer.output as { events: Array<{ type: string }> }).events.filter((e) => e.type === 'USAGE'), [
    { type: 'USAGE', data: { input_tokens: 10, output_tokens: 3, cost: 0.25 } },
    { type: 'USAGE', data: { input_tokens: 5, output_tokens: 2 } }
  ])
  t.same(observed.errors.filter((e) => e.sessionId === body.context.session_id).map((e) => e.code), ['AH_ERR_EVENT_INVALID', 'AH_ERR_EVENT_INVALID', 'AH_ERR_EVENT_INVALID'])
  const plain = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'x' }] }) })
  t.notOk('usage' in plain.json().metrics, 'no usage reported, none in the metrics')
})

t.test('a BackendError thrown by an agent becomes its own stream code and severity', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  for (const severity of ['TRANSIENT', 'FATAL']) {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'x' }, { op: 'backend_error', code: 'backend_timeout', severity }] }) })
    const errors = parseSse(res.body).packets.filter((p) => p.op === 'ERROR').map((p) => p.p)
    t.same(errors, [{ code: 'backend_timeout', message: 'the backend broke', severity, details: { why: 'test' } }])
  }
})

t.test('cli-agent over HTTP: the demo CLI streams, keeps the conversation across requests, works in its workspace', async (t) => {
  const app = await build(t)
  const sessionId = '7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d'
  const first = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(AGENTS.cliAgent, { query: 'one two three' }, { sessionId }) })
  const packets = parseSse(first.body).packets
  t.same(packets.filter((p) => p.op === 'DELTA').map((p) => p.p), ['three', ' two', ' one'])
  const thoughts = packets.filter((p) => p.op === 'EVENT' && (p.p as { type: string }).type === 'THOUGHT_TRACE').map((p) => (p.p as { data: { thought: string } }).data.thought)
  t.same(thoughts, [`Message 1 of this session, in ${sessionId}.`])
  const json = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENTS.cliAgent, { query: 'four five' }, { sessionId }) })
  const answer = checkServiceResponse(json.json(), true)
  t.equal((answer.output as { text: string }).text, 'five four')
  const events = (answer.output as { events: Array<{ type: string, data: { thought?: string } }> }).events
  t.same(events.filter((e) => e.type === 'THOUGHT_TRACE').map((e) => e.data.thought), [`Message 3 of this session, in ${sessionId}.`], 'the second request saw the first exchange')
  t.match(answer.metrics, { usage: { input_tokens: 2, output_tokens: 2 } })
  const listed = (await app.inject({ url: '/v1/backends' })).json().backends as Array<Record<string, unknown>>
  t.match(listed.find((b) => b.name === 'local'), { transport: 'local_agent', available: true, aliases: [] })
  t.same(listed.map((b) => b.name).sort(), ['anthropic', 'local', 'openai'])
})

t.test('a missing local agent binary is a 503 naming CLI_AGENT_COMMAND', async (t) => {
  const app = await build(t, { CLI_AGENT_COMMAND: '["/no/such/agent", "--flag"]' })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.cliAgent, { query: 'x' }) })
  t.equal(res.statusCode, 503)
  t.match(checkErrorBody(res.json()), { code: 'AH_ERR_BACKEND_UNAVAILABLE', message: /CLI_AGENT_COMMAND/ })
})

t.test('backend names: unknown ones are 503s; agents must declare backends as names', async (t) => {
  const registry = new BackendRegistry()
  t.throws(() => registry.backend('nope'), { code: 'AH_ERR_BACKEND_UNAVAILABLE', message: /no backend is named "nope"/ })
  await t.rejects(registry.require(['nope']), { code: 'AH_ERR_BACKEND_UNAVAILABLE' })
  const manifest = { metadata: { id: '00000000-0000-4000-8000-0000000000aa', name: 'b', version: '1.0.0', author: 'a', created_at: '2026-01-01T00:00:00Z' } }
  t.throws(() => hostAgent({ manifest, backends: 'llm', assist: async () => {} }, 'x'), /backends must be an array/)
  t.throws(() => hostAgent({ manifest, backends: [''], assist: async () => {} }, 'x'), /backends must be an array/)
  t.ok(hostAgent({ manifest, backends: ['llm'], assist: async () => {} }, 'x'))
})

t.test('backend settings are checked at boot', async (t) => {
  for (const [key, value, message] of [
    ['LLM_PRICES', 'not json', /LLM_PRICES is not JSON/],
    ['LLM_PRICES', '{"m": {"input": -1, "output": 1}}', /LLM_PRICES must be/],
    ['LLM_PRICES', '[]', /LLM_PRICES must be/],
    ['CLI_AGENT_COMMAND', '[nope', /CLI_AGENT_COMMAND is not a JSON array/],
    ['CLI_AGENT_COMMAND', '[]', /non-empty JSON array/],
    ['CLI_AGENT_COMMAND', '["ok", 3]', /non-empty JSON array/],
    ['LLM_PROVIDER', 'gemini', /LLM_PROVIDER/]
  ] as const) {
    t.throws(() => loadConfig({ [key]: value }), { code: 'AH_ERR_CONFIG_INVALID', message }, `${key}=${value}`)
  }
  const dataDir = tempDataDir(t)
  const silent = { info () {}, warn () {}, error () {} }
  t.throws(() => createBackends(loadConfig({ DATA_DIR: dataDir, CLI_AGENT_WORKSPACE: '../outside' }), silent), { code: 'AH_ERR_BACKEND_CONFIG' })
  const words = createBackends(loadConfig({ DATA_DIR: dataDir, CLI_AGENT_COMMAND: 'node agent.mjs --fast' }), silent)
  t.match(words.get('local'), { name: 'local' })
  t.same(await loadConfig({ LLM_PRICES: '{"m": {"input": 1, "output": 2}}' }).LLM_PRICES, '{"m": {"input": 1, "output": 2}}')
})
