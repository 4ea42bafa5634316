import t from 'tap'
import { randomUUID } from 'node:crypto'
import { TaskState, type Message, type Part, type Task } from '@a2a-js/sdk'
import { AGENTS, build, FIXTURE_AGENTS_DIR, listen, SCRIPTED } from '../helper.js'
import { until } from '../socket.js'
import { a2aClient as client, ADMIN, ALICE, BOB, ECHO_ONLY, KEYS, message } from './client.js'

const part = (value: string | Record<string, unknown>): Part => ({ content: typeof value === 'string' ? { $case: 'text', value } : { $case: 'data', value }, metadata: undefined, filename: '', mediaType: '' })
const send = (m: Message, returnImmediately = false) => ({ tenant: '', message: m, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately }, metadata: undefined })
const rpc = (method: string, params: Record<string, unknown>) => ({ jsonrpc: '2.0', id: 7, method, params })

for (const binding of ['JSONRPC', 'HTTP+JSON'] as const) {
  t.test(`${binding}, auth on: a task is its caller's; another key cannot get, list, cancel or re-subscribe to it; an admin can`, async (t) => {
    const { app, url } = await listen(t, { AUTH_MODE: 'apikey', API_KEYS: KEYS, AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
    const alice = await client(url, SCRIPTED, binding, ALICE)
    const bob = await client(url, SCRIPTED, binding, BOB)
    const admin = await client(url, SCRIPTED, binding, ADMIN)
    const running = await alice.sendMessage(send(message([part({ script: [{ op: 'markdown', content: 'working' }, { op: 'wait_abort' }] })]), true)) as Task
    await until('the run started', () => app.runs.size === 1)

    await t.rejects(bob.getTask({ tenant: '', id: running.id, historyLength: undefined }), { name: /TaskNotFoundError/ }, 'get: not found for another key')
    await t.rejects(bob.cancelTask({ tenant: '', id: running.id, metadata: undefined }), { name: /TaskNotFoundError/ }, 'cancel: not found')
    await t.rejects(bob.resubscribeTask({ tenant: '', id: running.id }).next(), { name: /TaskNotFoundError/ }, 'resubscribe: not found')
    const listed = await bob.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 50, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false })
    t.same(listed.tasks, [], 'list: none of it')
    t.equal(app.runs.size, 1, 'still running')

    t.equal((await alice.getTask({ tenant: '', id: running.id, historyLength: undefined })).status?.state, TaskState.TASK_STATE_WORKING, 'its owner sees it working')
    t.equal((await admin.getTask({ tenant: '', id: running.id, historyLength: undefined })).id, running.id, 'an admin sees anyone\'s')
    t.equal((await admin.cancelTask({ tenant: '', id: running.id, metadata: undefined })).status?.state, TaskState.TASK_STATE_CANCELED, 'and may cancel it')

    const audit = (await app.inject({ url: '/v1/audit?action=assist.cancel', headers: { authorization: `Bearer ${ADMIN}` } })).json() as { rows: Array<{ actor: string }> }
    t.equal(audit.rows.length, 1, 'the cancel is audited, as any cancel')
  })
}

t.test('auth on: no key is a 401 on both bindings; a key that may not invoke the agent is a 403; the cards stay public and name the scheme', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', API_KEYS: KEYS, WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  const body = rpc('SendMessage', { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'hi' }] } })
  const headers = { 'a2a-version': '1.0' }
  const anonymous = await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}`, headers, payload: body })
  t.equal(anonymous.statusCode, 401)
  t.equal(anonymous.json().code, 'AH_ERR_AUTH_REQUIRED')
  t.equal((await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}/rest/message:send`, headers, payload: body.params })).statusCode, 401)
  t.equal((await app.inject({ url: `/a2a/${AGENTS.echo}/rest/tasks`, headers })).statusCode, 401)

  const refused = await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echoStream}`, headers: { ...headers, authorization: `Bearer ${ECHO_ONLY}` }, payload: body })
  t.equal(refused.statusCode, 403, 'a key limited to other agents')
  t.equal(refused.json().code, 'AH_ERR_FORBIDDEN')
  const allowed = await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}`, headers: { ...headers, authorization: `Bearer ${ECHO_ONLY}` }, payload: body })
  t.equal(allowed.json().result.task.status.state, 'TASK_STATE_COMPLETED')

  const card = await app.inject({ url: `/a2a/${AGENTS.echo}/.well-known/agent-card.json` })
  t.equal(card.statusCode, 200, 'public')
  t.match(card.json(), { securitySchemes: { bearer: { httpAuthSecurityScheme: { scheme: 'Bearer' } } }, securityRequirements: [{ schemes: { bearer: { list: ['assist:invoke'] } } }] })
})

t.test('cards: the host\'s lists every agent\'s card; an agent\'s names its bindings, version, skills and streaming; auth off has no scheme', async (t) => {
  // bound to loopback, a name other than localhost is one the operator allows (the DNS-rebinding guard)
  const app = await build(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0', ALLOWED_HOSTS: 'agents.example' })
  const host = (await app.inject({ url: '/.well-known/agent-card.json', headers: { host: 'agents.example:8080' } })).json()
  const listed = host.capabilities.extensions[0].params.agents as Array<{ id: string, name: string, card: string }>
  t.equal(listed.length, app.agents.size, 'every agent')
  t.match(listed.find((a) => a.name === 'echo'), { id: AGENTS.echo, card: `http://agents.example:8080/a2a/${AGENTS.echo}/.well-known/agent-card.json` })
  t.equal(host.skills.length, app.agents.size)

  const res = await app.inject({ url: '/a2a/echo/.well-known/agent-card.json', headers: { host: 'agents.example:8080' } })
  const card = res.json()
  t.match(card, {
    name: 'echo',
    version: app.agents.get('echo')?.manifest.metadata.version,
    capabilities: { streaming: true },
    supportedInterfaces: [
      { url: `http://agents.example:8080/a2a/${AGENTS.echo}`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
      { url: `http://agents.example:8080/a2a/${AGENTS.echo}/rest`, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0' }
    ],
    skills: [{ id: app.agents.get('echo')?.capabilities[0]?.capability.name }]
  })
  t.notOk('securitySchemes' in card && Object.keys(card.securitySchemes).length > 0, 'no scheme with auth off')
  t.equal((await app.inject({ url: '/a2a/nobody/.well-known/agent-card.json' })).json().code, 'AH_ERR_AGENT_NOT_FOUND')
})

t.test('A2A-Version: absent means 0.3, which is refused as the specification says, with the header to send; 1.0 is served', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  const body = rpc('GetTask', { id: randomUUID() })
  const none = (await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}`, payload: body })).json()
  t.match(none, { jsonrpc: '2.0', id: 7, error: { code: -32009, message: /no A2A-Version header.*0\.3.*send the header A2A-Version: 1\.0/ } })
  const rest = await app.inject({ url: `/a2a/${AGENTS.echo}/rest/tasks/${randomUUID()}` })
  t.equal(rest.statusCode, 400)
  t.match(rest.json(), { error: { status: 'FAILED_PRECONDITION', message: /send the header A2A-Version: 1\.0/ } })
  const old = (await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}`, headers: { 'a2a-version': '0.3' }, payload: body })).json()
  t.match(old, { error: { code: -32009, message: /'0\.3' is not supported.*1\.0/ } }, 'a version asked for is refused as the SDK says it')
  const served = (await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}`, headers: { 'a2a-version': '1.0' }, payload: body })).json()
  t.match(served, { error: { code: -32001 } }, 'with 1.0: the method runs (no such task)')
})

t.test('errors: CAP\'s refusals as A2A errors (invalid params, content type), bad JSON-RPC as JSON-RPC errors, rate limits as HTTP 429', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0', AGENTS_DIR: FIXTURE_AGENTS_DIR, RATE_LIMIT_AGENT_MAX: '2' })
  const headers = { 'a2a-version': '1.0' }
  const call = async (payload: unknown, agent = SCRIPTED): Promise<{ status: number, body: Record<string, any> }> => {
    const res = await app.inject({ method: 'POST', url: `/a2a/${agent}`, headers, payload: payload as Record<string, unknown> })
    return { status: res.statusCode, body: res.json() }
  }
  const m = (parts: unknown[], extra: Record<string, unknown> = {}) => rpc('SendMessage', { message: { messageId: randomUUID(), role: 'ROLE_USER', parts, ...extra } })

  t.match(await call(m([{ data: { script: 'not a list' } }])), { status: 200, body: { error: { code: -32602, message: /AH_ERR_VALIDATION/ } } }, 'input that fails the agent\'s schema')
  t.match(await call(m([{ url: 'https://example.com/a.png', mediaType: 'image/png' }])), { body: { error: { code: -32005 } } }, 'file parts')
  t.match(await call(m([{ data: [1, 2] }])), { body: { error: { code: -32602, message: /JSON object/ } } }, 'a data part that is not an object')
  t.match(await call(m([{ text: 'x' }], { contextId: 'my-own-context' })), { body: { error: { code: -32602, message: /not one this server issued/ } } })
  t.match(await call(m([{ text: 'x' }], { role: 'ROLE_AGENT' })), { body: { error: { code: -32602, message: /ROLE_USER/ } } })
  t.match(await call({ jsonrpc: '2.0', id: 1, method: 'NoSuchMethod', params: {} }), { body: { error: { code: -32601 } } })
  t.match(await call({ not: 'json-rpc' }), { body: { error: { code: -32602 } } })
  const broken = await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}`, headers: { ...headers, 'content-type': 'application/json' }, payload: '{"jsonrpc": "2.0", "id": 1, "meth' })
  t.match({ status: broken.statusCode, body: broken.json() }, { status: 200, body: { jsonrpc: '2.0', id: null, error: { code: -32700 } } }, 'a body that is not JSON: a parse error')
  const array = await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}`, headers, payload: [1] as never })
  t.match(array.json(), { error: { code: -32600 } }, 'a body that is not an object: an invalid request')
  t.equal((await app.inject({ method: 'POST', url: '/a2a/nobody', headers, payload: m([{ text: 'x' }]) })).statusCode, 404, 'an unknown agent is a 404')

  // two runs pass the per-agent limit (the refused ones above started none), the third is refused as HTTP
  t.equal((await call(m([{ data: { script: [] } }]))).body.result.task.status.state, 'TASK_STATE_COMPLETED')
  t.equal((await call(m([{ data: { script: [] } }]))).status, 200)
  const limited = await call(m([{ data: { script: [] } }]))
  t.equal(limited.status, 429, 'the agent\'s rate limit is an HTTP 429')
  t.equal(limited.body.code, 'AH_ERR_RATE_LIMITED')
  const streamLimited = await app.inject({ method: 'POST', url: `/a2a/${SCRIPTED}/rest/message:stream`, headers, payload: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ data: { script: [] } }] } } })
  t.equal(streamLimited.statusCode, 429, 'on a stream too, before any event')
})

t.test('a message sent again (same messageId) is the same task; the same id with another message is refused', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  const headers = { 'a2a-version': '1.0' }
  const messageId = 'client-chosen-id-1'
  const sendIt = async (text: string, contextId?: string): Promise<Record<string, any>> => (await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}`, headers, payload: rpc('SendMessage', { message: { messageId, role: 'ROLE_USER', parts: [{ text }], ...(contextId !== undefined ? { contextId } : {}) } }) })).json()
  const first = await sendIt('hello')
  const again = await sendIt('hello')
  t.equal(again.result.task.id, first.result.task.id, 'the same task')
  t.same(again.result.task.artifacts, first.result.task.artifacts, 'with the same answer: the agent ran once')
  t.match(first.result.task.artifacts, [{ artifactId: 'result', parts: [{ data: { echo: 'hello', calls: 1 } }] }])
  t.match(await sendIt('something else'), { error: { code: -32602, message: /already sent with another message/ } })
  t.match(await sendIt('hello', randomUUID()), { error: { code: -32602 } }, 'or in another context')
  const followUp = (await app.inject({ method: 'POST', url: `/a2a/${AGENTS.echo}`, headers, payload: rpc('SendMessage', { message: { messageId: randomUUID(), taskId: first.result.task.id, role: 'ROLE_USER', parts: [{ text: 'more' }] } }) })).json()
  t.match(followUp, { error: { code: -32004, message: /has ended: send a new message/ } }, 'a message to an ended task')
})
