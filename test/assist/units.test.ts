import t from 'tap'
import { AH_ERR_STORAGE_BUSY } from '../../src/errors.js'
import { answerOf, storedAnswer } from '../../src/assist/answers.js'
import { FrameQueue, packetOf } from '../../src/assist/frame-queue.js'
import { PacketFactory, packetJson, resumeGapPackets, streamError } from '../../src/assist/packets.js'
import { recoverRun } from '../../src/assist/recover.js'
import { AssistRun, type RunRecorder } from '../../src/assist/run.js'
import type { ResponseHandler } from '../../src/agents/contract.js'
import { resolveAgentRequest } from '../../src/agents/resolve-request.js'
import { TranscriptBuilder } from '../../src/assist/transcript.js'
import type { StreamPacket } from '../../src/protocol/packets.js'
import type { RunRecord } from '../../src/storage/runs.js'
import { AGENTS, build, envelope } from '../helper.js'
import { assertStreamRules } from '../sse.js'

t.test('the packet factory numbers each stream from 1 and closes sub-streams before the main stream', async (t) => {
  const f = new PacketFactory()
  const sub = '11111111-1111-4111-8111-111111111111'
  const packets: StreamPacket[] = [
    f.packet(f.mainStreamId, 'EVENT', { type: 'RESULT', data: {} }),
    f.packet(sub, 'EVENT', { type: 'STREAM_START' }),
    f.packet(sub, 'DELTA', 'x'),
    ...f.failAll(streamError('agent_failed', 'no', 'FATAL'))
  ]
  assertStreamRules(packets)
  t.same(packets.map((p) => [p.stream_id === sub ? 'sub' : 'main', p.seq, p.op]), [['main', 1, 'EVENT'], ['sub', 1, 'EVENT'], ['sub', 2, 'DELTA'], ['main', 2, 'ERROR'], ['sub', 3, 'CLOSE'], ['main', 3, 'CLOSE']])
  t.ok(f.ended)
  t.notOk(f.isOpen(sub))
})

t.test('a factory rebuilt from a journal goes on where the run stopped (unsequenced rows and closed streams included)', async (t) => {
  const run = new PacketFactory()
  const a = '22222222-2222-4222-8222-222222222222'
  const b = '33333333-3333-4333-8333-333333333333'
  const rows = [
    run.packet(run.mainStreamId, 'EVENT', { type: 'DATA', data: {} } as never),
    run.packet(a, 'EVENT', { type: 'STREAM_START' }),
    run.packet(a, 'CLOSE', 'done'),
    run.packet(b, 'EVENT', { type: 'STREAM_START' })
  ].map((p, i) => ({ ord: i + 1, stream_id: p.stream_id, seq: p.seq as number | null, frame: JSON.stringify(p) }))
  rows.splice(1, 0, { ord: 99, stream_id: run.mainStreamId, seq: null, frame: JSON.stringify(run.unsequenced(run.mainStreamId, 'EVENT', { type: 'THOUGHT_TRACE' } as never)) })
  const again = PacketFactory.fromJournal(run.mainStreamId, rows)
  const closing = again.closeAll('aborted')
  t.same(closing.map((p) => [p.stream_id, p.seq]), [[b, 2], [run.mainStreamId, 2]], 'only the open stream closes, each at its next seq')
  t.notOk(PacketFactory.fromJournal(run.mainStreamId, []).ended)
})

t.test('resume_gap: ERROR then CLOSE on the cursor\'s stream, numbered after its seq', async (t) => {
  const id = '44444444-4444-4444-8444-444444444444'
  t.same(resumeGapPackets(id, 7).map((p) => [p.stream_id, p.seq, p.op]), [[id, 8, 'ERROR'], [id, 9, 'CLOSE']])
  t.same(resumeGapPackets(id).map((p) => p.seq), [1, 2])
})

t.test('answers: 503 after a shutdown, 504 after a timeout, 502 otherwise when nothing was produced; 200 when something was', async (t) => {
  const base = { requestId: 'r', produced: false, metrics: { latency_ms: 1, packets: 2 } }
  t.equal(answerOf({ ...base, reason: 'shutdown' }).status, 503)
  t.equal(answerOf({ ...base, reason: 'aborted', fatal: streamError('run_timeout', 't', 'TRANSIENT') }).status, 504)
  t.match(answerOf({ ...base, reason: 'aborted', lastError: streamError('agent_failed', 'x', 'FATAL') }), { status: 502, body: { details: { error: { code: 'agent_failed' } } } })
  t.match(answerOf({ ...base, reason: 'aborted' }), { status: 502, body: { details: { error: null } } })
  t.equal(answerOf({ ...base, reason: 'aborted', produced: true }).status, 200)
  t.equal(answerOf({ ...base, reason: 'done' }).status, 200)
})

t.test('a stored answer with its output (written before outputs were rebuilt from the journal) is served as stored', async (t) => {
  const app = await build(t)
  const record = { request_id: 'r', response_status: 200, response: JSON.stringify({ request_id: 'r', output: { old: true } }), end_reason: 'done' } as unknown as RunRecord
  t.same(await storedAnswer(record, app.ledger), { status: 200, body: { request_id: 'r', output: { old: true } } })
  const failed = { ...record, response_status: 502, response: JSON.stringify({ code: 'AH_ERR_AGENT_FAILED' }) }
  t.same((await storedAnswer(failed, app.ledger)).status, 502)
  t.same(await storedAnswer({ ...record, response_status: null, response: null }, app.ledger), { status: 500, body: {} })
})

t.test('recovering a run that is not an orphan changes nothing', async (t) => {
  const app = await build(t)
  const body = envelope(AGENTS.echo)
  await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  t.same((await recoverRun(app.ledger, body.request_id, 1024)).recovered, false, 'an ended run')
  t.same(await recoverRun(app.ledger, '55555555-5555-4555-8555-555555555555', 1024), { record: undefined, recovered: false }, 'an unknown run')
})

t.test('a bounded transcript keeps a summary and says it is one; the last error survives the budget', async (t) => {
  const tb = new TranscriptBuilder(100)
  for (let i = 0; i < 20; i++) tb.add({ stream_id: 's', op: 'DELTA', p: 'xxxxxxxxxx' }, 50)
  tb.add({ stream_id: 's', op: 'ERROR', p: streamError('agent_error', 'late', 'WARNING') }, 80)
  t.ok(tb.truncated)
  t.ok(tb.text.length < 100)
  t.equal(tb.lastError?.message, 'late')
  t.match(tb.summary(), { truncated: true })
  t.notOk('truncated' in new TranscriptBuilder().summary())
})

t.test('a live frame carries its packet, so a projection does not parse it again; a frame read back from the journal is parsed', async (t) => {
  const q = new FrameQueue('m', 1000, 2000, () => {})
  const live: StreamPacket = { stream_id: 's', seq: 1, op: 'DELTA', t: '2026-11-29T00:00:00.000Z', p: 'w ' }
  q.write(live, JSON.stringify(live), 1)
  const [frame] = await q.take() as [import('../../src/assist/frame-queue.js').Frame]
  t.equal(packetOf(frame), live, 'the run\'s own packet')
  const stored = { ord: 1, stream_id: 's', seq: 1, json: JSON.stringify(live), final: false }
  t.not(packetOf(stored), live)
  t.same(packetOf(stored), live, 'the same packet, parsed from its JSON')
})

t.test('a frame queue: backpressure past its high-water mark, and a client that falls too far behind is cut once', async (t) => {
  let overflows = 0
  const q = new FrameQueue('m', 10, 30, () => { overflows++ })
  const packet = (seq: number): StreamPacket => ({ stream_id: 's', seq, op: 'DELTA', t: '', p: '' })
  t.equal(q.write(packet(1), 'aaaaaaaa', 1), undefined, 'below the mark')
  const wait = q.write(packet(2), 'bbbbbbbb', 2)
  t.ok(wait instanceof Promise, 'past the mark the run waits')
  t.match(await q.take(), [{ ord: 1, json: 'aaaaaaaa', final: false }, { ord: 2, json: 'bbbbbbbb' }], 'everything queued, in one batch')
  await wait
  const next = q.take()
  q.write(packet(3), 'cc', 3)
  t.match(await next, [{ ord: 3 }], 'a taker waits for the next frame')
  q.write(packet(4), 'c'.repeat(40), 4)
  t.equal(overflows, 1)
  t.equal(q.ended, 'overflow')
  t.equal(q.write(packet(5), 'd', 5), undefined, 'a stopped queue takes nothing')
  t.equal(await q.take(), undefined)
  t.equal(overflows, 1)
})

t.test('packetJson is JSON.stringify of the packet, byte for byte', async (t) => {
  const f = new PacketFactory()
  const payloads: StreamPacket['p'][] = ['plain', 'quotes " and \\ and \n and \u2028 and 😀', { type: 'RESULT', data: { a: [1, 'x'], b: null } } as never, streamError('agent_failed', 'x "y"', 'FATAL', { k: 1 })]
  for (const p of payloads) {
    const packet = f.packet(f.mainStreamId, typeof p === 'string' ? 'DELTA' : 'EVENT', p)
    t.equal(packetJson(packet, JSON.stringify(p)), JSON.stringify(packet))
    const off = f.unsequenced(f.mainStreamId, 'EVENT', p)
    t.equal(packetJson(off, JSON.stringify(p)), JSON.stringify(off))
  }
})

// Regression (group commit): the journal batch commits some turns after a run asks for it; a packet
// the agent sent in between (its code resumed by a write in the same commit) went out with the
// batch before it, ahead of its own journal row.
t.test('a packet sent while the batch before it commits reaches clients only after its own journal write', async (t) => {
  const journaled = new Set<number>()
  let pending: number[] = []
  const flushes: Array<{ commit: () => void, resolve: () => void }> = []
  const recorder: RunRecorder = {
    packet: (ord) => { pending.push(ord) },
    event: () => undefined,
    audit: () => undefined,
    flush: async () => await new Promise<void>((resolve) => {
      flushes.push({ commit: () => { for (const ord of pending) journaled.add(ord); pending = [] }, resolve })
    }),
    commitNow: () => false
  }
  const silent = { trace () {}, debug () {}, info () {}, warn () {}, error () {}, fatal () {} }
  const run = new AssistRun({ requestId: 'r', capability: { capability: { name: 'x' }, validateInput: undefined, validateOutput: undefined } as never, log: silent, recorder })
  const received: Array<[number, boolean]> = []
  run.attach({ write: (_packet, _json, ord) => { received.push([ord, journaled.has(ord)]); return undefined }, end: () => {} })
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  const settled = run.execute({ async assist (_request: unknown, _session: unknown, response: ResponseHandler) { await response.markdown('a'); await gate; await response.markdown('b') } } as never, resolveAgentRequest(envelope(AGENTS.echo) as never), {} as never, {} as never)
  const turn = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }
  while (flushes.length === 0) await turn()
  const first = flushes.shift() as { commit: () => void, resolve: () => void }
  first.commit()
  release()
  await turn()
  first.resolve()
  // from here on every batch commits as soon as it is asked for
  while (run.endReason === undefined || flushes.length > 0) {
    const next = flushes.shift()
    if (next !== undefined) { next.commit(); next.resolve() }
    await turn()
  }
  await settled
  t.ok(received.length >= 3, `${received.length} packets`)
  t.same(received.filter(([, ok]) => !ok), [], 'no packet reached a client before its journal row')
})

t.test('an agent\'s emit() and audit() settle once stored and reject when the store refuses; log() never fails the agent', async (t) => {
  const refused = new AH_ERR_STORAGE_BUSY(10)
  const stored: string[] = []
  let accept = true
  const recorder: RunRecorder = {
    packet: () => {},
    event: async (kind) => { if (!accept) throw refused; stored.push(kind) },
    audit: async (_actor, action) => { if (!accept) throw refused; stored.push(`audit:${action}`) },
    flush: () => undefined,
    commitNow: () => true
  }
  const warnings: unknown[] = []
  const log = { trace () {}, debug () {}, info () {}, warn (o: object) { warnings.push(o) }, error () {}, fatal () {} }
  const run = new AssistRun({ requestId: 'r', capability: { capability: { name: 'x' }, validateInput: undefined, validateOutput: undefined } as never, log, recorder })
  const outcomes: string[] = []
  const cloudEvent = { specversion: '1.0', id: 'e1', source: 'tests', type: 'thing.happened' }
  await run.execute({
    async assist (_request: unknown, _session: unknown, response: ResponseHandler) {
      await response.emit(cloudEvent as never)
      await response.audit('user-1', 'read', 'thing', true)
      outcomes.push(`stored: ${stored.join(', ')}`)
      accept = false
      outcomes.push(await response.emit(cloudEvent as never).then(() => 'emit resolved', (err: { code?: string }) => `emit rejected ${String(err.code)}`))
      outcomes.push(await response.audit('user-1', 'read', 'thing', true).then(() => 'audit resolved', (err: { code?: string }) => `audit rejected ${String(err.code)}`))
      outcomes.push(await response.log('info', 'still here').then(() => 'log resolved', () => 'log rejected'))
    }
  } as never, resolveAgentRequest(envelope(AGENTS.echo) as never), {} as never, {} as never)
  t.same(outcomes, ['stored: cloudevent, audit:read', 'emit rejected AH_ERR_STORAGE_BUSY', 'audit rejected AH_ERR_STORAGE_BUSY', 'log resolved'])
  t.equal(warnings.length, 1, 'the log line that could not be stored is reported in the server log')
})

/**
 * A run whose journal commits as the group writer does (at the end of the turn a flush was asked
 * in), with one client: each packet it got, and whether it was journaled by then; each flush's size.
 */
function turnCommittedRun (): { run: AssistRun, flushed: number[], received: Array<[number, boolean]> } {
  const flushed: number[] = []
  const journaled = new Set<number>()
  let pending: number[] = []
  const recorder: RunRecorder = {
    packet: (ord) => { pending.push(ord) },
    event: () => undefined,
    audit: () => undefined,
    flush: async () => {
      const batch = pending
      pending = []
      flushed.push(batch.length)
      await new Promise((resolve) => setImmediate(resolve))
      for (const ord of batch) journaled.add(ord)
    },
    commitNow: () => false
  }
  const silent = { trace () {}, debug () {}, info () {}, warn () {}, error () {}, fatal () {} }
  const run = new AssistRun({ requestId: 'r', capability: { capability: { name: 'x' }, validateInput: undefined, validateOutput: undefined } as never, log: silent, recorder })
  const received: Array<[number, boolean]> = []
  run.attach({ write: (_packet, _json, ord) => { received.push([ord, journaled.has(ord)]); return undefined }, end: () => {} })
  return { run, flushed, received }
}

t.test('agents that write without waiting give the loop back after a millisecond of writing, and a busy agent\'s packets are committed by age, not every turn', async (t) => {
  const { run, flushed, received } = turnCommittedRun()
  let turns = 0
  let done = false
  const tick = (): void => { turns++; if (!done) setImmediate(tick) }
  tick()
  const block = (ms: number): void => { const end = performance.now() + ms; while (performance.now() < end); }
  const spans: number[] = []
  let busyMs = 0
  await run.execute({
    async assist (_request: unknown, _session: unknown, response: ResponseHandler) {
      const stream = await response.create_stream('s')
      // a write that resolves in the turn it was made in, so this turn has made a packet (on a loaded
      // machine the first writes may already span more than the slice and give the loop back)
      for (let at = -1; at !== turns;) {
        at = turns
        await stream.write('a')
      }
      block(5)
      const before = turns
      await stream.write('b')
      spans.push(turns - before)
      const busy = performance.now()
      for (let i = 0; i < 50; i++) {
        block(1.5)
        await stream.write(String(i))
      }
      busyMs = performance.now() - busy
    }
  } as never, resolveAgentRequest(envelope(AGENTS.echo) as never), {} as never, {} as never)
  await run.ended
  while (received.length < run.packets) await new Promise((resolve) => setImmediate(resolve))
  done = true
  t.ok((spans[0] as number) >= 1, 'a write after 5 ms of writing in one turn resolved in a later turn')
  // by age: at most one commit per 10 ms (run.ts's BUSY_DEFER_MS) of the stretch, which a starved
  // machine makes longer than 75 ms; a commit every turn would be some 50 on any machine not starved
  const allowed = Math.max(25, Math.ceil(busyMs / 10) + 10)
  t.ok(flushed.length < allowed, `${busyMs.toFixed(0)} ms of busy writing, 50 turns, committed ${flushed.length} times (fewer than ${allowed})`)
  t.same(received.map(([ord]) => ord), received.map((_, i) => i + 1), 'every packet, in order')
  t.same(received.filter(([, ok]) => !ok), [], 'none before its journal row')
})

// Regression (issue 33): a commit that settled sent what was queued meanwhile at once, so an agent
// that waits for each write (its write returned the commit in flight) had every packet journaled in
// a commit of its own: one stream of 20 000 DELTAs, 1 packet a commit, half the rate of a raw loop.
t.test('an agent that waits for each write is journaled in batches, not one commit a packet', async (t) => {
  const { run, flushed, received } = turnCommittedRun()
  const deltas = 2000
  await run.execute({
    async assist (_request: unknown, _session: unknown, response: ResponseHandler) {
      const stream = await response.create_stream('s')
      // its first packet is being committed when it starts to write in earnest: each write then
      // returns the commit in flight
      await stream.write('w ')
      await new Promise((resolve) => setImmediate(resolve))
      for (let i = 1; i < deltas; i++) await stream.write('w ')
      await stream.close()
    }
  } as never, resolveAgentRequest(envelope(AGENTS.echo) as never), {} as never, {} as never)
  await run.ended
  while (received.length < run.packets) await new Promise((resolve) => setImmediate(resolve))
  const single = flushed.filter((n) => n === 1).length
  // a commit a turn, each taking what the agent wrote in its slice of the turn: tens of packets at
  // least on any machine; one a commit is ~2 000 commits
  t.ok(flushed.length < deltas / 10, `${deltas} packets in ${flushed.length} commits (${single} of one packet)`)
  t.same(received.map(([ord]) => ord), received.map((_, i) => i + 1), 'every packet, in order')
  t.same(received.filter(([, ok]) => !ok), [], 'none before its journal row')
})
