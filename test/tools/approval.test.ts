import t from 'tap'
import { randomUUID } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import type { ToolResponse } from '../../src/protocol/tools.js'
import { loadToolServers } from '../../src/tools/servers-file.js'
import { build, envelope, type Teardown, assistJson, resumeEnvelope } from '../helper.js'
import { FIXTURE_SERVER, NO_COVERAGE, serversFile, tempDir } from '../fixtures/tools/servers.js'
import { entered } from '../fixtures/approval-agents/approver/index.js'

// Issue 32, approvals of tool calls: a tool's actions marked `require_approval` in the servers file
// stop the run with an `approval` interrupt showing the call, before the MCP server sees it. In
// process (inject); the fixture MCP server is a stdio child, as in every tools test, and logs each
// call it sees to a file (CALLS_LOG), which is how these tests know what reached it.

const APPROVER = 'f0000000-0000-4000-8000-0000000000d1'
const APPROVAL_AGENTS = fileURLToPath(new URL('../fixtures/approval-agents/', import.meta.url))

type Body = ReturnType<typeof envelope>
type Tap = Teardown & Pick<typeof t, 'match' | 'same'>
interface WireInterrupt { id: string, kind: string, message: string, call?: Record<string, unknown> }

/** An app whose `fx` tool (the fixture server) has `read` (free) and `write` (approval required), both its `echo_args`. */
async function setup (t: Teardown): Promise<{ app: FastifyInstance, log: string }> {
  const log = join(tempDir(t), 'calls.jsonl')
  const file = serversFile(t, {
    fx: { command: process.execPath, args: [FIXTURE_SERVER], env: { ...NO_COVERAGE, CALLS_LOG: log }, actions: { read: 'echo_args', write: 'echo_args' }, require_approval: ['write'] }
  })
  const app = await build(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: APPROVAL_AGENTS, MCP_SERVERS_FILE: file })
  return { app, log }
}

/** The calls the fixture server saw: the `args` of each, in order. */
function seen (log: string): unknown[] {
  if (!existsSync(log)) return []
  return readFileSync(log, 'utf8').trim().split('\n').filter((l) => l !== '').map((l) => (JSON.parse(l) as { args: unknown }).args)
}

const post = assistJson

/** A request in the session of `first` that answers its approval with `value`. */
const answer = (first: Body, id: string, value: { approved: boolean, comment?: string }): Body => resumeEnvelope(first, [{ interrupt_id: id, value }])

const CALLS = [
  { tool: 'fx', action: 'read', args: { path: 'a.txt' } },
  { tool: 'fx', action: 'write', args: { path: 'b.txt', branch: 'main' } }
]

/** Run CALLS: the read is made, the write stops the run to ask; its one question. */
async function askedToWrite (t: Tap, app: FastifyInstance, log: string, before: unknown[] = []): Promise<{ first: Body, question: WireInterrupt }> {
  const first = envelope(APPROVER, { calls: CALLS })
  const asked = await post(app, first)
  const interrupts = asked.interrupts as WireInterrupt[]
  t.match(interrupts, [{ kind: 'approval', message: 'Allow the tool "fx" to run "write"?', call: { tool: 'fx', action: 'write', args: { path: 'b.txt', branch: 'main' } } }], 'the approval shows the call')
  t.same(seen(log), before.length > 0 ? before : [{ path: 'a.txt' }], 'the read reached the server, the write did not')
  return { first, question: interrupts[0] as WireInterrupt }
}

t.test('a tool approval rejected: the MCP server never sees the call, the agent gets a failed ToolResponse, the answer and the refusal are audited', async (t) => {
  const { app, log } = await setup(t)
  const { first, question } = await askedToWrite(t, app, log)
  const done = await post(app, answer(first, question.id, { approved: false }))
  const answers = (done.output as { answers: ToolResponse[] }).answers
  t.match(answers[0], { tool: 'fx', action: 'read', success: true, result: { structuredContent: { path: 'a.txt' } } }, 'the read replayed')
  t.same(answers[1], { tool: 'fx', action: 'write', success: false, result: null, error: 'approval_rejected: rejected by anonymous', duration_ms: answers[1]?.duration_ms })
  t.ok(Number.isInteger(answers[1]?.duration_ms), 'duration_ms')
  t.same(seen(log), [{ path: 'a.txt' }], 'the server never saw the write, nor the read again')
  t.equal(entered.get(first.context.session_id), 2, 'the agent was entered again after the answer')

  const [row] = await app.stores.audit.list({ action: 'interrupt.reject' })
  t.match(row, { actor: 'anonymous', resource: `run:${first.request_id}`, details: { interrupt_id: question.id, kind: 'approval', call: { tool: 'fx', action: 'write', args: { path: 'b.txt' } }, answer: { approved: false } } }, 'who, when, what')
  t.ok(Number.isFinite(Date.parse(row?.timestamp ?? '')), 'when')
  const calls = await app.audit.list({ action: 'tool.call', resource: 'fx.write' })
  t.match(calls, [{ success: false, details: { attempts: 0, error: 'approval_rejected: rejected by anonymous' } }], 'the refused call is audited as every refusal')
})

t.test('a tool approval approved: the call reaches the server once, though the agent was entered twice; a comment of a rejection is its reason', async (t) => {
  const { app, log } = await setup(t)
  const { first, question } = await askedToWrite(t, app, log)
  const done = await post(app, answer(first, question.id, { approved: true, comment: 'fine' }))
  const answers = (done.output as { answers: ToolResponse[] }).answers
  t.match(answers, [
    { action: 'read', success: true },
    { tool: 'fx', action: 'write', success: true, result: { structuredContent: { path: 'b.txt', branch: 'main' } } }
  ])
  t.same(seen(log), [{ path: 'a.txt' }, { path: 'b.txt', branch: 'main' }], 'each call reached the server exactly once')
  t.equal(entered.get(first.context.session_id), 2)
  t.match(await app.stores.audit.list({ action: 'interrupt.approve' }), [{ actor: 'anonymous', details: { call: { tool: 'fx', action: 'write' }, answer: { approved: true, comment: 'fine' } } }])

  const again = await askedToWrite(t, app, log, [{ path: 'a.txt' }, { path: 'b.txt', branch: 'main' }, { path: 'a.txt' }])
  const refused = await post(app, answer(again.first, again.question.id, { approved: false, comment: 'not on main' }))
  t.match((refused.output as { answers: ToolResponse[] }).answers[1], { success: false, error: 'approval_rejected: not on main' })
})

t.test('two approvals in turn: once the run goes on after the second, the first call is replayed, neither asked nor made again', async (t) => {
  const { app, log } = await setup(t)
  const first = envelope(APPROVER, { calls: [{ tool: 'fx', action: 'write', args: { path: 'b.txt' } }, { tool: 'fx', action: 'write', args: { path: 'c.txt' } }] })
  const [one] = (await post(app, first)).interrupts as WireInterrupt[]
  const second = await post(app, answer(first, one?.id as string, { approved: true }))
  const [two] = second.interrupts as WireInterrupt[]
  t.match(two, { kind: 'approval', call: { args: { path: 'c.txt' } } }, 'the second call asks in its turn')
  t.same(seen(log), [{ path: 'b.txt' }])
  const done = await post(app, answer(first, two?.id as string, { approved: false }))
  t.match((done.output as { answers: ToolResponse[] }).answers, [{ success: true, result: { structuredContent: { path: 'b.txt' } } }, { success: false, error: 'approval_rejected: rejected by anonymous' }])
  t.same(seen(log), [{ path: 'b.txt' }], 'the approved call reached the server once')
  t.equal(entered.get(first.context.session_id), 3)
  t.same((await app.audit.list({ action: 'tool.call', resource: 'fx.write' })).map((r) => r.success).sort(), [false, true], 'each call recorded once')
})

t.test('a tool not marked is not asked about; GET /v1/tools shows which actions are', async (t) => {
  const { app, log } = await setup(t)
  const done = await post(app, envelope(APPROVER, { calls: [CALLS[0]] }))
  t.notOk('interrupts' in done, 'nothing asked')
  t.match(done.output, { answers: [{ action: 'read', success: true }] })
  t.same(seen(log), [{ path: 'a.txt' }])
  t.match((await app.inject({ url: '/v1/tools' })).json(), { tools: [{ name: 'fx', require_approval: ['write'] }] })
})

t.test('a call that needs an approval is refused where no person can be asked (the caller without RunReplay.host)', async (t) => {
  const { app, log } = await setup(t)
  const run = { agent: 'approver', owner: 'owner-1', requestId: randomUUID(), sessionId: randomUUID(), traceId: randomUUID(), user: 'user-1', signal: new AbortController().signal }
  const caller = app.tools.caller(run)
  t.match(await caller.call(CALLS[1] as never), { success: false, error: /^approval_required: calls of "write" of tool "fx" wait for a person's approval/ })
  t.equal(caller.needsApproval(CALLS[1]), true)
  t.equal(caller.needsApproval(CALLS[0]), false)
  t.equal(caller.needsApproval({ tool: 'fx', action: 'write' }), false, 'a malformed call is not asked about: it throws as any')
  t.same(seen(log), [], 'the server saw nothing')
})

t.test('require_approval is checked at load: a list names actions of the server', async (t) => {
  const entry = { command: process.execPath, args: [FIXTURE_SERVER], actions: { read: 'echo_args' } }
  t.same(loadToolServers(serversFile(t, { fx: { ...entry, require_approval: true } }), {}).map((s) => s.requireApproval), [true])
  t.same(loadToolServers(serversFile(t, { fx: { ...entry, require_approval: false } }), {}).map((s) => s.requireApproval), [undefined])
  t.throws(() => loadToolServers(serversFile(t, { fx: { ...entry, require_approval: ['read', 'wrte'] } }), {}),
    { code: 'AH_ERR_CONFIG_INVALID', message: /\/mcpServers\/fx\/require_approval\/1: "wrte" is not an action of this server \(its actions: read\)/ })
  t.throws(() => loadToolServers(serversFile(t, { fx: { ...entry, require_approval: 'yes' } }), {}),
    { message: /\/mcpServers\/fx\/require_approval must be true \(every action waits for a person's approval\), false, or a list of the actions that do/ })
})

t.test('a marked call outside its tool\'s scopes is refused as any (scope_violation) without asking anyone; one inside them is asked', async (t) => {
  const log = join(tempDir(t), 'calls.jsonl')
  const file = serversFile(t, {
    fx: { command: process.execPath, args: [FIXTURE_SERVER], env: { ...NO_COVERAGE, CALLS_LOG: log }, actions: { write: 'echo_args' }, require_approval: true, scope: { branch_pattern: 'feature/*' } }
  })
  const app = await build(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: APPROVAL_AGENTS, MCP_SERVERS_FILE: file })
  const outside = await post(app, envelope(APPROVER, { calls: [{ tool: 'fx', action: 'write', args: { branch: 'main' } }] }))
  t.notOk('interrupts' in outside, 'nobody was asked')
  t.match((outside.output as { answers: ToolResponse[] }).answers, [{ success: false, error: /^scope_violation: / }])
  const inside = await post(app, envelope(APPROVER, { calls: [{ tool: 'fx', action: 'write', args: { branch: 'feature/x' } }] }))
  t.match(inside.interrupts, [{ kind: 'approval', call: { tool: 'fx', action: 'write', args: { branch: 'feature/x' } } }])
  t.same(seen(log), [], 'the server saw neither')
})
