import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { SCOPES } from '../../src/auth/scopes.js'
import { AGENTS, envelope, listen } from '../helper.js'
import { open, until } from '../socket.js'

// Issue 16, fault 3: two keys with every scope but admin. What the first owns, the second cannot
// read, follow, cancel or erase: every such route answers as if it were not there (404, or an empty
// list), never 403, so ids cannot be probed. An admin sees everything.

const TENANT_SCOPES = SCOPES.filter((s) => s !== 'admin' && s !== 'tenant-admin')

interface Owned { session: string, conversation: string, task: string, plan: string, run: string }

async function as (app: FastifyInstance, key: string, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown): Promise<{ statusCode: number, json: () => any }> {
  return await app.inject({ method, url, headers: { authorization: `Bearer ${key}` }, ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}) })
}

t.test('a second key cannot read, follow, cancel or erase what the first owns; an admin can', async (t) => {
  const { app, url } = await listen(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '1', TASK_POLL_MS: '20' })
  const alice = (await app.keys.create({ name: 'alice', scopes: [...TENANT_SCOPES] })).key
  const bob = (await app.keys.create({ name: 'bob', scopes: [...TENANT_SCOPES] })).key
  const admin = (await app.keys.create({ name: 'root', scopes: ['admin'] })).key

  // alice's things: a session with a finished call, a run still going, a task graph in a conversation, a plan, a bus event
  const call = envelope(AGENTS.echo, { query: 'mine' })
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: { authorization: `Bearer ${alice}`, accept: 'application/json' }, payload: call })).statusCode, 200)
  const long = envelope(AGENTS.echoStream, { query: 'one two three four five six seven eight nine ten', delay_ms: 2000 })
  const stream = await open(url, long, 'text/event-stream', { authorization: `Bearer ${alice}` })
  t.teardown(() => { stream.req.destroy() })
  await until('alice\'s run started', () => stream.text().includes('DELTA'), 10_000)
  t.equal((await as(app, alice, 'POST', '/v1/tasks', { tasks: [{ id: 'alice-count', type: 'wordcount', inputs: { text: 'a b c' }, metadata: { conversation_id: 'shared-name' } }] })).statusCode, 201)
  const planTask = { id: 'p1', type: 'code', description: 'x', estimated_hours: 1, priority: 5, assigned_agent: 'wordcount', input_artifacts: [], output_artifacts: [], success_criteria: {} }
  t.equal((await as(app, alice, 'POST', '/v1/plans', { id: 'alice-plan', tasks: [planTask], dependencies: {} })).statusCode, 201)
  await as(app, alice, 'POST', '/v1/bus/events', { event: { type: 'alice.secret', key: 'a1', data: { x: 1 }, visibility: 'a2a' } })
  await until('alice\'s task done', async () => (await app.events.list({ task_id: 'alice-count', type: 'AGENT_RESULT' })).length === 1, 10_000)
  const owned: Owned = { session: call.context.session_id, conversation: 'shared-name', task: 'alice-count', plan: 'alice-plan', run: long.request_id }

  // what only the owner (or an admin) may reach: bob gets 404 for each; alice and the admin do not
  const hidden: Array<[string, 'GET' | 'POST' | 'DELETE', string, unknown?]> = [
    ['session history', 'GET', `/v1/sessions/${owned.session}/history`],
    ['a task', 'GET', `/v1/tasks/${owned.task}`],
    ['a task\'s events', 'GET', `/v1/tasks/${owned.task}/events`],
    ['a plan', 'GET', `/v1/plans/${owned.plan}`],
    ['a new call in the session', 'POST', '/v1/assist', envelope(AGENTS.echo, { query: 'theirs' }, { sessionId: owned.session })]
  ]
  for (const [what, method, path, body] of hidden) {
    const res = await as(app, bob, method, path, body)
    t.equal(res.statusCode, 404, `bob: ${what} is not found`)
    t.not((await as(app, alice, method, path, body)).statusCode, 404, `alice: ${what} is hers`)
    t.not((await as(app, admin, method, path, body)).statusCode, 404, `admin: ${what} is visible`)
  }

  // lists and feeds: bob's are empty of alice's things
  const bobSees = async (path: string, key = bob): Promise<string> => JSON.stringify((await as(app, key, 'GET', path)).json())
  t.notMatch(await bobSees('/v1/tasks'), /alice-count|alice-plan/, 'the task list')
  t.notMatch(await bobSees('/v1/tasks?conversation_id=shared-name'), /alice-count/, 'the task list by conversation')
  t.same((await as(app, bob, 'GET', `/v1/events?session_id=${owned.session}`)).json().events, [], 'the event log by session')
  t.same((await as(app, bob, 'GET', `/v1/events?request_id=${owned.run}`)).json().events, [], 'the event log by request')
  t.same((await as(app, bob, 'GET', '/v1/events?limit=1000')).json().events, [], 'the whole event log')
  t.same((await as(app, bob, 'GET', '/v1/conversations/shared-name/events?internal=true')).json().events, [], 'a conversation\'s internal feed')
  t.same((await as(app, bob, 'GET', '/v1/bus/events?pattern=**')).json().events, [], 'the bus feed')
  t.ok((await as(app, alice, 'GET', '/v1/conversations/shared-name/events?internal=true')).json().events.length > 0, 'alice sees her conversation')
  t.ok((await as(app, admin, 'GET', '/v1/events?limit=1000')).json().events.length > 0, 'the admin sees the log')
  t.match(await bobSees('/v1/tasks', alice), /alice-count/, 'alice lists her task')

  // bob names alice's task: as if it did not exist
  const dependent = await as(app, bob, 'POST', '/v1/tasks', { type: 'wordcount', dependency_ids: [owned.task] })
  t.equal(dependent.statusCode, 400)
  t.match(dependent.json().message, /depends on unknown task "alice-count"/)

  // what changes things: bob cannot, and nothing changed
  t.equal((await as(app, bob, 'POST', `/v1/tasks/${owned.task}/cancel`)).statusCode, 404, 'bob cannot cancel her task')
  t.equal((await as(app, bob, 'POST', `/v1/assist/${owned.run}/cancel`)).statusCode, 404, 'bob cannot cancel her run')
  t.equal((await as(app, bob, 'DELETE', `/v1/sessions/${owned.session}`)).statusCode, 404, 'bob cannot erase her session')
  t.equal((await as(app, alice, 'GET', `/v1/sessions/${owned.session}/history`)).statusCode, 200, 'her session is still there')
  t.notOk(stream.text().includes('"op":"CLOSE"') && stream.text().includes('cancel'), 'her run is still going')
  t.equal((await as(app, alice, 'POST', `/v1/assist/${owned.run}/cancel`)).statusCode, 202, 'alice can cancel her own run')
})

t.test('the narrator keeps two tenants\' conversations of the same id apart', async (t) => {
  const { app } = await listen(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '1', TASK_POLL_MS: '20' })
  const alice = (await app.keys.create({ name: 'alice', scopes: [...TENANT_SCOPES] })).key
  const bob = (await app.keys.create({ name: 'bob', scopes: [...TENANT_SCOPES] })).key
  await as(app, alice, 'POST', '/v1/tasks', { id: 'a-1', type: 'wordcount', inputs: { text: 'alpha beta' }, metadata: { conversation_id: 'demo' } })
  await as(app, bob, 'POST', '/v1/tasks', { id: 'b-1', type: 'wordcount', inputs: { text: 'one two three' }, metadata: { conversation_id: 'demo' } })
  const narrated = async (key: string): Promise<string[]> => (await as(app, key, 'GET', '/v1/conversations/demo/events')).json().events.map((e: { event: { text: string } }) => e.event.text)
  let a: string[] = []
  let b: string[] = []
  for (let i = 0; i < 500 && (a.length === 0 || b.length === 0); i++) {
    a = await narrated(alice)
    b = await narrated(bob)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  t.equal(a.length, 1)
  t.equal(b.length, 1)
  t.match(a[0], /2 words/)
  t.notMatch(a[0], /3 words/, 'alice hears only of her task')
  t.match(b[0], /3 words/)
  t.notMatch(b[0], /2 words/, 'bob only of his')
})

t.test('a request id is scoped to its caller: the same id from another key is another run, and nothing says it was used', async (t) => {
  const { app } = await listen(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '0' })
  const alice = (await app.keys.create({ name: 'alice', scopes: [...TENANT_SCOPES] })).key
  const bob = (await app.keys.create({ name: 'bob', scopes: [...TENANT_SCOPES] })).key
  const post = async (key: string, body: unknown): Promise<{ statusCode: number, json: () => any }> => await app.inject({ method: 'POST', url: '/v1/assist', headers: { authorization: `Bearer ${key}`, accept: 'application/json' }, payload: body as Record<string, unknown> })
  const first = envelope(AGENTS.echo, { query: 'alice asks' })
  const a = await post(alice, first)
  t.equal(a.statusCode, 200)
  t.match(a.json(), { request_id: first.request_id, output: { echo: 'alice asks', calls: 1 } })

  // bob sends the same request id, in a session of his own: a run of his own, answered as any new one
  const same = envelope(AGENTS.echo, { query: 'bob asks' }, { requestId: first.request_id })
  const b = await post(bob, same)
  t.equal(b.statusCode, 200, 'not 409, not 404')
  t.match(b.json(), { request_id: first.request_id, output: { echo: 'bob asks', calls: 1 } })
  // even the very same envelope (alice's session): bob may not write there, as for any session of hers
  t.equal((await post(bob, first)).statusCode, 404)

  // alice's retry still gets her own answer; her conflicting reuse is still hers to be told about
  t.match((await post(alice, first)).json(), { output: { echo: 'alice asks' } })
  t.equal((await post(alice, envelope(AGENTS.echo, { query: 'changed' }, { requestId: first.request_id, sessionId: first.context.session_id }))).statusCode, 409, 'the same caller reusing an id for another request is told')
  t.equal((await app.inject({ method: 'POST', url: `/v1/assist/${first.request_id}/cancel`, headers: { authorization: `Bearer ${bob}` } })).statusCode, 404, 'bob\'s cancel of the id finds only his (ended) run')
  const history = (await app.inject({ url: `/v1/sessions/${same.context.session_id}/history`, headers: { authorization: `Bearer ${bob}` } })).json()
  t.match(history.interactions, [{ request_id: first.request_id }], 'history shows the caller\'s own request id')
  t.equal((await app.audit.list({ action: 'assist', request_id: first.request_id })).length, 2, 'two runs audited under the id, each with its caller')
})
