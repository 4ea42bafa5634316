import t, { type Test } from 'tap'
import { fileURLToPath } from 'node:url'
import { buildApp } from '../../src/app.js'
import { build, envelope, testConfig } from '../helper.js'
import { calls } from '../fixtures/contract-agents/contract-probe/index.js'

const DIR = fileURLToPath(new URL('../fixtures/contract-agents/', import.meta.url))
const OLD = fileURLToPath(new URL('../fixtures/contract-agents-old/', import.meta.url))
const PROBE = 'c0000000-0000-4000-8000-000000000001'
const json = { accept: 'application/json' }

async function app (t: Test): ReturnType<typeof build> {
  return await build(t, { AGENTS_DIR: DIR, WORKERS_PER_TYPE: '0' })
}

interface Recorded { type: string, request_id: string, trace_id: string, event: { data?: { trace_id?: string, task_id?: string } } }
/** The run's recorded events, agent.log lines left out. */
async function eventsOf (a: Awaited<ReturnType<typeof build>>, requestId: string): Promise<Recorded[]> {
  const page = (await a.inject({ url: '/v1/events?limit=500' })).json() as { events: Recorded[] }
  return page.events.filter((e) => e.request_id === requestId && e.type !== 'agent.log')
}

t.test('a contract agent is served with its contract version and intents, its outputs the AgentOutput schema', async (t) => {
  const a = await app(t)
  const manifest = (await a.inject({ url: `/v1/agents/${PROBE}` })).json()
  t.match(manifest.custom_metadata, { contract: { version: '2.1.0', host_version: '2.0.0', intents: ['research'], capabilities: { languages: ['typescript'] } } })
  t.match(manifest.capabilities[0].outputs, { title: 'AgentOutput', required: ['task_id', 'status'] })
})

t.test('status ok: the AgentOutput is the result, every state change and the agent\'s own events are recorded with the trace id', async (t) => {
  const a = await app(t)
  const env = envelope(PROBE, { mode: 'ok' })
  const res = await a.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: env })
  t.equal(res.statusCode, 200)
  const traceId = (env.context.trace as { trace_id: string }).trace_id
  const output = res.json().output
  t.match(output, { task_id: String, status: 'ok', metrics: { files_scanned: 12 }, artifacts: [{ kind: 'report' }] })
  t.match(calls.at(-1), { intent: 'research', task_id: output.task_id, traceId })
  const events = await eventsOf(a, env.request_id)
  t.same(events.map((e) => e.type), ['contract.started', 'research.complete', 'contract.completed'])
  t.ok(events.every((e) => e.trace_id === traceId && e.event.data?.trace_id === traceId && e.event.data.task_id === output.task_id), 'every event carries the trace id and the task id')
  const sse = await a.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(PROBE, { mode: 'ok' }) })
  t.match(sse.body, /"type":"DATA".*"title":"report: reports\//, 'an artifact is a DATA event')
})

t.test('rule 1: input that breaks the capability\'s schema is a 400 naming the path, and execute never runs', async (t) => {
  const a = await app(t)
  const before = calls.length
  const res = await a.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: envelope(PROBE, { mode: 'sideways' }) })
  t.equal(res.statusCode, 400)
  t.match(res.json(), { code: 'AH_ERR_VALIDATION', details: { errors: [{ path: '/payload/payload/mode' }] } })
  t.equal(calls.length, before)
})

t.test('rule 2: an output off the contract, refused by validate(), or for another task is a contract violation, never passed on', async (t) => {
  const a = await app(t)
  for (const mode of ['invalid', 'refuse', 'wrong_task']) {
    const env = envelope(PROBE, { mode })
    const res = await a.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: env })
    t.equal(res.statusCode, 502, mode)
    t.equal(res.json().code, 'AH_ERR_AGENT_FAILED')
    t.match(JSON.stringify(res.json().details), /contract/, `${mode}: the error says it was the contract`)
    t.match((await eventsOf(a, env.request_id)).map((e) => e.type), ['contract.started', 'contract.violated'])
  }
})

t.test('rule 3: statuses and errors map to stable answers', async (t) => {
  const a = await app(t)
  for (const [mode, status] of [['retry', 'retry'], ['fail', 'fail']] as const) {
    const env = envelope(PROBE, { mode })
    const res = await a.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: env })
    t.equal(res.statusCode, 200)
    t.match(res.json().output, { status, error: String })
    t.equal((await eventsOf(a, env.request_id)).at(-1)?.type, mode === 'retry' ? 'contract.retry_requested' : 'contract.failed')
  }
  const env = envelope(PROBE, { mode: 'throw' })
  const thrown = await a.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: env })
  t.equal(thrown.statusCode, 502)
  t.match(thrown.json(), { code: 'AH_ERR_AGENT_FAILED', details: { error: { code: 'agent_failed' } } })
  t.notMatch(thrown.body, /the probe broke/, 'an unsafe message is not leaked')
  t.match((await eventsOf(a, env.request_id)).map((e) => e.type), ['contract.started', 'contract.failed'])
})

t.test('rule 5: constraints.timeout aborts the call through its signal', async (t) => {
  const a = await app(t)
  const env = envelope(PROBE, { mode: 'slow' }, { agentRequest: { metadata: { constraints: { timeout: 0.2 } } } })
  const started = Date.now()
  const res = await a.inject({ method: 'POST', url: '/v1/assist', headers: json, payload: env })
  t.equal(res.statusCode, 502)
  t.match(JSON.stringify(res.json().details), /contract_timeout/)
  t.ok(Date.now() - started < 4000, 'well before the capability\'s own 5 s')
  t.match(calls.at(-1), { constraints: { timeout: 0.2 } })
  t.match((await eventsOf(a, env.request_id)).map((e) => e.type), ['contract.started', 'contract.timed_out'])
})

t.test('an agent written for another major contract version is refused at boot, naming both versions', async (t) => {
  await t.rejects(buildApp(testConfig(t, { AGENTS_DIR: OLD, WORKERS_PER_TYPE: '0' })), /old-contract.*1\.4\.0.*2\.0\.0/s)
})
