import t from 'tap'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import type { AgentProtocol, ProtocolContext } from '../../src/backends/protocol.js'
import { taskApprovals, taskHosts } from '../../src/assist/task-host.js'
import { AgentRuntime } from '../../src/runtime/agent-runtime.js'
import { approvalsOf, ownedBy, type TaskNode } from '../../src/storage/tasks/task.js'
import type { ToolRunContext } from '../../src/tools/tool-caller.js'
import { build, tempDataDir } from '../helper.js'
import { checkErrorBody } from '../sse.js'
import { until } from '../socket.js'
import { FIXTURE_SERVER, NO_COVERAGE, serversFile, tempDir } from '../fixtures/tools/servers.js'
import { startRemote } from '../a2a-client/remote.js'

// The host a task agent gets (`context.host` of handleTask, `assist/task-host.ts`), in the server's
// worker pool: the MCP tools (the fixture server, over stdio) and the external A2A agents (the A2A
// SDK's server on a loopback port) called on behalf of the task's owner, held to its scopes and
// agent list, stopped by the task's signal, and recorded as a run's calls are; a call marked
// require_approval makes the task wait (WAITING) for an answer through POST /v1/tasks/:id/approvals/:approval_id,
// after which it runs again with its earlier host calls replayed. The agent is
// test/fixtures/task-host/host-user: it makes the calls its task's `inputs.calls` lists.

const AGENTS_DIR = fileURLToPath(new URL('../fixtures/task-host/', import.meta.url))
const calls = join(tempDir(t), 'calls.jsonl')
const remote = await startRemote(t)
const a2aFile = join(tempDataDir(t), 'a2a-agents.json')
writeFileSync(a2aFile, JSON.stringify({ agents: { plain: { card_url: remote.cards.plain, capabilities: ['echo', 'slow'] }, vetted: { card_url: remote.cards.plain, capabilities: ['echo'], require_approval: true } } }))
const fixture = (extra: Record<string, unknown> = {}): Record<string, unknown> =>
  ({ command: process.execPath, args: [FIXTURE_SERVER], env: { ...NO_COVERAGE, CALLS_LOG: calls }, actions: ['echo_args', 'sleep'], ...extra })
const ENV = {
  AGENTS_DIR,
  WORKERS_PER_TYPE: '2',
  TASK_POLL_MS: '20',
  MCP_SERVERS_FILE: serversFile(t, { fx: fixture(), guarded: fixture({ require_approval: true }) }),
  A2A_AGENTS_FILE: a2aFile
}
const app = await build(t, ENV)

/** A caller as `ownedBy` takes it: a key's principal, its agent list and scopes. */
const caller = (id: string, scopes: string[], agents: string[] | null = null): { id: string, agents: ReadonlySet<string> | null, scopes: ReadonlySet<string> } =>
  ({ id, agents: agents === null ? null : new Set(agents), scopes: new Set(scopes) })

/** Create a task of host-user making `list`, as `who`'s (through the guarded store every route uses), and wait for it to end. */
async function done (server: FastifyInstance, metadata: Record<string, unknown>, list: unknown[], context: Record<string, unknown> = {}): Promise<TaskNode> {
  const [task] = await server.tasks.create([{ type: 'host-user', inputs: { calls: list }, context, metadata }])
  const id = (task as TaskNode).id
  await until('the task to end', async () => ['COMPLETED', 'FAILED', 'CANCELLED'].includes((await server.tasks.get(id))?.status ?? ''), 10_000)
  return await server.tasks.get(id) as TaskNode
}

/** The audit rows of `action` made for task `id`. */
async function auditOf (server: FastifyInstance, action: string, id: string): Promise<Array<Record<string, any>>> {
  return (await server.audit.list({ action, limit: 1000 })).filter((row) => row.details?.task === id) as unknown as Array<Record<string, any>>
}

/** The fixture server's calls so far, by tool name. */
const served = (): string[] => existsSync(calls) ? readFileSync(calls, 'utf8').trim().split('\n').filter((l) => l !== '').map((l) => (JSON.parse(l) as { name: string }).name) : []

t.test('a task agent calls a tool as its owner: allowed, and its event and audit row name the owner and the task (no request id), in the task\'s trace', async (t) => {
  const trace = '4bf92f35-77b3-4da0-a3ce-929d0e0e4736'
  const task = await done(app, ownedBy(caller('key-alice', ['tasks:write', 'assist:invoke'])), [{ tool: 'fx', action: 'echo_args', args: { path: 'a.ts' } }], { trace_id: trace })
  t.equal(task.status, 'COMPLETED')
  t.match(task.outputs?.artifacts, [{ tool: 'fx', action: 'echo_args', success: true, result: { structuredContent: { path: 'a.ts' } } }])
  t.same(task.metadata.owner_scopes, ['tasks:write', 'assist:invoke'], 'the creator\'s scopes travel with the task')
  t.match(await auditOf(app, 'tool.call', task.id), [{ actor: 'key-alice', resource: 'fx.echo_args', success: true, request_id: null, trace_id: trace, details: { by: 'agent:host-user', task: task.id, attempts: 1 } }])
  const events = await app.events.list({ task_id: task.id, type: 'tool.call' })
  t.equal(events.length, 1, 'the call is an event of the task (GET /v1/tasks/:id/events)')
  t.match(events[0], { trace_id: trace, event: { type: 'tool.call', subject: 'fx.echo_args', data: { agent: 'host-user', tool: 'fx', success: true } } })
  t.notOk('request_id' in (events[0] ?? {}), 'no request id is made up')
})

t.test('an owner without assist:invoke: every tool and A2A call of its task is refused (forbidden) before the server sees it, and recorded', async (t) => {
  const before = served().length
  const task = await done(app, ownedBy(caller('key-reader', ['tasks:write', 'tasks:read'])), [
    { tool: 'fx', action: 'echo_args', args: { path: 'a.ts' } },
    { agent: 'plain', capability: 'echo', payload: { n: 1 } }
  ])
  t.equal(task.status, 'COMPLETED')
  t.match(task.outputs?.artifacts, [
    { success: false, result: null, error: /^forbidden: the owner of task .* \(key-reader\) does not hold the scope assist:invoke/ },
    { agent_id: 'plain', status: 'failure', metadata: { error: /^forbidden: .* does not hold the scope assist:invoke/ } }
  ])
  t.equal(served().length, before, 'the tool server was not asked')
  t.match(await auditOf(app, 'tool.call', task.id), [{ actor: 'key-reader', success: false, details: { attempts: 0, error: /^forbidden/ } }])
  t.match(await auditOf(app, 'a2a.call', task.id), [{ actor: 'key-reader', success: false, details: { status: 'failure', error: /^forbidden/ } }])
})

t.test('a task whose owner\'s agent list leaves its agent out (made past the guard, straight in the store): its calls are refused, the owner\'s scopes notwithstanding', async (t) => {
  const [made] = await app.stores.tasks.create([{ type: 'host-user', inputs: { calls: [{ tool: 'fx', action: 'echo_args', args: {} }] }, metadata: { owner_key: 'key-echo', owner_agents: ['echo'], owner_scopes: ['admin'] } }])
  const id = (made as TaskNode).id
  await until('the task to end', async () => (await app.tasks.get(id))?.status === 'COMPLETED', 10_000)
  const task = await app.tasks.get(id) as TaskNode
  t.match(task.outputs?.artifacts, [{ success: false, error: /^forbidden: the owner of task .* may not invoke agent "host-user" \(its key's agent list\)/ }])
  t.match(await auditOf(app, 'tool.call', id), [{ actor: 'key-echo', success: false }])
})

/** How many calls the fixture server saw whose arguments carry `marker`. */
const servedWith = (marker: string): number => existsSync(calls)
  ? readFileSync(calls, 'utf8').trim().split('\n').filter((l) => l !== '' && (JSON.parse(l) as { args?: { marker?: string } }).args?.marker === marker).length
  : 0

/** Wait for task `id` to wait (WAITING) with `count` questions asked; returns it. */
async function waiting (server: FastifyInstance, id: string, count = 1): Promise<TaskNode> {
  await until(`the task to wait with ${count} question(s)`, async () => {
    const task = await server.tasks.get(id)
    return task?.status === 'WAITING' && approvalsOf(task).length === count
  }, 10_000)
  return await server.tasks.get(id) as TaskNode
}

/** Create a task of host-user making `list`, as `metadata`'s owner's; its id. */
async function started (server: FastifyInstance, metadata: Record<string, unknown>, list: unknown[]): Promise<string> {
  const [task] = await server.tasks.create([{ type: 'host-user', inputs: { calls: list }, metadata }])
  return (task as TaskNode).id
}

/** The open question of `task` (the last asked). */
const openOf = (task: TaskNode): { id: string, message: string, call: Record<string, unknown> } => approvalsOf(task).filter((a) => a.answer === undefined).at(-1) as never

/** The audit rows of a task's approvals' answers. */
async function answersOf (server: FastifyInstance, action: 'interrupt.approve' | 'interrupt.reject', id: string): Promise<Array<Record<string, any>>> {
  return (await server.audit.list({ action, limit: 1000 })).filter((row) => row.resource === `task:${id}`) as unknown as Array<Record<string, any>>
}

t.test('a call marked require_approval stops the task WAITING with its question; approved, the task runs again: the earlier call replayed, the approved one made once, COMPLETED, audited', async (t) => {
  const id = await started(app, ownedBy(caller('key-alice', ['assist:invoke'])), [
    { tool: 'fx', action: 'echo_args', args: { marker: 'ap-1' } },
    { tool: 'guarded', action: 'echo_args', args: { marker: 'ap-2' } }
  ])
  const task = await waiting(app, id)
  t.match(task, { status: 'WAITING', owner: null, attempt: 0, lease_expires_at: null })
  const asked = openOf(task)
  t.match(asked, { id: /^[0-9a-f-]{36}$/, message: 'Allow the tool "guarded" to run "echo_args"?', call: { tool: 'guarded', action: 'echo_args', args: { marker: 'ap-2' } } })
  t.equal(servedWith('ap-1'), 1, 'the plain call was made')
  t.equal(servedWith('ap-2'), 0, 'the guarded one waits')
  t.match(await app.events.list({ task_id: id, type: 'task.waiting' }), [{ visibility: 'internal', event: { approval_id: asked.id, message: asked.message, call: asked.call } }], 'a feed shows the question')
  const shown = await app.inject({ url: `/v1/tasks/${id}` })
  t.match(shown.json(), { status: 'WAITING', metadata: { approvals: [{ id: asked.id, call: asked.call, asked_at: String }] } }, 'GET /v1/tasks/:id shows the question')

  const res = await app.inject({ method: 'POST', url: `/v1/tasks/${id}/approvals/${asked.id}`, payload: { approved: true } })
  t.equal(res.statusCode, 202)
  t.match(res.json(), { id, status: 'PENDING', metadata: { approvals: [{ id: asked.id, answer: { approved: true, by: 'anonymous' } }] } })
  await until('the task to end', async () => (await app.tasks.get(id))?.status === 'COMPLETED', 10_000)
  const finished = await app.tasks.get(id) as TaskNode
  t.match(finished.outputs?.artifacts, [{ tool: 'fx', success: true, result: { structuredContent: { marker: 'ap-1' } } }, { tool: 'guarded', success: true, result: { structuredContent: { marker: 'ap-2' } } }])
  t.equal(servedWith('ap-1'), 1, 'the earlier call was replayed, not made again')
  t.equal(servedWith('ap-2'), 1, 'the approved call was made once')
  t.match(await answersOf(app, 'interrupt.approve', id), [{ actor: 'anonymous', success: true, details: { task: id, interrupt_id: asked.id, kind: 'approval', call: asked.call, answer: { approved: true } } }])
  t.equal((await auditOf(app, 'tool.call', id)).length, 2, 'each call made is recorded once')

  const again = await app.inject({ method: 'POST', url: `/v1/tasks/${id}/approvals/${asked.id}`, payload: { approved: false } })
  t.equal(again.statusCode, 409)
  t.match(checkErrorBody(again.json()), { code: 'AH_ERR_INTERRUPT_CLOSED' })
  const unknown = await app.inject({ method: 'POST', url: `/v1/tasks/${id}/approvals/nope`, payload: { approved: true } })
  t.equal(unknown.statusCode, 404)
  t.match(checkErrorBody(unknown.json()), { code: 'AH_ERR_TASK_APPROVAL_NOT_FOUND' })
})

t.test('rejected: the call answers approval_rejected with the comment as its reason, the server never sees it, and the agent goes on', async (t) => {
  const id = await started(app, ownedBy(caller('key-alice', ['assist:invoke'])), [
    { tool: 'fx', action: 'echo_args', args: { marker: 'rj-1' } },
    { tool: 'guarded', action: 'echo_args', args: { marker: 'rj-2' } },
    { tool: 'fx', action: 'echo_args', args: { marker: 'rj-3' } }
  ])
  const asked = openOf(await waiting(app, id))
  const res = await app.inject({ method: 'POST', url: `/v1/tasks/${id}/approvals/${asked.id}`, payload: { approved: false, comment: 'not on the main branch' } })
  t.equal(res.statusCode, 202)
  await until('the task to end', async () => (await app.tasks.get(id))?.status === 'COMPLETED', 10_000)
  t.match((await app.tasks.get(id))?.outputs?.artifacts, [{ success: true }, { tool: 'guarded', success: false, error: 'approval_rejected: not on the main branch' }, { success: true }])
  t.same([servedWith('rj-1'), servedWith('rj-2'), servedWith('rj-3')], [1, 0, 1])
  t.match(await answersOf(app, 'interrupt.reject', id), [{ actor: 'anonymous', details: { answer: { approved: false, comment: 'not on the main branch' } } }])
})

t.test('a second approval after the first answer: the task waits again, and the first approved call is not made again', async (t) => {
  const id = await started(app, ownedBy(caller('key-alice', ['assist:invoke'])), [
    { tool: 'guarded', action: 'echo_args', args: { marker: 'two-1' } },
    { agent: 'vetted', capability: 'echo', payload: { marker: 'two-2' } }
  ])
  const first = openOf(await waiting(app, id))
  t.equal((await app.inject({ method: 'POST', url: `/v1/tasks/${id}/approvals/${first.id}`, payload: { approved: true } })).statusCode, 202)
  const task = await waiting(app, id, 2)
  const second = openOf(task)
  t.match(second, { message: 'Allow a call of the external agent "vetted" for "echo"?', call: { agent: 'vetted', capability: 'echo', payload: { marker: 'two-2' } } })
  t.match(approvalsOf(task)[0], { id: first.id, answer: { approved: true } }, 'the first question keeps its answer')
  t.equal(servedWith('two-1'), 1)
  const sent = (): number => remote.received.filter((m) => JSON.stringify(m).includes('two-2')).length
  t.equal(sent(), 0, 'the external agent was not called yet')
  t.equal((await app.inject({ method: 'POST', url: `/v1/tasks/${id}/approvals/${second.id}`, payload: { approved: true } })).statusCode, 202)
  await until('the task to end', async () => (await app.tasks.get(id))?.status === 'COMPLETED', 10_000)
  t.match((await app.tasks.get(id))?.outputs?.artifacts, [{ tool: 'guarded', success: true }, { agent_id: 'vetted', status: 'success', result: { marker: 'two-2' } }])
  t.equal(servedWith('two-1'), 1, 'the first approved call was replayed on the third run')
  t.equal(sent(), 1)
})

t.test('a WAITING task can be cancelled, and then takes no answer', async (t) => {
  const id = await started(app, ownedBy(caller('key-alice', ['assist:invoke'])), [{ tool: 'guarded', action: 'echo_args', args: { marker: 'cx-1' } }])
  const asked = openOf(await waiting(app, id))
  const cancelled = await app.inject({ method: 'POST', url: `/v1/tasks/${id}/cancel` })
  t.equal(cancelled.statusCode, 200)
  t.equal(cancelled.json().status, 'CANCELLED')
  const late = await app.inject({ method: 'POST', url: `/v1/tasks/${id}/approvals/${asked.id}`, payload: { approved: true } })
  t.equal(late.statusCode, 409)
  t.match(checkErrorBody(late.json()), { code: 'AH_ERR_INTERRUPT_CLOSED', message: /its task is CANCELLED/ })
  t.equal(servedWith('cx-1'), 0)
})

t.test('the answer is durable: a task asked in one server is answered and finished by another on the same DATA_DIR; another tenant\'s caller finds no task', async (t) => {
  const dataDir = tempDataDir(t)
  const keyed = { ...ENV, AUTH_MODE: 'apikey', DATA_DIR: dataDir }
  const first = await build(t, keyed)
  const scopes = ['assist:invoke', 'tasks:write', 'tasks:read']
  const alice = (await first.keys.create({ name: 'alice', tenant: 'acme', scopes })).key
  const bob = (await first.keys.create({ name: 'bob', tenant: 'globex', scopes })).key
  const made = await first.inject({ method: 'POST', url: '/v1/tasks', headers: { authorization: `Bearer ${alice}` }, payload: { type: 'host-user', inputs: { calls: [{ tool: 'fx', action: 'echo_args', args: { marker: 'dur-1' } }, { tool: 'guarded', action: 'echo_args', args: { marker: 'dur-2' } }] } } })
  t.equal(made.statusCode, 201)
  const id = made.json().tasks[0].id as string
  const asked = openOf(await waiting(first, id))
  await first.close()

  const second = await build(t, keyed)
  const answer = async (key: string, approvalId = asked.id): Promise<{ statusCode: number, json: () => any }> =>
    await second.inject({ method: 'POST', url: `/v1/tasks/${id}/approvals/${approvalId}`, headers: { authorization: `Bearer ${key}` }, payload: { approved: true, comment: 'go' } })
  const stranger = await answer(bob)
  t.equal(stranger.statusCode, 404, 'another tenant\'s task is not there')
  t.match(checkErrorBody(stranger.json()), { code: 'AH_ERR_TASK_NOT_FOUND' })
  t.equal((await second.tasks.get(id))?.status, 'WAITING', 'and is left as it was')
  const shown = await second.inject({ url: `/v1/tasks/${id}`, headers: { authorization: `Bearer ${alice}` } })
  t.match(shown.json(), { status: 'WAITING', metadata: { approvals: [{ id: asked.id }] } })
  const res = await answer(alice)
  t.equal(res.statusCode, 202)
  await until('the other server to finish the task', async () => (await second.tasks.get(id))?.status === 'COMPLETED', 10_000)
  t.match((await second.tasks.get(id))?.outputs?.artifacts, [{ success: true, result: { structuredContent: { marker: 'dur-1' } } }, { success: true, result: { structuredContent: { marker: 'dur-2' } } }])
  t.same([servedWith('dur-1'), servedWith('dur-2')], [1, 1], 'the first server\'s call replayed, the approved one made by the second')
  const owner = (await second.tasks.get(id))?.metadata.owner_key
  t.match(await answersOf(second, 'interrupt.approve', id), [{ actor: owner, details: { answer: { approved: true, comment: 'go' } } }], 'audited with the caller as actor')
})

t.test('an A2A call to an external agent: answered, recorded with the owner as actor and the task', async (t) => {
  const task = await done(app, ownedBy(caller('key-alice', ['assist:invoke'], ['host-user'])), [{ agent: 'plain', capability: 'echo', payload: { n: 1 } }])
  t.match(task.outputs?.artifacts, [{ agent_id: 'plain', status: 'success', result: { n: 1 } }])
  t.match(await auditOf(app, 'a2a.call', task.id), [{ actor: 'key-alice', resource: 'plain.echo', success: true, request_id: null, details: { by: 'agent:host-user', task: task.id, status: 'success' } }])
  t.match(await app.events.list({ task_id: task.id, type: 'a2a.call' }), [{ event: { data: { caller: 'host-user', agent: 'plain', status: 'success' } } }])
})

t.test('cancelling a task aborts its tool call in flight, and the call is recorded aborted', async (t) => {
  const [made] = await app.tasks.create([{ type: 'host-user', inputs: { calls: [{ tool: 'fx', action: 'sleep', args: { ms: 600_000 } }] }, metadata: ownedBy(caller('key-alice', ['assist:invoke'])) }])
  const id = (made as TaskNode).id
  await until('the call to reach the server', () => served().includes('sleep'), 10_000)
  // what POST /v1/tasks/:id/cancel does
  await app.tasks.cancel(id)
  t.ok(app.workers.cancel(id), 'its handler was running here')
  await until('the aborted call to be recorded', async () => (await auditOf(app, 'tool.call', id)).length > 0, 10_000)
  t.match(await auditOf(app, 'tool.call', id), [{ actor: 'key-alice', resource: 'fx.sleep', success: false, details: { error: /^aborted/ } }])
  t.equal((await app.tasks.get(id))?.status, 'CANCELLED')
})

t.test('an A2A call the agent left running is given up when its task ends: the remote task is cancelled', async (t) => {
  const before = remote.cancels.length
  const task = await done(app, ownedBy(caller('key-alice', ['assist:invoke'])), [{ agent: 'plain', capability: 'slow', payload: {}, detach: true }])
  t.equal(task.status, 'COMPLETED')
  await until('the remote task to be cancelled', () => remote.cancels.length > before, 10_000)
  await until('the call to be recorded', async () => (await auditOf(app, 'a2a.call', task.id)).length > 0, 10_000)
  t.match(await auditOf(app, 'a2a.call', task.id), [{ actor: 'key-alice', resource: 'plain.slow', success: false }])
})

t.test('a follow-up task keeps its parent\'s owner scopes: an agent cannot raise them', async (t) => {
  const [parent] = await app.stores.tasks.create([{ type: 'nobody-serves-this', metadata: ownedBy(caller('key-alice', ['tasks:write'])) }])
  const runtime = new AgentRuntime({ agentId: 'test-worker', agentType: 'nobody-serves-this', store: app.stores.tasks, events: app.events })
  t.equal((await runtime.claimTask())?.id, (parent as TaskNode).id)
  await runtime.completeTask((parent as TaskNode).id, { task_id: (parent as TaskNode).id, outcome: 'completed', next_actions: [{ type: 'nobody-serves-this', metadata: { owner_scopes: ['admin'], note: 'child' } }] })
  const child = (await app.stores.tasks.list({ type: 'nobody-serves-this' })).find((task) => task.parent_id === (parent as TaskNode).id)
  t.same(child?.metadata.owner_scopes, ['tasks:write'])
  t.equal(child?.metadata.note, 'child', 'the rest of what it asked is kept')
})

t.test('the task host alone: backends metered with the owner, require passed on, a task of nobody refused as the host\'s own', async (t) => {
  const told: unknown[] = []
  const protocol: AgentProtocol = {
    send: async (_session: string, _messages: unknown, ctx?: ProtocolContext) => {
      await ctx?.onStreamMessage?.({ type: 'usage', usage: { input: 3, output: 4 }, cost: 0.5, model: 'm1' } as never)
      return { content: 'ok' } as never
    }
  } as unknown as AgentProtocol
  const required: Array<readonly string[]> = []
  const seen: ToolRunContext[] = []
  const held: string[] = []
  const hosts = taskHosts({
    budgets: { enabled: true, holder: (owner) => async () => { held.push(owner); return { settle: async () => {} } } },
    backends: { backend: () => protocol, require: async (names) => { required.push(names) } },
    tools: { caller: (context) => { seen.push(context); return { call: async () => ({ tool: 'x', action: 'y', success: true, result: null, duration_ms: 0 }), needsApproval: () => false } as never } },
    agents: [{ type: 'host-user', id: 'f0000000-0000-4000-8000-0000000000e1' }],
    usage: (usage) => { told.push(usage) }
  })
  const signal = new AbortController().signal
  const node = (metadata: Record<string, unknown>): TaskNode => ({ id: 'task-1', type: 'host-user', context: {}, metadata } as unknown as TaskNode)
  const host = hosts(node(ownedBy(caller('tenant:acme/key-bob', ['assist:invoke'], ['f0000000-0000-4000-8000-0000000000e1']))), signal)
  await host.backend('llm').send('s', [], {})
  t.same(told, [{ agent: 'host-user', model: 'm1', input: 3, output: 4, cost: 0.5, tenant: 'acme', owner: 'tenant:acme/key-bob' }], 'the backend\'s usage is told with the task\'s owner and tenant')
  t.same(held, ['tenant:acme/key-bob'], 'the call was held to the owner\'s budgets first')
  await (host as unknown as { require: (n: string[]) => Promise<void> }).require(['llm'])
  t.same(required, [['llm']])
  t.equal(host.a2a, undefined, 'no external agents configured: no host.a2a')
  t.match(await host.tools?.call({ tool: 'x', action: 'y', args: {} }), { success: true })
  t.match(seen[0], { agent: 'host-user', owner: 'tenant:acme/key-bob', taskId: 'task-1', signal })
  t.notOk('forbidden' in (seen[0] ?? {}), 'an agent list naming the agent by its manifest id allows it')
  t.notOk('traceId' in (seen[0] ?? {}), 'a task without a trace has none')
  await hosts(node({}), signal).backend('llm').send('s', [], {})
  t.same(held, ['tenant:acme/key-bob'], 'a task of nobody spends no one\'s budget')
  t.match(seen[1], { owner: 'host', forbidden: /\(none: the host's own\) does not hold the scope assist:invoke/ })
  const bare = taskHosts({ backends: { backend: () => protocol } })(node({}), signal)
  t.notOk('require' in bare || 'tools' in bare, 'nothing but the backends when nothing else is given')
})

t.test('a question asked while another host call is in flight: what the task keeps is taken once that call has answered, its answer recorded', async (t) => {
  let finish: (value: unknown) => void = () => {}
  const slow = new Promise((resolve) => { finish = resolve })
  const gate = { needsApproval: (call: { tool?: string }) => call.tool === 'guarded', inScope: async () => true, approved: async () => ({ success: true }), rejected: async () => ({ success: false }) }
  const { replay, ask } = taskApprovals({ id: 'task-p', type: 'host-user', context: {}, metadata: {} } as unknown as TaskNode)
  const host = replay.host({ backend: () => { throw new Error('no backend') }, tools: { call: async () => await slow as never } }, { ask, tools: gate as never })
  const inFlight = host.tools?.call({ tool: 'fx', action: 'a', args: {} })
  const err = await host.tools?.call({ tool: 'guarded', action: 'b', args: { n: 1 } }).catch((e: unknown) => e) as { code: string, question: { id: string }, waiting: () => Promise<Record<string, unknown>> }
  t.match(err, { code: 'AH_ERR_TASK_APPROVAL_REQUIRED', question: { message: 'Allow the tool "guarded" to run "b"?', call: { tool: 'guarded', action: 'b', args: { n: 1 } } } })
  let kept: Record<string, unknown> | undefined
  const taken = err.waiting().then((w) => { kept = w })
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(kept, undefined, 'not while the other call is in flight')
  finish({ tool: 'fx', success: true })
  await Promise.all([taken, inFlight])
  t.match(kept, { approvals: [{ id: err.question.id, message: 'Allow the tool "guarded" to run "b"?', call: { tool: 'guarded' }, asked_at: String }], host_calls: [{ key: /^tool:/, result: { tool: 'fx', success: true } }] })
})
