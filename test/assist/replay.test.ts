import t from 'tap'
import { RunReplay } from '../../src/assist/replay.js'
import type { AgentHost, AgentProtocol } from '../../src/backends/protocol.js'
import type { WaitingRun } from '../../src/storage/interrupts.js'

function chainOf (run: RunReplay): WaitingRun {
  return { run_key: 'k', request_id: 'r', owner_key: 'o', session_id: 's', agent_id: 'a', state: 'resuming', version: 2, last_run: 'k2', envelope: '{}', interrupts: run.interrupts, memo: run.memo, created_at: 0, updated_at: 0 }
}

t.test('a host call is recorded as it returned and replayed in order; one that is not JSON, or that failed, is made again', async (t) => {
  const first = new RunReplay(undefined, 60)
  let made = 0
  const cycle: Record<string, unknown> = {}
  cycle.self = cycle
  t.same(await first.call('tool', { n: 1 }, async () => { made++; return { ok: 1 } }), { ok: 1 })
  t.equal(await first.call('tool', { n: 2 }, async () => { made++; return cycle }), cycle)
  await t.rejects(first.call('tool', { n: 3 }, async () => { made++; throw new Error('down') }), /down/)
  t.equal(made, 3)
  const memo = first.memo
  t.match(memo, [{ result: { ok: 1 } }, { key: /:unrecorded$/, result: null }, { key: /:failed$/ }])

  const second = new RunReplay(chainOf(first), 60)
  t.same(await second.call('tool', { n: 1 }, async () => { made++; return { ok: 'again' } }), { ok: 1 }, 'replayed: not made')
  t.equal(made, 3)
  t.same(await second.call('tool', { n: 2 }, async () => { made++; return { ok: 2 } }), { ok: 2 }, 'not recorded: made again, and from here on every call is made')
  t.same(await second.call('tool', { n: 1 }, async () => { made++; return { ok: 'live' } }), { ok: 'live' })
  t.equal(made, 5)
  t.equal(second.memo.length, 3, 'what matched, then what was made since')
})

t.test('idle() settles once no host call is in flight', async (t) => {
  const replay = new RunReplay(undefined, 60)
  t.equal(replay.idle(), undefined)
  let release!: () => void
  const call = replay.call('a2a', {}, async () => await new Promise<string>((resolve) => { release = () => { resolve('done') } }))
  const idle = replay.idle()
  t.ok(idle instanceof Promise)
  let settled = false
  idle?.then(() => { settled = true }, () => {})
  await new Promise((resolve) => setImmediate(resolve))
  t.notOk(settled, 'not while the call is in flight')
  release()
  t.equal(await call, 'done')
  await idle
  t.ok(settled)
})

t.test('a backend\'s send and resume are replayed; its other methods are its own', async (t) => {
  let sends = 0
  const protocol = { name: 'fake', send: async () => { sends++; return { content: 'hi', toolCalls: [], usage: null, stopReason: null, metadata: {} } }, resume: async () => ({ sessionId: 's', response: { content: 'r' } }), transportType: () => 'llm' } as unknown as AgentProtocol
  const host = { backend: () => protocol } as unknown as AgentHost
  const first = new RunReplay(undefined, 60)
  t.equal((await first.host(host).backend('fake').send('s', [{ role: 'user', content: 'x' }], {})).content, 'hi')
  t.equal(first.host(host).backend('fake').transportType(), 'llm')
  t.equal(first.host(host).backend('fake').name, 'fake')
  const second = new RunReplay(chainOf(first), 60)
  t.equal((await second.host(host).backend('fake').send('other-session', [{ role: 'user', content: 'x' }], {})).content, 'hi')
  t.equal(sends, 1, 'the same messages: replayed, whatever the backend session')
})
