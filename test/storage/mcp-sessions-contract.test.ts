import t, { type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { decodeSignal, encodeSignal, type McpSessionRecord, type McpSessionStore, type McpSignal } from '../../src/storage/mcp-sessions.js'
import { openPostgres } from '../../src/storage/postgres/database.js'
import { PgMcpSessionStore } from '../../src/storage/postgres/mcp-sessions.js'
import { PgNotifications } from '../../src/storage/postgres/notifications.js'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteGroupWriter } from '../../src/storage/sqlite/group-writer.js'
import { SqliteMcpSessionStore } from '../../src/storage/sqlite/mcp-sessions.js'
import { tempDataDir } from '../helper.js'
import { pgDatabase } from '../pg.js'
import { until } from '../socket.js'

/** A store of the contract, and another on the same database (a second instance on PostgreSQL, this process's on SQLite). */
interface Subject { store: McpSessionStore, other: McpSessionStore }

const quiet = { warn: () => {} }

const drivers: Record<string, (t: Test) => Promise<Subject | undefined>> = {
  sqlite: async (t) => {
    const db = openDatabase(tempDataDir(t))
    const writer = new SqliteGroupWriter(db, { budgetMs: 5000 })
    t.teardown(() => { writer.close(); db.close() })
    const store = new SqliteMcpSessionStore(db, async (op) => await writer.write(op))
    return { store, other: store }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const open = async (instance: string): Promise<McpSessionStore> => {
      const pool = await openPostgres(url)
      const notifications = new PgNotifications({ connectionString: url }, quiet)
      await notifications.start()
      t.teardown(async () => { await notifications.close(); await pool.end() })
      return new PgMcpSessionStore(pool, notifications, instance)
    }
    return { store: await open('a'), other: await open('b') }
  }
}

const session = (owner: string, lastSeen = Date.now()): McpSessionRecord => ({
  id: randomUUID(), owner, capSessionId: randomUUID(), initialize: { protocolVersion: '2025-11-25', capabilities: { elicitation: {} }, clientInfo: { name: 'c', version: '1' } }, level: null, lastSeen
})

for (const [driver, open] of Object.entries(drivers)) {
  t.test(`${driver}: a session is seen by every instance with its client's initialize; its owner's sessions past the limit go, least recently used first`, async (t) => {
    const subject = await open(t)
    if (subject === undefined) return
    const { store, other } = subject
    const first = session('alice', 1000)
    t.same(await store.create(first, 2), [])
    t.same(await other.get(first.id), first, 'the other instance reads it whole')
    const second = session('alice', 2000)
    await store.create(second, 2)
    const bob = session('bob', 500)
    await other.create(bob, 2)
    const third = session('alice', 3000)
    t.same(await other.create(third, 2), [first.id], 'the least recently used of alice\'s, not bob\'s')
    t.equal(await store.get(first.id), undefined)
    await store.touch(second.id, 5000)
    await store.touch(second.id, 4000)
    t.equal((await other.get(second.id))?.lastSeen, 5000, 'a touch never goes back in time')
    await other.setLevel(second.id, 'warning')
    t.equal((await store.get(second.id))?.level, 'warning')
    t.same((await store.idle(3500)).sort(), [bob.id, third.id].sort(), 'idle: not used since')
  })

  t.test(`${driver}: a stream's events in order from an id, only in their session; removing a session takes its events and tells every instance`, async (t) => {
    const subject = await open(t)
    if (subject === undefined) return
    const { store, other } = subject
    const mine = session('alice')
    const theirs = session('bob')
    await store.create(mine, 10)
    await store.create(theirs, 10)
    const signals: McpSignal[] = []
    other.onSignal((signal) => { signals.push(signal) })
    await store.append(theirs.id, 's9', '{}', true)
    const priming = await store.append(mine.id, 's1', '{}', false)
    const a = await store.append(mine.id, 's1', '{"jsonrpc":"2.0","method":"notifications/progress"}', true)
    await store.append(mine.id, 's2', '{"other":"stream"}', true)
    const b = await other.append(mine.id, 's1', '{"jsonrpc":"2.0","id":1,"result":{}}', true)
    t.same(await store.eventsFrom(mine.id, priming), { stream: 's1', events: [{ id: priming, message: '{}' }, { id: a, message: '{"jsonrpc":"2.0","method":"notifications/progress"}' }, { id: b, message: '{"jsonrpc":"2.0","id":1,"result":{}}' }] })
    t.same((await other.eventsFrom(mine.id, a))?.events.map((e) => e.id), [a, b], 'from any instance')
    t.equal(await store.eventsFrom(theirs.id, a), undefined, 'another session\'s event is none of its')
    t.equal(await store.eventsFrom(mine.id, 'not-an-id'), undefined)
    t.equal(await store.eventsFrom(mine.id, '99999999999'), undefined)
    await until('the other instance told of the events', () => signals.filter((s) => s.kind === 'event').length >= 4)
    t.same(signals.filter((s) => s.kind === 'event' && s.session === mine.id).map((s) => s.kind === 'event' && s.stream), ['s1', 's2', 's1'], 'of those appended to tell them, only')

    t.same(await store.remove([mine.id, randomUUID()]), [mine.id], 'the sessions that existed')
    t.equal(await other.eventsFrom(mine.id, priming), undefined, 'its events went with it')
    await until('every instance told it closed', () => signals.some((s) => s.kind === 'closed' && s.session === mine.id))
    t.equal(await store.prune(Date.now() + 1), 1, 'the other session\'s old events are pruned')
  })

  t.test(`${driver}: appends of one turn keep their order; one of a session that has closed is refused alone`, async (t) => {
    const subject = await open(t)
    if (subject === undefined) return
    const { store } = subject
    const mine = session('alice')
    const gone = session('alice')
    await store.create(mine, 10)
    await store.create(gone, 10)
    await store.remove([gone.id])
    const appended = await Promise.allSettled([
      store.append(mine.id, 'c1', '"one"', false), store.append(gone.id, 'c2', '"lost"', false), store.append(mine.id, 'c1', '"two"', false), store.append(mine.id, 'c3', '"three"', false)
    ])
    t.same(appended.map((a) => a.status), ['fulfilled', 'rejected', 'fulfilled', 'fulfilled'])
    const [one, , two] = appended.map((a) => a.status === 'fulfilled' ? a.value : undefined)
    t.ok(Number(one) < Number(two), 'in the order they came')
    t.same((await store.eventsFrom(mine.id, one as string))?.events.map((e) => e.message), ['"one"', '"two"'])
  })

  t.test(`${driver}: signals reach every instance, an answer too long for a notification too`, async (t) => {
    const subject = await open(t)
    if (subject === undefined) return
    const { store, other } = subject
    const mine = session('alice')
    await store.create(mine, 10)
    const seen: McpSignal[] = []
    other.onSignal((signal) => { seen.push(signal) })
    await store.signal({ kind: 'cancelled', session: mine.id, request: 7, reason: 'no' })
    const long = JSON.stringify({ jsonrpc: '2.0', id: '3@b', result: { content: [{ type: 'text', text: 'x'.repeat(20_000) }] } })
    await store.signal({ kind: 'answer', session: mine.id, instance: 'b', message: long })
    await until('both signals', () => seen.length >= 2)
    t.same(seen[0], { kind: 'cancelled', session: mine.id, request: 7, reason: 'no' })
    t.same(seen[1], { kind: 'answer', session: mine.id, instance: 'b', message: long }, 'whole, for the instance it is for')
  })
}

t.test('a signal as a notification payload: no commas, and one this version does not know is dropped', async (t) => {
  const encoded = encodeSignal({ kind: 'cancelled', session: 's', request: 'a,b', reason: 'x, y' })
  t.notOk(encoded.includes(','))
  t.same(decodeSignal(encoded), { kind: 'cancelled', session: 's', request: 'a,b', reason: 'x, y' })
  t.equal(decodeSignal(Buffer.from('{"kind":"future"}').toString('base64url')), undefined)
  t.equal(decodeSignal('%%%'), undefined)
})
