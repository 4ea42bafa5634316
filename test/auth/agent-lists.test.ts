import t, { type Test } from 'tap'
import { createHmac, randomUUID } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { AGENTS, build, envelope } from '../helper.js'
import { until } from '../socket.js'
import { checkErrorBody } from '../sse.js'
import { ownerAgentsOf } from '../../src/storage/tasks/task.js'
import { handled } from '../fixtures/access-agents/target/index.js'

// Issue 27, fault 1: a key's agent list held for /v1/assist only. A task of a type (or a plan task
// assigned to an agent) outside the list was accepted and done; so was work a bus event, an A2A
// run or a task's follow-ups started on the key's behalf. The fixture agents
// (test/fixtures/access-agents) are `relay` (publishes `access.ping`/`access.watch`), `target`
// (starts a task on `access.ping`, handles `access.watch`) and `spawner` (asks for a follow-up task).

const ACCESS_AGENTS = fileURLToPath(new URL('../fixtures/access-agents/', import.meta.url))
const TARGET_ID = 'c0000000-0000-4000-8000-000000000021'
const RELAY_ID = 'c0000000-0000-4000-8000-000000000020'
const WORKING = { AUTH_MODE: 'apikey', AGENTS_DIR: ACCESS_AGENTS, WORKERS_PER_TYPE: '1', TASK_POLL_MS: '20', BUS_POLL_MS: '20', MAX_EVENT_LOOP_DELAY_MS: '0' }
const KEY_SCOPES = ['tasks:write', 'tasks:read', 'bus:publish', 'assist:invoke']

async function keyOf (app: FastifyInstance, name: string, agents?: string[]): Promise<{ key: string, id: string }> {
  const made = await app.keys.create({ name, scopes: name === 'root' ? ['admin'] : KEY_SCOPES, ...(agents !== undefined ? { agents } : {}) })
  return { key: made.key, id: made.record.id }
}

async function as (app: FastifyInstance, key: string, method: 'GET' | 'POST', url: string, payload?: unknown): Promise<{ statusCode: number, json: () => any }> {
  return await app.inject({ method, url, headers: { authorization: `Bearer ${key}` }, ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}) })
}

/** The audited refusals of `agent` (auth.deny rows on `agent:<name>`). */
async function refusals (app: FastifyInstance, agent: string): Promise<Array<{ actor: string, success: boolean, details: Record<string, any> }>> {
  return (await app.audit.list({ action: 'auth.deny', resource: `agent:${agent}`, limit: 1000 })) as unknown as Array<{ actor: string, success: boolean, details: Record<string, any> }>
}

const planTask = (id: string, agent: string): Record<string, unknown> =>
  ({ id, type: 'code', description: id, estimated_hours: 1, priority: 5, assigned_agent: agent, input_artifacts: [], output_artifacts: [], success_criteria: {} })

const ping = (tag: string, type = 'access.ping'): Record<string, unknown> => ({ event: { type, key: `${type}:${tag}`, data: { tag }, visibility: 'a2a' } })

function forbidden (t: Test, res: { statusCode: number, json: () => any }, message: RegExp, what: string): void {
  t.equal(res.statusCode, 403, what)
  t.match(checkErrorBody(res.json()), { code: 'AH_ERR_FORBIDDEN', message }, what)
}

t.test('issue 27, fault 1: a key limited to echo may not have refactor work through a task or a plan (both were accepted, and the agent rewrote a file)', async (t) => {
  // no worker: nothing could run even if the guard failed
  const app = await build(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '0' })
  const echo = await keyOf(app, 'echo-only', ['echo'])
  const root = await keyOf(app, 'root')
  forbidden(t, await as(app, echo.key, 'POST', '/v1/assist', envelope(AGENTS.refactor, { query: 'x' })), /refactor/, '/v1/assist refuses it, as before')
  forbidden(t, await as(app, echo.key, 'POST', '/v1/tasks', { type: 'refactor', inputs: {} }), /may not invoke agent "refactor"/, 'a task of type refactor')
  forbidden(t, await as(app, echo.key, 'POST', '/v1/plans', { id: 'plan-r', tasks: [planTask('t1', 'refactor')], dependencies: {} }), /may not invoke agent "refactor"/, 'a plan task assigned to refactor')
  t.same((await as(app, root.key, 'GET', '/v1/tasks')).json().tasks, [], 'nothing was created')
  const rows = await refusals(app, 'refactor')
  t.equal(rows.length, 3, 'each refusal is audited, as /v1/assist\'s is')
  t.match(rows.at(-1), { actor: echo.id, success: false, details: { reason: 'agent', task_type: 'refactor' } })
})

t.test('tasks and plans: an agent outside the list is a 403, the whole batch refused; a type no agent serves needs its name in the list; a key listing the agent works', async (t) => {
  const app = await build(t, WORKING)
  const relay = await keyOf(app, 'relay-only', ['relay'])
  const byName = await keyOf(app, 'target-by-name', ['target'])
  const byId = await keyOf(app, 'target-by-id', [TARGET_ID])
  const anyAgent = await keyOf(app, 'any-agent')
  const nobody = await keyOf(app, 'nobody', ['nobody'])

  forbidden(t, await as(app, relay.key, 'POST', '/v1/tasks', { type: 'target' }), /"target"/, 'one task')
  forbidden(t, await as(app, relay.key, 'POST', '/v1/tasks', { tasks: [{ id: 'ok', type: 'relay' }, { id: 'no', type: 'target', dependency_ids: ['ok'] }] }), /"target"/, 'a graph with one forbidden task')
  forbidden(t, await as(app, relay.key, 'POST', '/v1/plans', { id: 'mixed', tasks: [planTask('a', 'relay'), planTask('b', 'target')], dependencies: { b: ['a'] } }), /"target"/, 'a plan with one forbidden task')
  t.same((await as(app, relay.key, 'GET', '/v1/tasks')).json().tasks, [], 'nothing of the graph nor of the plan was created')
  t.equal((await as(app, relay.key, 'GET', '/v1/plans/mixed')).statusCode, 404)

  const unserved = await as(app, relay.key, 'POST', '/v1/tasks', { type: 'nobody' })
  forbidden(t, unserved, /no agent here serves tasks of type "nobody"/, 'a type no agent serves, not in the list')
  const named = await as(app, nobody.key, 'POST', '/v1/tasks', { type: 'nobody' })
  t.equal(named.statusCode, 201, 'a type the list names is accepted, to wait for a worker of it')
  t.match(named.json().warnings, [{ code: 'unknown_task_type', type: 'nobody' }])
  t.equal((await as(app, anyAgent.key, 'POST', '/v1/tasks', { type: 'nobody' })).statusCode, 201, 'a key with no list may ask for any type, as before')

  for (const [who, key] of [['by name', byName], ['by manifest id', byId], ['with no list', anyAgent]] as const) {
    const res = await as(app, key.key, 'POST', '/v1/tasks', { type: 'target', inputs: {} })
    t.equal(res.statusCode, 201, `a key listing the agent ${who}`)
    const id = res.json().tasks[0].id as string
    await until(`its task done (${who})`, async () => (await app.tasks.get(id))?.status === 'COMPLETED', 10_000)
  }
  const plan = await as(app, byId.key, 'POST', '/v1/plans', { id: 'allowed', tasks: [planTask('a', 'target')], dependencies: {} })
  t.equal(plan.statusCode, 201, 'a plan of listed agents')
  t.same(plan.json().tasks[0].metadata.owner_agents, [TARGET_ID], 'the task carries its owner\'s list')
  const unlimited = await as(app, anyAgent.key, 'POST', '/v1/tasks', { type: 'relay', metadata: { owner_agents: ['forged'] } })
  t.notOk('owner_agents' in unlimited.json().tasks[0].metadata, 'a list in the body is not the caller\'s: it is dropped')
  t.match((await refusals(app, 'target')).at(-1), { actor: relay.id, success: false, details: { reason: 'agent', task_type: 'target' } })
})

t.test('follow-up tasks an agent asks for are its owner\'s: an agent outside the owner\'s list is refused, whatever list the agent claims', async (t) => {
  const app = await build(t, WORKING)
  const limited = await keyOf(app, 'spawner-only', ['spawner'])
  const both = await keyOf(app, 'spawner-and-target', ['target', 'spawner'])
  const parent = (await as(app, limited.key, 'POST', '/v1/tasks', { id: 'parent-1', type: 'spawner', inputs: { child: 'target' } })).json()
  t.equal(parent.tasks[0].id, 'parent-1')
  await until('the refusal audited', async () => (await refusals(app, 'target')).length === 1, 10_000)
  t.match((await refusals(app, 'target'))[0], { actor: limited.id, success: false, details: { reason: 'agent', task_type: 'target' } })
  t.same((await app.tasks.list({ type: 'target' })), [], 'no child was created')
  t.equal((await app.tasks.get('parent-1'))?.status, 'COMPLETED', 'the parent\'s own work stands')

  t.equal((await as(app, both.key, 'POST', '/v1/tasks', { id: 'parent-2', type: 'spawner', inputs: { child: 'target' } })).statusCode, 201)
  await until('the child created', async () => (await app.tasks.list({ type: 'target' })).length === 1, 10_000)
  const [child] = await app.tasks.list({ type: 'target' })
  t.match(child, { parent_id: 'parent-2', metadata: { owner_key: both.id, owner_agents: ['target', 'spawner'], note: 'child' } }, 'the owner\'s list, not the one the agent claimed')
})

t.test('bus: an event published by a limited key starts no task of, and is not handled by, an agent outside its list; a key listing it still does', async (t) => {
  const app = await build(t, WORKING)
  const relay = await keyOf(app, 'relay-only', ['relay'])
  const target = await keyOf(app, 'target-only', ['target'])

  t.equal((await as(app, relay.key, 'POST', '/v1/bus/events', ping('from-relay'))).statusCode, 202, 'publishing is still allowed')
  t.equal((await as(app, relay.key, 'POST', '/v1/bus/events', ping('from-relay', 'access.watch'))).statusCode, 202)
  await until('both refusals audited', async () => (await refusals(app, 'target')).length === 2, 10_000)
  t.match(await refusals(app, 'target'), [
    { actor: relay.id, success: false, details: { reason: 'agent', subscription: 'target:on-ping' } },
    { actor: relay.id, success: false, details: { reason: 'agent', subscription: 'target:watch' } }
  ])
  t.same(await app.tasks.list({ type: 'target' }), [], 'no task started')
  t.notOk(handled.includes('access.watch:from-relay'), 'the handler did not run')
  t.same(await app.bus.deadLetters({}), [], 'a refusal is no failure: nothing is retried or dead-lettered')

  const published = (await as(app, target.key, 'POST', '/v1/bus/events', ping('from-target'))).json()
  t.notOk('owner_agents' in published.event, 'whose list it is stays in the server')
  await as(app, target.key, 'POST', '/v1/bus/events', ping('from-target', 'access.watch'))
  await until('the task of the listed agent done', async () => (await app.tasks.list({ type: 'target', status: 'COMPLETED' })).length === 1, 10_000)
  t.match((await app.tasks.list({ type: 'target' }))[0], { metadata: { owner_key: target.id, owner_agents: ['target'], subscription: 'target:on-ping' } })
  await until('the listed agent\'s handler ran', () => handled.includes('access.watch:from-target'), 10_000)
})

t.test('bus: work an allowed agent publishes on its caller\'s behalf (an A2A run, a task) is held to the caller\'s list too; A2A to an agent outside it is a 403', async (t) => {
  const app = await build(t, WORKING)
  const relay = await keyOf(app, 'relay-only', ['relay'])
  const headers = { 'a2a-version': '1.0', authorization: `Bearer ${relay.key}` }
  const rpc = (text: string): Record<string, unknown> => ({ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }] } } })

  const refused = await app.inject({ method: 'POST', url: `/a2a/${TARGET_ID}`, headers, payload: rpc('work') })
  forbidden(t, refused, /"target"/, 'A2A to target')
  const run = await app.inject({ method: 'POST', url: `/a2a/${RELAY_ID}`, headers, payload: rpc('via-a2a') })
  t.equal(run.json().result.task.status.state, 'TASK_STATE_COMPLETED', 'A2A to relay, which publishes access.ping')
  await until('the A2A run\'s event refused to target', async () => (await refusals(app, 'target')).some((r) => r.details.subscription === 'target:on-ping'), 10_000)

  const task = await as(app, relay.key, 'POST', '/v1/tasks', { type: 'relay', inputs: { tag: 'via-task' } })
  t.equal(task.statusCode, 201, 'a relay task, which publishes access.ping too')
  await until('the task\'s event refused to target', async () => (await refusals(app, 'target')).filter((r) => r.details.subscription === 'target:on-ping').length === 2, 10_000)
  t.same(await app.tasks.list({ type: 'target' }), [], 'neither started a task of target')
  t.ok((await refusals(app, 'target')).every((r) => r.actor === relay.id), 'each refusal names the key')
})

t.test('JWT: a token\'s agents claim holds for tasks and for the bus as a key\'s list does', async (t) => {
  const secret = 'a-shared-secret-of-at-least-32-characters'
  const app = await build(t, { ...WORKING, AUTH_MODE: 'jwt', JWT_SECRET: secret, JWT_ISSUER: 'https://id.example.test', JWT_AUDIENCE: 'agent-host' })
  const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ iss: 'https://id.example.test', aud: 'agent-host', sub: 'carol', iat: now, exp: now + 300, scope: KEY_SCOPES.join(' '), agents: ['relay'] })}`
  const token = `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`
  forbidden(t, await as(app, token, 'POST', '/v1/tasks', { type: 'target' }), /"target"/, 'a task of an agent outside the claim')
  t.equal((await as(app, token, 'POST', '/v1/bus/events', ping('from-jwt'))).statusCode, 202)
  await until('the event refused to target', async () => (await refusals(app, 'target')).some((r) => r.details.subscription === 'target:on-ping'), 10_000)
  t.same(await app.tasks.list({ type: 'target' }), [], 'no task started')
})

t.test('a task\'s owner_agents that is not a list of names allows no agent (it is only ever set by the host: fail closed)', async (t) => {
  t.equal(ownerAgentsOf({ metadata: {} }), null, 'absent: any agent')
  t.same(ownerAgentsOf({ metadata: { owner_agents: ['relay'] } }), ['relay'])
  t.same(ownerAgentsOf({ metadata: { owner_agents: 'relay' } }), [], 'a string')
  t.same(ownerAgentsOf({ metadata: { owner_agents: null } }), [], 'null')
  t.same(ownerAgentsOf({ metadata: { owner_agents: ['relay', 3] } }), [], 'a list holding a number')
})
