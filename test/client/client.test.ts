import t from 'tap'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { AgentHostClient, AgentHostError, buildEnvelope } from '../../client/src/index.js'
import { AGENTS, FIXTURE_AGENTS_DIR, listen, SCRIPTED } from '../helper.js'
import { until } from '../socket.js'
import { observed } from '../fixtures/agents/scripted/index.js'
import { rejection } from './fixtures/rejection.js'

const KEY = 'client-test-key-0123456789abcdef'
const API_KEYS = JSON.stringify([{ name: 'web', key: KEY, scopes: ['assist:invoke', 'agents:read'] }])

/** A `fetch` that answers `response` whatever it is asked. */
function answering (response: () => Response): typeof fetch {
  return (async () => response()) as typeof fetch
}

/** A body that fails once read. */
function failingBody (): ReadableStream<Uint8Array> {
  return new ReadableStream({ pull (controller) { controller.error(new Error('connection reset')) } })
}

t.test('assist answers JSON with the agent\'s result; the same envelope again is the same answer (the agent ran once)', async (t) => {
  const { url } = await listen(t)
  const client = new AgentHostClient({ baseUrl: url })
  const answer = await client.assist({ agentId: AGENTS.echo, query: 'hello' })
  t.match(answer, { output: { echo: 'hello', calls: 1 }, metrics: { packets: Number } })
  t.match(answer.request_id, /^[0-9a-f-]{36}$/)
  const envelope = buildEnvelope({ agentId: AGENTS.echo, query: 'again' })
  const first = await client.assist(envelope)
  t.equal(first.request_id, envelope.request_id)
  t.same(await client.assist(envelope), first, 'a retry gets the stored answer')
  t.equal(first.output.calls, 1)
})

t.test('agents lists the hosted manifests (a trailing slash on the base URL is fine)', async (t) => {
  const { url } = await listen(t)
  const agents = await new AgentHostClient({ baseUrl: `${url}/` }).agents()
  t.ok(agents.some((a) => a.metadata.id === AGENTS.echo && a.capabilities[0]?.delivery_mode === 'request_response'))
  t.ok(agents.some((a) => a.metadata.name === 'echo-stream'))
})

t.test('an unknown agent is a 404 AgentHostError with the server\'s code, message and the request id', async (t) => {
  const { url } = await listen(t)
  const envelope = buildEnvelope({ agentId: randomUUID(), query: 'x' })
  const error = await rejection(new AgentHostClient({ baseUrl: url }).assist(envelope))
  t.ok(error instanceof Error)
  t.match(error, { name: 'AgentHostError', status: 404, code: 'AH_ERR_AGENT_NOT_FOUND', requestId: envelope.request_id, message: new RegExp(envelope.context.agent_id) })
})

t.test('an invalid request is a 400 AH_ERR_VALIDATION whose details list the failing paths', async (t) => {
  const { url } = await listen(t)
  const client = new AgentHostClient({ baseUrl: url })
  const missing = await rejection(client.assist({ agentId: AGENTS.echoStream }))
  t.match(missing, { status: 400, code: 'AH_ERR_VALIDATION', details: { errors: [{ path: /query/ }] } })
  const envelope = buildEnvelope({ agentId: AGENTS.echo, query: 'x' })
  const broken = await rejection(client.assist({ ...envelope, payload: { ...envelope.payload, session_id: randomUUID() } }))
  t.match(broken, { status: 400, code: 'AH_ERR_VALIDATION', requestId: envelope.request_id })
})

t.test('with AUTH_MODE=apikey: a bad key is a 401 AH_ERR_AUTH_REQUIRED, the apiKey option passes a valid one', async (t) => {
  const { url } = await listen(t, { AUTH_MODE: 'apikey', API_KEYS })
  const stranger = new AgentHostClient({ baseUrl: url, apiKey: 'ahk_not_a_real_key' })
  const refused = await rejection(stranger.agents())
  t.match(refused, { status: 401, code: 'AH_ERR_AUTH_REQUIRED' })
  t.equal(refused.requestId, undefined, 'no envelope, no request id')
  t.match(await rejection(new AgentHostClient({ baseUrl: url }).assist({ agentId: AGENTS.echo, query: 'x' })), { status: 401, code: 'AH_ERR_AUTH_REQUIRED' })
  const client = new AgentHostClient({ baseUrl: url, apiKey: KEY })
  t.ok((await client.agents()).length > 0)
  t.match(await client.assist({ agentId: AGENTS.echo, query: 'with a key' }), { output: { echo: 'with a key' } })
  const ops: string[] = []
  for await (const packet of client.stream({ agentId: AGENTS.echoStream, input: { query: 'a b', delay_ms: 0 } })) ops.push(packet.op)
  t.equal(ops.at(-1), 'CLOSE', 'streams carry the key too')
})

t.test('every call sends the key, the extra headers and the right Accept; envelopes carry their trace as traceparent', async (t) => {
  const { url } = await listen(t, { AUTH_MODE: 'apikey', API_KEYS })
  const sent: Array<{ url: string, headers: Record<string, string> }> = []
  const recording = (async (input: string, init: RequestInit) => {
    sent.push({ url: input, headers: init.headers as Record<string, string> })
    return await fetch(input, init)
  }) as typeof fetch
  const client = new AgentHostClient({ baseUrl: url, apiKey: KEY, headers: { 'x-client': 'tests' }, fetch: recording })
  await client.agents()
  const envelope = buildEnvelope({ agentId: AGENTS.echo, query: 'x', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' })
  await client.assist(envelope)
  t.match(sent[0], { url: `${url}/v1/agents`, headers: { authorization: `Bearer ${KEY}`, 'x-client': 'tests', accept: 'application/json' } })
  t.notOk('content-type' in (sent[0]?.headers ?? {}), 'no body, no content type')
  t.match(sent[1], {
    url: `${url}/v1/assist`,
    headers: { authorization: `Bearer ${KEY}`, 'x-client': 'tests', accept: 'application/json', 'content-type': 'application/json', traceparent: /^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/ }
  })
  const own = new AgentHostClient({ baseUrl: url, apiKey: KEY, headers: { traceparent: '00-11111111111111111111111111111111-2222222222222222-01' }, fetch: recording })
  await own.assist({ agentId: AGENTS.echo, query: 'y' })
  t.equal(sent[2]?.headers.traceparent, '00-11111111111111111111111111111111-2222222222222222-01', 'a traceparent the caller set is kept')
})

t.test('a server that cannot be reached is a network_error', async (t) => {
  const closed = createServer().listen(0, '127.0.0.1')
  await once(closed, 'listening')
  const { port } = closed.address() as { port: number }
  await new Promise((resolve) => closed.close(resolve))
  const client = new AgentHostClient({ baseUrl: `http://127.0.0.1:${port}` })
  const error = await rejection(client.assist({ agentId: AGENTS.echo, query: 'x' }))
  t.match(error, { status: 0, code: 'network_error', message: /Could not reach the server/ })
  t.ok(error.cause instanceof Error, 'the cause is kept')
  t.match(await rejection(client.agents()), { code: 'network_error' })
  const thrower = new AgentHostClient({ baseUrl: '', fetch: (async () => { throw 'not an Error' }) as unknown as typeof fetch }) // eslint-disable-line no-throw-literal
  t.match(await rejection(thrower.agents()), { code: 'network_error', message: /not an Error/ })
})

t.test('an AbortSignal aborts assist before it is sent and while it waits: code aborted, the reason as cause', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const client = new AgentHostClient({ baseUrl: url })
  const early = await rejection(client.assist({ agentId: AGENTS.echo, query: 'x' }, { signal: AbortSignal.abort('never mind') }))
  t.match(early, { status: 0, code: 'aborted', cause: 'never mind' })
  const envelope = buildEnvelope({ agentId: SCRIPTED, input: { script: [{ op: 'wait_abort' }] } })
  const controller = new AbortController()
  const pending = rejection(client.assist(envelope, { signal: controller.signal }))
  await until('the agent to start', () => observed.started.includes(envelope.context.session_id))
  controller.abort('user left')
  t.match(await pending, { code: 'aborted', cause: 'user left', requestId: envelope.request_id })
  await client.cancel(envelope.request_id)
  t.match(await rejection(client.agents({ signal: AbortSignal.abort() })), { code: 'aborted' })
  t.match(await rejection(client.cancel(randomUUID(), { signal: AbortSignal.abort() })), { code: 'aborted' })
})

t.test('answers that are not CAP\'s: http_error without an error body, invalid_response for bad JSON, network_error for a body that breaks', async (t) => {
  const call = async (response: () => Response) => await rejection(new AgentHostClient({ baseUrl: '', fetch: answering(response) }).assist({ agentId: AGENTS.echo, query: 'x' }))
  t.match(await call(() => new Response('<html>Bad gateway</html>', { status: 502 })), { status: 502, code: 'http_error', details: '<html>Bad gateway</html>', message: 'HTTP 502 without an error body' })
  t.match(await call(() => new Response('{"error":"x"}', { status: 500 })), { status: 500, code: 'http_error' })
  t.match(await call(() => new Response(failingBody(), { status: 500 })), { status: 500, code: 'http_error', details: '' })
  t.match(await call(() => new Response('not json', { status: 200 })), { status: 200, code: 'invalid_response', message: /Expected JSON, got "not json"/ })
  t.match(await call(() => new Response(failingBody(), { status: 200 })), { status: 0, code: 'network_error' })
  const agents = await rejection(new AgentHostClient({ baseUrl: '', fetch: answering(() => new Response('[', { status: 200 })) }).agents())
  t.match(agents, { code: 'invalid_response' })
  t.equal(agents.requestId, undefined)
})

t.test('AgentHostError keeps what it is given and nothing else', async (t) => {
  const bare = new AgentHostError('m', { status: 0, code: 'network_error' })
  t.notOk('cause' in bare)
  t.notOk('details' in bare)
  t.notOk('requestId' in bare)
  const full = new AgentHostError('m', { status: 400, code: 'AH_ERR_VALIDATION', details: { errors: [] }, requestId: 'r', cause: undefined })
  t.ok('cause' in full, 'an explicit cause is kept, even undefined')
  t.same([full.details, full.requestId], [{ errors: [] }, 'r'])
})
