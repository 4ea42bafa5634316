import t from 'tap'
import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { A2AResponse } from '../../src/protocol/a2a-client.js'
import { loadA2AAgents } from '../../src/a2a-client/agents-file.js'
import { build, envelope, tempDataDir, assistJson, resumeEnvelope } from '../helper.js'
import { entered } from '../fixtures/approval-agents/approver/index.js'
import { startRemote } from './remote.js'

// Issue 32, approvals of calls of external agents: an agent marked `require_approval` in
// A2A_AGENTS_FILE is called only once a person approved the call (an `approval` interrupt showing
// it). In process: the remote agents are the A2A SDK's server on a loopback port (./remote.ts).

const APPROVER = 'f0000000-0000-4000-8000-0000000000d1'
const APPROVAL_AGENTS = fileURLToPath(new URL('../fixtures/approval-agents/', import.meta.url))

type Body = ReturnType<typeof envelope>
type Tap = Pick<typeof t, 'match' | 'equal'>
interface WireInterrupt { id: string, kind: string, message: string, call?: Record<string, unknown> }

const remote = await startRemote(t)
const file = join(tempDataDir(t), 'a2a-agents.json')
writeFileSync(file, JSON.stringify({
  agents: {
    gated: { card_url: remote.cards.plain, capabilities: ['echo'], require_approval: true },
    free: { card_url: remote.cards.plain, capabilities: ['echo'] }
  }
}))
const app = await build(t, { AGENTS_DIR: APPROVAL_AGENTS, A2A_AGENTS_FILE: file, WORKERS_PER_TYPE: '0' })

const post = async (request: Body): Promise<Record<string, unknown>> => await assistJson(app, request)

const answer = (first: Body, id: string, value: { approved: boolean, comment?: string }): Body => resumeEnvelope(first, [{ interrupt_id: id, value }])

/** Ask `gated` to echo `n`: the run stops to ask, and nothing reached the remote. */
async function asked (t: Tap, n: number): Promise<{ first: Body, question: WireInterrupt }> {
  const before = remote.received.length
  const first = envelope(APPROVER, { calls: [{ agent: 'gated', capability: 'echo', payload: { n } }] })
  const interrupts = (await post(first)).interrupts as WireInterrupt[]
  t.match(interrupts, [{ kind: 'approval', message: 'Allow a call of the external agent "gated" for "echo"?', call: { agent: 'gated', capability: 'echo', payload: { n } } }], 'the approval shows the call')
  t.equal(remote.received.length, before, 'nothing reached the remote')
  return { first, question: interrupts[0] as WireInterrupt }
}

t.test('a call of an agent marked require_approval, rejected: a failure that never reached it, the reason the comment; audited', async (t) => {
  const before = remote.received.length
  const { first, question } = await asked(t, 1)
  const done = await post(answer(first, question.id, { approved: false, comment: 'not this one' }))
  const [response] = (done.output as { answers: A2AResponse[] }).answers
  t.match(response, { agent_id: 'gated', status: 'failure', result: null, metadata: { capability: 'echo', error: 'approval_rejected: not this one' } })
  t.equal(remote.received.length, before, 'the remote never got the message')
  t.equal(entered.get(first.context.session_id), 2)
  t.match(await app.stores.audit.list({ action: 'interrupt.reject' }), [{ actor: 'anonymous', details: { interrupt_id: question.id, call: { agent: 'gated', capability: 'echo', payload: { n: 1 } }, answer: { approved: false, comment: 'not this one' } } }])
  t.match(await app.audit.list({ action: 'a2a.call', resource: 'gated.echo' }), [{ success: false, details: { status: 'failure', error: 'approval_rejected: not this one' } }], 'the refused call is audited as every refusal')
})

t.test('approved: the call is made once, though the agent was entered twice', async (t) => {
  const before = remote.received.length
  const { first, question } = await asked(t, 2)
  const done = await post(answer(first, question.id, { approved: true }))
  t.match((done.output as { answers: A2AResponse[] }).answers, [{ agent_id: 'gated', status: 'success', result: { n: 2 } }])
  t.equal(remote.received.length, before + 1, 'one message reached the remote')
  t.equal(entered.get(first.context.session_id), 2)
})

t.test('an agent not marked is called without asking', async (t) => {
  const done = await post(envelope(APPROVER, { calls: [{ agent: 'free', capability: 'echo', payload: { n: 3 } }] }))
  t.notOk('interrupts' in done)
  t.match(done.output, { answers: [{ agent_id: 'free', status: 'success', result: { n: 3 } }] })
})

t.test('where no person can be asked, the call is refused (the caller without RunReplay.host)', async (t) => {
  const before = remote.received.length
  const caller = app.a2aAgents.caller({ agent: 'approver', owner: 'owner-1', requestId: randomUUID(), sessionId: randomUUID(), traceId: randomUUID(), user: 'user-1', signal: new AbortController().signal })
  t.match(await caller.call('gated', 'echo', { n: 4 }), { status: 'failure', metadata: { error: /^approval_required: calls of "gated" wait for a person's approval/ } })
  t.equal(caller.needsApproval('gated', 'echo', { n: 4 }), true)
  t.equal(caller.needsApproval('gated', 'secret', { n: 4 }), false, 'a capability the file does not allow is refused as before, not asked about')
  t.equal(caller.needsApproval('free', 'echo', { n: 4 }), false)
  t.equal(remote.received.length, before)
})

t.test('require_approval is checked at load: a boolean', async (t) => {
  const bad = join(tempDataDir(t), 'bad.json')
  writeFileSync(bad, JSON.stringify({ agents: { gated: { card_url: 'http://127.0.0.1:1/card', capabilities: ['echo'], require_approval: 'yes' } } }))
  t.throws(() => loadA2AAgents(bad, {}), { code: 'AH_ERR_CONFIG_INVALID', message: /\/agents\/gated\/require_approval: must be boolean/ })
  t.same(loadA2AAgents(file, {}).map((a) => a.requireApproval), [true, undefined])
})
