import t from 'tap'
import { randomUUID } from 'node:crypto'
import { SCOPES } from '../../src/auth/scopes.js'
import { AGENTS, envelope, listen } from '../helper.js'
import { open, until } from '../socket.js'
import { post } from '../mcp/client.js'
import { createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'

// Issue 36: tenants. Alice (a member of tenant acme) makes things on every path; then each caller
// asks for each of them on every route and binding. Her tenant's admin and the host's admin see
// them; bob (another member of acme) and the admin of tenant globex find nothing: 404, or a list
// without them, never 403, on routes, the SSE resume, A2A (GetTask, ListTasks, the HTTP+JSON
// binding, its `tenant` field), the bus feed, the audit log and the push deliveries.

const MEMBER = SCOPES.filter((s) => s !== 'admin' && s !== 'tenant-admin')
type Caller = 'alice' | 'acmeAdmin' | 'bob' | 'globexAdmin' | 'root'
const SEES: Record<Caller, boolean> = { alice: true, acmeAdmin: true, bob: false, globexAdmin: false, root: true }
const A2A = { 'a2a-version': '1.0' }

interface Reply { statusCode: number, body: string, json: () => any }

t.test('what a member of one tenant makes: her tenant\'s admin and the host\'s see it, another member and another tenant\'s admin find nothing', async (t) => {
  const { app, url } = await listen(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '1', TASK_POLL_MS: '20', A2A_PUSH_ALLOW_PRIVATE: 'true', A2A_PUSH_POLL_MS: '20' })
  const receiver = createServer((req, res) => { req.resume().on('end', () => res.writeHead(200).end()) })
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { receiver.closeAllConnections(); receiver.close() })
  const key = async (name: string, tenant: string, scopes: string[]): Promise<string> => (await app.keys.create({ name, tenant, scopes })).key
  const keys: Record<Caller, string> = {
    alice: await key('alice', 'acme', MEMBER),
    acmeAdmin: await key('acme-admin', 'acme', ['tenant-admin']),
    bob: await key('bob', 'acme', MEMBER),
    globexAdmin: await key('globex-admin', 'globex', ['tenant-admin']),
    root: await key('root', 'default', ['admin'])
  }
  const as = async (who: Caller, method: 'GET' | 'POST' | 'DELETE', path: string, payload?: unknown, headers: Record<string, string> = {}): Promise<Reply> =>
    await app.inject({ method, url: path, headers: { authorization: `Bearer ${keys[who]}`, ...headers }, ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}) })

  // alice's things: a finished call in a session, a run still going, a task in a conversation, a plan, a bus event
  const call = envelope(AGENTS.echo, { query: 'mine' })
  t.equal((await as('alice', 'POST', '/v1/assist', call, { accept: 'application/json' })).statusCode, 200)
  // a run that outlasts the test (60 words, 2 s apart): it is cancelled at the end
  const long = envelope(AGENTS.echoStream, { query: Array.from({ length: 60 }, (_, i) => `w${i}`).join(' '), delay_ms: 2000 })
  const stream = await open(url, long, 'text/event-stream', { authorization: `Bearer ${keys.alice}` })
  t.teardown(() => { stream.req.destroy() })
  await until('alice\'s run started', () => stream.text().includes('DELTA'), 10_000)
  t.equal((await as('alice', 'POST', '/v1/tasks', { tasks: [{ id: 'alice-count', type: 'wordcount', inputs: { text: 'a b c' }, metadata: { conversation_id: 'shared-name' } }] })).statusCode, 201)
  const planTask = { id: 'p1', type: 'code', description: 'x', estimated_hours: 1, priority: 5, assigned_agent: 'wordcount', input_artifacts: [], output_artifacts: [], success_criteria: {} }
  t.equal((await as('alice', 'POST', '/v1/plans', { id: 'alice-plan', tasks: [planTask], dependencies: {} })).statusCode, 201)
  t.equal((await as('alice', 'POST', '/v1/bus/events', { event: { type: 'alice.secret', key: 'a1', data: { x: 1 }, visibility: 'a2a' } })).statusCode, 202)
  await until('alice\'s task done', async () => (await app.events.list({ task_id: 'alice-count', type: 'AGENT_RESULT' })).length === 1, 10_000)
  /** A stream's answer once it shows a packet or ends (the run goes on: the socket is closed then). */
  const resume = async (who: Caller): Promise<Reply> => {
    const opened = await open(url, long, 'text/event-stream', { authorization: `Bearer ${keys[who]}`, 'last-event-id': `${long.request_id}:1` })
    let ended = false
    opened.ended.then(() => { ended = true }, () => { ended = true })
    await until('a packet or the end', () => ended || opened.text().includes('DELTA'), 10_000)
    opened.req.destroy()
    const body = opened.text()
    return { statusCode: opened.res.statusCode as number, body, json: () => JSON.parse(body) }
  }
  const rpc = (method: string, params: Record<string, unknown>): Record<string, unknown> => ({ jsonrpc: '2.0', id: 1, method, params })
  /** An answer over a real socket once it shows `shows` or ends: a stream that goes on is cut there. */
  const peek = async (who: Caller, method: string, path: string, shows: string, body?: unknown): Promise<Reply> => await new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method, headers: { authorization: `Bearer ${keys[who]}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) } }, (res) => {
      let text = ''
      const done = (): void => { req.destroy(); resolve({ statusCode: res.statusCode as number, body: text, json: () => JSON.parse(text) }) }
      res.on('data', (chunk: Buffer) => { text += chunk.toString('utf8'); if (text.includes(shows)) done() })
      res.on('end', done)
      res.on('error', done)
    })
    req.on('error', reject)
    req.end(body !== undefined ? JSON.stringify(body) : undefined)
  })
  // her chat on the AI SDK binding, still answering (60 words, 2 s apart)
  const chatId = `chat-${randomUUID()}`
  const chat = await peek('alice', 'POST', '/ai-sdk/echo-stream/chat', 'text-delta', { id: chatId, messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: Array.from({ length: 60 }, (_, i) => `w${i}`).join(' ') }] }], delay_ms: 2000 })
  t.equal(chat.statusCode, 200, 'her chat answers')
  // her thread on the AG-UI binding
  const threadId = `thread-${randomUUID()}`
  const agUi = (runId: string): Record<string, unknown> => ({ threadId, runId, messages: [{ id: `m-${runId}`, role: 'user', content: 'hello' }], tools: [], context: [], state: {}, forwardedProps: { delay_ms: 0 } })
  t.equal((await peek('alice', 'POST', `/ag-ui/${AGENTS.echoStream}`, 'RUN_FINISHED', agUi('run-1'))).statusCode, 200, 'her thread')
  // her A2A task's push config, and an MCP session of hers
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/alice-hook`
  const pushed = (await as('alice', 'POST', `/a2a/${AGENTS.echo}`, rpc('CreateTaskPushNotificationConfig', { taskId: call.request_id, url: hook, token: 'alice-token-1234' }), A2A)).json()
  t.match(pushed, { result: { taskId: call.request_id, url: hook } }, 'her push config')
  const init = await post(url, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'alice', version: '1' } } }, { authorization: `Bearer ${keys.alice}` })
  const mcpSession = init.headers.get('mcp-session-id') as string
  await init.text()
  await (await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, { authorization: `Bearer ${keys.alice}`, 'mcp-session-id': mcpSession })).text()
  const mcp = async (who: Caller): Promise<Reply> => {
    const res = await post(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { authorization: `Bearer ${keys[who]}`, 'mcp-session-id': mcpSession })
    const body = await res.text()
    return { statusCode: res.status, body, json: () => JSON.parse(body) }
  }

  // each thing, asked for by each caller: [what, request, is it there in the answer, who sees it (SEES unless said)]
  const table: Array<[string, (who: Caller) => Promise<Reply>, (reply: Reply) => boolean, Partial<Record<Caller, boolean>>?]> = [
    ['the session\'s history', async (who) => await as(who, 'GET', `/v1/sessions/${call.context.session_id}/history`), (r) => r.statusCode === 200],
    ['a task', async (who) => await as(who, 'GET', '/v1/tasks/alice-count'), (r) => r.statusCode === 200],
    ['a task\'s events', async (who) => await as(who, 'GET', '/v1/tasks/alice-count/events'), (r) => r.statusCode === 200],
    ['the task list', async (who) => await as(who, 'GET', '/v1/tasks?limit=1000'), (r) => r.body.includes('alice-count')],
    ['a plan', async (who) => await as(who, 'GET', '/v1/plans/alice-plan'), (r) => r.statusCode === 200],
    ['a conversation\'s internal feed', async (who) => await as(who, 'GET', '/v1/conversations/shared-name/events?internal=true'), (r) => r.json().events.length > 0],
    ['the event log by task', async (who) => await as(who, 'GET', '/v1/events?task_id=alice-count'), (r) => r.json().events.length > 0],
    ['the bus feed', async (who) => await as(who, 'GET', '/v1/bus/events?pattern=**'), (r) => r.body.includes('alice.secret')],
    ['the audit log', async (who) => await as(who, 'GET', `/v1/audit?request_id=${call.request_id}`), (r) => r.json().rows.length > 0],
    ['A2A GetTask', async (who) => await as(who, 'POST', `/a2a/${AGENTS.echo}`, rpc('GetTask', { id: call.request_id }), A2A), (r) => r.json().result?.id === call.request_id],
    ['A2A GetTask, HTTP+JSON', async (who) => await as(who, 'GET', `/a2a/${AGENTS.echo}/rest/tasks/${call.request_id}`, undefined, A2A), (r) => r.statusCode === 200],
    ['A2A ListTasks', async (who) => await as(who, 'POST', `/a2a/${AGENTS.echo}`, rpc('ListTasks', { contextId: call.context.session_id }), A2A), (r) => r.json().result?.totalSize === 1],
    ['A2A ListTasks, HTTP+JSON', async (who) => await as(who, 'GET', `/a2a/${AGENTS.echo}/rest/tasks?contextId=${call.context.session_id}`, undefined, A2A), (r) => r.json().totalSize === 1],
    ['the push deliveries', async (who) => await as(who, 'GET', '/v1/a2a/push-deliveries'), (r) => r.body.includes('alice-hook')],
    ['A2A ListTaskPushNotificationConfigs', async (who) => await as(who, 'POST', `/a2a/${AGENTS.echo}`, rpc('ListTaskPushNotificationConfigs', { taskId: call.request_id }), A2A), (r) => r.body.includes('alice-hook')],
    ['her running chat, resumed on the AI SDK binding', async (who) => await peek(who, 'GET', `/ai-sdk/echo-stream/chat/${chatId}/stream`, 'text-delta'), (r) => r.statusCode === 200 && r.body.includes('text-delta')],
    // a thread is a session: only its owner (and the host's admin, who owns every session) runs in it
    ['a run in her AG-UI thread', async (who) => await peek(who, 'POST', `/ag-ui/${AGENTS.echoStream}`, 'RUN_FINISHED', agUi(`run-${who}`)), (r) => r.statusCode === 200 && r.body.includes('RUN_FINISHED'), { acmeAdmin: false }],
    // an MCP session is its client's alone: no admin takes one over
    ['her MCP session', mcp, (r) => r.statusCode === 200 && r.body.includes('"tools"'), { acmeAdmin: false, root: false }],
    // a request id is its caller's: re-sending her envelope is someone else's request, even for an admin (who follows her run with A2A's SubscribeToTask)
    ['a resume of the running stream (SSE, Last-Event-ID)', resume, (r) => r.statusCode === 200 && r.body.includes('DELTA'), { acmeAdmin: false, root: false }]
  ]
  for (const [what, ask, there, seers] of table) {
    for (const who of Object.keys(SEES) as Caller[]) {
      const sees = seers?.[who] ?? SEES[who]
      const reply = await ask(who)
      t.ok(reply.statusCode < 500, `${what}, ${who}: ${reply.statusCode}`)
      t.equal(reply.statusCode === 403, false, `${what}, ${who}: never 403 (${reply.body.slice(0, 200)})`)
      t.equal(there(reply), sees, `${what}: ${who} ${sees ? 'sees it' : 'finds nothing'}`)
    }
  }

  // another's session is not there however the client asks: a new call in it, as JSON or a stream
  for (const who of ['bob', 'globexAdmin', 'acmeAdmin'] as const) {
    const again = envelope(AGENTS.echo, { query: 'theirs' }, { sessionId: call.context.session_id })
    t.equal((await as(who, 'POST', '/v1/assist', again, { accept: 'application/json' })).statusCode, 404, `${who}: a call in her session`)
    const resumed = await as(who, 'POST', '/v1/assist', call, { accept: 'text/event-stream', 'last-event-id': `${call.request_id}:1` })
    t.match({ status: resumed.statusCode, code: resumed.json().code }, { status: 404, code: 'AH_ERR_SESSION_NOT_FOUND' }, `${who}: her envelope re-sent with Last-Event-ID is 404 as in JSON mode, not a stream`)
  }

  // A2A's tenant field: checked against the caller's
  const send = (tenant: string): Record<string, unknown> => rpc('SendMessage', { tenant, message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'hi' }] } })
  t.equal((await as('alice', 'POST', `/a2a/${AGENTS.echo}`, send('acme'), A2A)).json().result?.task.status.state, 'TASK_STATE_COMPLETED', 'her own tenant named')
  t.match((await as('alice', 'POST', `/a2a/${AGENTS.echo}`, send('globex'), A2A)).json(), { error: { code: -32602, message: /tenant "globex" is not the caller's/ } }, 'another tenant named: refused')
  t.match((await as('globexAdmin', 'POST', `/a2a/${AGENTS.echo}`, rpc('GetTask', { tenant: 'acme', id: call.request_id }), A2A)).json(), { error: { code: -32001 } }, 'naming her tenant does not show another tenant her task')
  t.match((await as('acmeAdmin', 'POST', `/a2a/${AGENTS.echo}`, rpc('GetTask', { tenant: 'acme', id: call.request_id }), A2A)).json(), { result: { id: call.request_id } })

  // what changes things: those who do not see it cannot; her tenant's admin can
  for (const who of ['bob', 'globexAdmin'] as const) {
    t.equal((await as(who, 'POST', '/v1/tasks/alice-plan-none/cancel')).statusCode, 404)
    t.equal((await as(who, 'POST', `/v1/assist/${long.request_id}/cancel`)).statusCode, 404, `${who} cannot cancel her run`)
    t.equal((await as(who, 'DELETE', `/v1/sessions/${call.context.session_id}`)).statusCode, 404, `${who} cannot erase her session`)
  }
  t.equal((await as('alice', 'GET', `/v1/sessions/${call.context.session_id}/history`)).statusCode, 200, 'her session is still there')
  t.equal((await as('acmeAdmin', 'POST', `/v1/assist/${long.request_id}/cancel`)).statusCode, 202, 'her tenant\'s admin cancels her run')
  await until('her stream closed cancelled', () => /"op":"CLOSE"[^\n]*cancelled/.test(stream.text()), 10_000)
  t.equal((await as('acmeAdmin', 'DELETE', `/v1/sessions/${call.context.session_id}`)).statusCode, 204, 'and erases her session')
  const audit = (await as('root', 'GET', '/v1/audit?action=assist.cancel')).json().rows
  t.match(audit, [{ actor: (await app.keys.list()).filter((k) => k.name === 'acme-admin').map((k) => `tenant:acme/${k.id}`)[0] }], 'the cancel is audited with the tenant admin\'s principal')
})

t.test('the audit log by role: a member reads its own rows, a tenant\'s admin its tenant\'s, never the host\'s own rows', async (t) => {
  const { app } = await listen(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '0' })
  const made = async (name: string, tenant: string, scopes: string[]): Promise<{ key: string, id: string }> => {
    const { key, record } = await app.keys.create({ name, tenant, scopes }, 'cli:operator')
    return { key, id: record.id }
  }
  const carol = await made('carol', 'default', MEMBER)
  const dave = await made('dave', 'default', MEMBER)
  const defaultAdmin = await made('default-admin', 'default', ['tenant-admin'])
  const erin = await made('erin', 'initech', MEMBER)
  for (const who of [carol, dave, erin]) {
    t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: { authorization: `Bearer ${who.key}`, accept: 'application/json' }, payload: envelope(AGENTS.echo, { query: 'x' }) })).statusCode, 200)
  }
  await app.inject({ url: '/v1/tasks', headers: { authorization: 'Bearer not-a-key' } })
  const actors = async (who: { key: string }, query = ''): Promise<string[]> => [...new Set((await app.inject({ url: `/v1/audit?limit=2${query}`, headers: { authorization: `Bearer ${who.key}` } }).then(async (first) => {
    const rows: Array<{ actor: string, audit_id: number }> = [...first.json().rows]
    for (let next = first.json().next; next !== undefined;) {
      const page = (await app.inject({ url: `/v1/audit?limit=2&after=${String(next)}${query}`, headers: { authorization: `Bearer ${who.key}` } })).json()
      rows.push(...page.rows)
      next = page.next
    }
    return rows
  })).map((r) => r.actor))].sort()
  t.same(await actors(carol), [carol.id], 'a member: its own rows, a page of 2 at a time')
  t.same(await actors(defaultAdmin), [carol.id, dave.id].sort(), 'the default tenant\'s admin: its members\', not the key changes of the command line nor the refusals of unknown callers')
  t.same(await actors(erin), [`tenant:initech/${erin.id}`])
  t.same(await actors(carol, `&actor=${dave.id}`), [], 'naming another actor finds nothing')
})
