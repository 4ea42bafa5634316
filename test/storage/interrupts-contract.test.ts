// One contract, two stores: the runs waiting for a person's answer (human in the loop), against SQLite
// and PostgreSQL, each through the driver's whole `Stores` as the server opens them. The engine's use
// of it (asking, answering, replaying) is test/assist/interrupts.test.ts.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { drivers } from './store-drivers.js'
import { openInterrupts, type WaitingRun } from '../../src/storage/interrupts.js'

function chain (session: string, over: Partial<WaitingRun> = {}): WaitingRun {
  const key = `k:${randomUUID()}`
  return {
    run_key: key,
    request_id: randomUUID(),
    owner_key: 'k',
    session_id: session,
    agent_id: 'agent',
    state: 'waiting',
    version: 1,
    last_run: key,
    envelope: '{"request_id":"x"}',
    interrupts: [{ id: randomUUID(), kind: 'input', message: 'Why?', schema: { type: 'string' }, expires_at: 2_000_000_000_000 }],
    memo: [{ key: 'tool:abc', result: { success: true } }],
    created_at: 1000,
    updated_at: 1000,
    ...over
  }
}

for (const [name, open] of Object.entries(drivers)) {
  t.test(name, async (t) => {
    const fixture = await open(t)
    if (fixture === undefined) return
    const { stores } = fixture
    const store = stores.interrupts

    t.test('a chain is stored once, read back whole, and found by session and by its latest run', async (t) => {
      const session = randomUUID()
      const first = chain(session)
      t.equal(await store.save(first), true)
      t.equal(await store.save({ ...first, envelope: 'other' }), false, 'a second first version of the same chain is refused')
      t.same(await store.get(first.run_key), first)
      t.same(await store.byLastRun(first.last_run), first)
      const second = chain(session, { created_at: 2000, updated_at: 2000 })
      await store.save(second)
      t.same((await store.inSession(session)).map((c) => c.run_key), [first.run_key, second.run_key], 'oldest first')
      t.same(await store.inSession(randomUUID()), [])
      t.same((await store.waitingByRequestId(first.request_id)).map((c) => c.run_key), [first.run_key], 'a waiting chain by its first request id')
      await store.settle(second.run_key, 'ended', 3000)
      t.same(await store.waitingByRequestId(second.request_id), [], 'only waiting ones')
      t.equal(await store.get('nothing'), undefined)
    })

    t.test('take: compare and set on the version, with the answers\' audit rows in the same transaction; one of two racing answers wins', async (t) => {
      const first = chain(randomUUID())
      await store.save(first)
      const answered = (by: string): WaitingRun => ({
        ...first,
        state: 'resuming',
        version: 2,
        last_run: `k:${by}`,
        interrupts: first.interrupts.map((i) => ({ ...i, answer: { value: by, by, at: 5, request: `k:${by}` } }))
      })
      const other = (await fixture.another()).interrupts
      const results = await Promise.all([
        store.take(answered('a'), [{ actor: 'a', action: 'interrupt.answer', resource: 'run:x', success: true }]),
        other.take(answered('b'), [{ actor: 'b', action: 'interrupt.answer', resource: 'run:x', success: true }])
      ])
      t.same(results.filter(Boolean).length, 1, 'exactly one answer is taken')
      const winner = results[0] === true ? 'a' : 'b'
      const stored = await store.get(first.run_key) as WaitingRun
      t.same([stored.state, stored.version, stored.last_run, stored.interrupts[0]?.answer?.value], ['resuming', 2, `k:${winner}`, winner])
      t.same(openInterrupts(stored), [])
      const audit = await stores.audit.list({ action: 'interrupt.answer' })
      t.same(audit.filter((row) => row.resource === 'run:x').map((row) => row.actor), [winner], 'only the winner\'s audit row')
      t.equal(await store.save({ ...stored, state: 'waiting', version: 3, last_run: 'k:next' }), true, 'the run that goes on saves the next version')
      t.equal(await store.save({ ...stored, state: 'waiting', version: 3, last_run: 'k:late' }), false, 'a stale writer changes nothing')
      t.equal((await store.byLastRun('k:next'))?.version, 3)
    })

    t.test('prune deletes the chains done with before a time: ended or expired, or waiting on questions all expired by then', async (t) => {
      const session = randomUUID()
      const ended = chain(session, { updated_at: 100 })
      const recent = chain(session, { updated_at: 5000 })
      const lapsed = chain(session, { interrupts: [{ id: randomUUID(), kind: 'approval', message: 'x', expires_at: 200 }] })
      const open = chain(session, { interrupts: [{ id: randomUUID(), kind: 'approval', message: 'x', expires_at: 200 }, { id: randomUUID(), kind: 'approval', message: 'y', expires_at: 9000 }] })
      for (const c of [ended, recent, lapsed, open]) await store.save(c)
      await store.settle(ended.run_key, 'ended', 100)
      await store.settle(recent.run_key, 'ended', 5000)
      t.ok(await store.prune(1000) >= 2, 'at least this session\'s two')
      t.same((await store.inSession(session)).map((c) => c.run_key).sort(), [recent.run_key, open.run_key].sort(), 'an ended chain kept for its retention, a chain with a question still open')
    })

    t.test('settle marks a chain ended or expired, whatever its version', async (t) => {
      const first = chain(randomUUID())
      await store.save(first)
      await store.settle(first.run_key, 'expired', 9000)
      t.match(await store.get(first.run_key), { state: 'expired', version: 2, updated_at: 9000 })
      await store.settle(first.run_key, 'ended', 9500)
      t.match(await store.get(first.run_key), { state: 'ended', version: 3 })
      await store.settle('nothing', 'ended', 1)
    })
  })
}
