import t from 'tap'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import type { AgentProtocol, ProtocolContext } from '../../src/backends/protocol.js'
import { taskHosts } from '../../src/assist/task-host.js'
import { AgentRuntime } from '../../src/runtime/agent-runtime.js'
import { ownedBy, type TaskNode } from '../../src/storage/tasks/task.js'
import type { ToolRunContext } from '../../src/tools/tool-caller.js'
import { build, tempDataDir } from '../helper.js'
import { until } from '../socket.js'
import { FIXTURE_SERVER, NO_COVERAGE, serversFile, tempDir } from '../fixtures/tools/servers.js'
import { startRemote } from '../a2a-client/remote.js'

// The host a task agent gets (`context.host` of handleTask, `assist/task-host.ts`), in the server's
// worker pool: the MCP tools (the fixture server, over stdio) and the external A2A agents (the A2A
// SDK's server on a loopback port) called on behalf of the task's owner, held to its scopes and
// agent list, stopped by the task's signal, and recorded as a run's calls are. The agent is
// test/fixtures/task-host/host-user: it makes the calls its task's `inputs.calls` lists.

const AGENTS_DIR = fileURLToPath(new URL('../fixtures/task-host/', import.meta.url))
const calls = join(tempDir(t), 'calls.jsonl')
const remote = await startRemote(t)
const a2aFile = join(tempDataDir(t), 'a2a-agents.json')
writeFileSync(a2aFile, JSON.stringify({ agents: { plain: { card_url: remote.cards.plain, capabilities: ['echo', 'slow'] } } }))
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

t.test('a call marked require_approval is refused: a task has no one to ask', async (t) => {
  const task = await done(app, ownedBy(caller('key-alice', ['assist:invoke'])), [{ tool: 'guarded', action: 'echo_args', args: {} }])
  t.match(task.outputs?.artifacts, [{ success: false, error: /^approval_required: .* which this task cannot ask/ }])
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
    tools: { caller: (context) => { seen.push(context); return { call: async () => ({ tool: 'x', action: 'y', success: true, result: null, duration_ms: 0 }) } as never } },
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
