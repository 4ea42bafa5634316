import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteEventStore } from '../../src/storage/sqlite/events.js'
import { type AppendedEvent, type EventInput, type EventLog } from '../../src/storage/events.js'
import { inTransaction, openPostgres } from '../../src/storage/postgres/database.js'
import { PgEventStore } from '../../src/storage/postgres/events.js'
import { tempDataDir } from '../helper.js'
import { pgDatabase } from '../pg.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** An event log on a database of its own, and where that database is (for other processes). */
const logs: Record<string, (t: Test) => Promise<{ events: EventLog, location: string } | undefined>> = {
  sqlite: async (t) => {
    const dir = tempDataDir(t)
    const db = openDatabase(dir)
    t.teardown(() => db.close())
    return { events: new SqliteEventStore(db), location: dir }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const pool = await openPostgres(url)
    t.teardown(async () => { await pool.end() })
    return { events: new PgEventStore(pool), location: url }
  }
}

const stores: Record<string, (t: Test) => Promise<EventLog | undefined>> = Object.fromEntries(Object.entries(logs).map(([kind, make]) => [kind, async (t: Test) => (await make(t))?.events]))

const cloudEvent = (id: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({ specversion: '1.0', id, source: '/agents/test', type: 'com.example.step', time: '2026-11-22T10:00:00+02:00', data: { n: 1 }, ...extra })

/** A CloudEvent of a run, as the engine appends it. */
function emitted (id: string, extra: Partial<EventInput> = {}): EventInput {
  return { kind: 'cloudevent', id, type: 'com.example.step', source: '/agents/test', time: '2026-11-22T10:00:00+02:00', session_id: 'sess-a', request_id: 'req-a', trace_id: '0af7651916cd43dd8448eb211c80319c', owner_key: 'key-a', event: cloudEvent(id), ...extra }
}

for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} store: the event log contract`, async (t) => {
    t.test('an event is stored with its request, session and trace, its time in UTC, its body as emitted', async (t) => {
      const events = await make(t)
      if (events === undefined) return
      const body = cloudEvent('c1', { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', customext: 'x', data: { n: 1, tricky: "'; DROP TABLE events; --", u: 'ünïcødé \u2028' } })
      const seq = await events.append({ ...emitted('c1'), event: body })
      const graph = { event_type: 'NODE_DONE', run_id: 'run-1', node_id: 'n1', timestamp: '2026-11-22T10:00:00Z', payload: { ok: true } }
      await events.append({ ...emitted('g1'), kind: 'graph', type: 'NODE_DONE', time: graph.timestamp, trace_id: undefined, event: graph })
      const stored = await events.list({ request_id: 'req-a' })
      t.same(stored.map((e) => [e.kind, e.type]), [['cloudevent', 'com.example.step'], ['graph', 'NODE_DONE']])
      t.same(stored[0], { seq, kind: 'cloudevent', type: 'com.example.step', time: '2026-11-22T08:00:00.000Z', visibility: 'internal', session_id: 'sess-a', request_id: 'req-a', trace_id: '0af7651916cd43dd8448eb211c80319c', event: body }, 'times are stored in UTC; the body as it was')
      t.same(stored[1]?.event, graph)
      t.notOk('trace_id' in (stored[1] ?? {}), 'no trace: none given back')
      t.ok((stored[1]?.seq ?? 0) > seq, 'seq grows')
      await t.rejects(async () => { await events.append({ ...emitted('bad'), time: 'yesterday' }) }, RangeError, 'an unreadable time is refused')
      t.equal((await events.list()).length, 2, 'and not stored')
    })

    t.test('list filters by each field (a null owner: the host\'s own), by time, and pages by seq', async (t) => {
      const events = await make(t)
      if (events === undefined) return
      const seqs: number[] = []
      seqs.push(await events.append(emitted('a1')))
      seqs.push(await events.append(emitted('a2', { type: 'two' })))
      seqs.push(await events.append(emitted('a3', { session_id: 'sess-b', request_id: 'req-b', owner_key: 'tenant:acme/key-b' })))
      seqs.push(await events.append(emitted('b1', { time: '2030-01-01T00:00:00Z', owner_key: null, session_id: undefined, request_id: undefined })))
      seqs.push(await events.append({ kind: 'task', id: 't1', type: 'AGENT_RESULT', source: 'worker', time: new Date().toISOString(), task_id: 'task-1', session_id: 'conv-1', event: { task_id: 'task-1' } }, 'host'))
      seqs.push(await events.append({ kind: 'task', id: 'n1', type: 'NARRATION', source: 'narrator', time: new Date().toISOString(), visibility: 'user', session_id: 'conv-1', owner_key: 'key-a', event: { text: 'hi' } }, 'narrator'))
      const ids = async (query: Parameters<EventLog['list']>[0]): Promise<string[]> => (await events.list(query)).map((e) => String(e.event.id ?? e.event.task_id ?? e.event.text))
      t.same(await ids({}), ['a1', 'a2', 'a3', 'b1', 'task-1', 'hi'], 'oldest first')
      t.same(await ids({ session_id: 'sess-a' }), ['a1', 'a2'])
      t.same(await ids({ request_id: 'req-b' }), ['a3'])
      t.same(await ids({ task_id: 'task-1' }), ['task-1'])
      t.same(await ids({ type: 'two' }), ['a2'])
      t.same(await ids({ kind: 'task' }), ['task-1', 'hi'])
      t.same(await ids({ visibility: 'user' }), ['hi'])
      t.same(await ids({ owner_key: 'key-a' }), ['a1', 'a2', 'hi'])
      t.same(await ids({ owner_key: null }), ['b1', 'task-1'], 'null: only the host\'s own')
      t.same(await ids({ viewer: { owner: 'key-a' } }), ['a1', 'a2', 'hi'])
      t.same(await ids({ viewer: { tenant: 'acme' } }), ['a3'], 'a tenant\'s admin: its tenant\'s')
      t.same(await ids({ viewer: { tenant: 'default' } }), ['a1', 'a2', 'hi'], 'the default tenant\'s: never the host\'s own')
      t.same((await ids({ viewer: { all: true } })).length, (await ids({})).length)
      t.same(await ids({ since: '2029-01-01T00:00:00Z' }), ['b1'])
      t.same(await ids({ session_id: 'conv-1', owner_key: 'key-a', visibility: 'user', kind: 'task' }), ['hi'], 'filters combine')
      t.same(await ids({ limit: 2 }), ['a1', 'a2'])
      t.same(await ids({ limit: 2, after: seqs[1] }), ['a3', 'b1'], 'after a seq: the next page')
      t.same(await ids({ after: seqs.at(-1) }), [], 'nothing after the last')
      t.equal((await events.list({ limit: -1 })).length, 6, 'a negative limit is none')
      for (let i = 0; i < 120; i++) await events.append(emitted(`many${i}`))
      t.equal((await events.list()).length, 100, 'a hundred by default')
    })

    t.test('guardrails (S36): task results and updates are internal; render_to_user anywhere is refused; only the narrator speaks to users', async (t) => {
      const events = await make(t)
      if (events === undefined) return
      const base = { kind: 'task' as const, id: 'e', source: 's', time: new Date().toISOString() }
      const seq = await events.append({ ...base, type: 'AGENT_UPDATE', visibility: 'user', event: { message: 'hi' } }, 'narrator')
      t.equal((await events.list({ after: seq - 1 }))[0]?.visibility, 'internal', 'forced internal, even for the narrator')
      for (const event of [{ render_to_user: true }, { deep: { list: [{ render_to_user: 'yes' }] } }]) {
        await t.rejects(async () => { await events.append({ ...base, type: 'AGENT_RESULT', event }) }, { code: 'AH_ERR_POLICY_VIOLATION', statusCode: 422, policy_error: true })
      }
      await t.resolves(async () => { await events.append({ ...base, type: 'AGENT_UPDATE', event: { render_to_user: false } }) }, 'a falsy flag is fine')
      await t.rejects(async () => { await events.append({ ...base, type: 'NARRATION', visibility: 'user', event: {} }) }, { code: 'AH_ERR_POLICY_VIOLATION', message: /only the narrator/ })
      await t.rejects(async () => { await events.append({ ...base, type: 'NARRATION', visibility: 'user', event: {} }, 'host') }, { code: 'AH_ERR_POLICY_VIOLATION' })
      const narrated = await events.append({ ...base, type: 'NARRATION', visibility: 'user', event: { text: 'Working on it' } }, 'narrator')
      t.equal((await events.list({ after: narrated - 1 }))[0]?.visibility, 'user')
      t.equal((await events.list({ limit: 1000 })).length, 3, 'nothing refused was stored')
    })

    t.test('appended tells this process of each event it stored, and of nothing refused', async (t) => {
      const events = await make(t)
      if (events === undefined) return
      const told: AppendedEvent[] = []
      events.appended.on('event', (e: AppendedEvent) => { told.push(e) })
      const seq = await events.append(emitted('a1'))
      await t.rejects(async () => { await events.append({ ...emitted('bad'), event: { render_to_user: true } }) })
      const host = await events.append({ ...emitted('h1'), owner_key: undefined, session_id: undefined })
      t.same(told, [
        { seq, type: 'com.example.step', session_id: 'sess-a', owner_key: 'key-a', event: cloudEvent('a1') },
        { seq: host, type: 'com.example.step', session_id: undefined, owner_key: null, event: cloudEvent('h1') }
      ])
    })

    t.test('eraseSession deletes that session\'s events only, and counts them', async (t) => {
      const events = await make(t)
      if (events === undefined) return
      await events.append(emitted('a1'))
      await events.append(emitted('a2'))
      await events.append(emitted('b1', { session_id: 'sess-b' }))
      t.equal(await events.eraseSession('sess-a'), 2)
      t.same((await events.list()).map((e) => e.session_id), ['sess-b'])
      t.equal(await events.eraseSession('sess-a'), 0)
    })

    t.test('a follower listing after the last seq it saw sees every event once, in order, while events are appended', async (t) => {
      const events = await make(t)
      if (events === undefined) return
      const seen: string[] = []
      let after = 0
      const follow = async (): Promise<void> => {
        for (const e of await events.list({ after, limit: 7 })) {
          t.ok(e.seq > after)
          after = e.seq
          seen.push(String(e.event.id))
        }
      }
      const appended: string[] = []
      for (let i = 0; i < 60; i++) {
        appended.push(`e${i}`)
        await Promise.all([events.append(emitted(`e${i}`)), i % 3 === 0 ? follow() : undefined])
      }
      for (let before = -1; before !== seen.length;) { before = seen.length; await follow() }
      t.same(seen, appended)
    })
  })
}

t.test('postgres store: an event appended in the caller\'s transaction is there once it commits, and gone if it rolls back; appended is told by the caller', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const events = new PgEventStore(pool)
  const told: AppendedEvent[] = []
  events.appended.on('event', (e: AppendedEvent) => { told.push(e) })
  const appended = await inTransaction(pool, async (client) => {
    const e = await events.appendIn(client, emitted('in-1'))
    t.same(await events.list(), [], 'not visible before the commit')
    t.equal((await events.listIn(client)).length, 1, 'but to its own transaction')
    return e
  })
  t.same(told, [], 'appendIn tells no one: it cannot know when the commit is')
  events.announce(appended)
  t.same(told, [appended])
  t.same((await events.list()).map((e) => e.seq), [appended.seq])
  await t.rejects(inTransaction(pool, async (client) => {
    await events.appendIn(client, emitted('in-2'))
    throw new Error('the run failed')
  }))
  await t.rejects(inTransaction(pool, async (client) => { await events.appendIn(client, { ...emitted('in-3'), event: { render_to_user: 1 } }) }), { code: 'AH_ERR_POLICY_VIOLATION' })
  t.same((await events.list()).map((e) => e.event.id), ['in-1'], 'nothing of a rolled-back transaction')
})

const WRITERS = 4
const EACH = 150

for (const [kind, make] of Object.entries(logs)) {
  t.test(`${kind} store: ${WRITERS} processes append ${WRITERS * EACH} events while a follower tails by seq: it sees every one exactly once, in order`, async (t) => {
    const log = await make(t)
    if (log === undefined) return
    const { events, location } = log
    const writers = Array.from({ length: WRITERS }, (_, i) => {
      const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/event-appender.ts', kind, location, `w${i}`, String(EACH)], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] })
      t.teardown(() => { child.kill('SIGKILL') })
      return { child, ready: once(child.stdout, 'data'), exit: once(child, 'exit').then(([code]) => code as number | null) }
    })
    await Promise.all(writers.map(async (w) => await w.ready))
    for (const w of writers) w.child.stdin.end('go\n')
    const running = (): boolean => writers.some((w) => w.child.exitCode === null && w.child.signalCode === null)
    const seen: Array<{ seq: number, id: string }> = []
    let after = 0
    let looks = 0
    const deadline = Date.now() + 60_000
    // the follower: small pages, as fast as it can, until the writers are gone and nothing is left
    for (let drained = false; !drained;) {
      if (Date.now() > deadline) throw new Error(`timed out: ${seen.length} of ${WRITERS * EACH} seen`)
      const done = !running()
      const page = await events.list({ after, limit: 16 })
      looks++
      for (const e of page) {
        after = e.seq
        seen.push({ seq: e.seq, id: String(e.event.id) })
      }
      drained = done && page.length === 0
      if (page.length === 0 && !done) await sleep(1)
    }
    t.same(await Promise.all(writers.map(async (w) => await w.exit)), Array(WRITERS).fill(0), 'every writer finished')
    const all = await events.list({ limit: -1 })
    t.equal(all.length, WRITERS * EACH, 'every event was stored')
    t.equal(seen.length, all.length, `the follower saw as many (in ${looks} looks)`)
    t.equal(new Set(seen.map((e) => e.id)).size, seen.length, 'none twice')
    t.same(seen, all.map((e) => ({ seq: e.seq, id: String(e.event.id) })), 'every one, in seq order')
    for (let i = 0; i < WRITERS; i++) {
      const mine = seen.filter((e) => e.id.startsWith(`w${i}:`))
      t.equal(mine.length, EACH, `all of writer ${i}'s`)
    }
  })
}
