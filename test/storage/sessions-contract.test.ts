import t, { type Test } from 'tap'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteEventStore } from '../../src/storage/sqlite/events.js'
import { type EventLog } from '../../src/storage/events.js'
import { SqliteGroupWriter } from '../../src/storage/sqlite/group-writer.js'
import { inTransaction, openPostgres } from '../../src/storage/postgres/database.js'
import { PgEventStore } from '../../src/storage/postgres/events.js'
import { PgSessionStore } from '../../src/storage/postgres/sessions.js'
import { SqliteSessionStore } from '../../src/storage/sqlite/sessions.js'
import { ftsQuery, MAX_VALUE_BYTES, normaliseRank, queryWords, type HostSessionStore } from '../../src/storage/sessions.js'
import type { InteractionRecord } from '../../src/protocol/session.js'
import { AGENTS, tempDataDir } from '../helper.js'
import { pgDatabase } from '../pg.js'

const ID = { user_id: 'user-1', tier: 'free', locale: 'en' }

/** One store of the contract, on a database of its own. */
interface Subject {
  sessions: HostSessionStore
  events: EventLog
  /** Another store on the same database: a restart, or a second instance. */
  another: () => Promise<HostSessionStore>
  /** Erase a session as `DELETE /v1/sessions/:id` does: its events and itself, in one transaction. */
  erase: (sessionId: string) => Promise<{ events: number, session: boolean }>
}

const stores: Record<string, (t: Test) => Promise<Subject | undefined>> = {
  sqlite: async (t) => {
    const dir = tempDataDir(t)
    const open = (): { db: ReturnType<typeof openDatabase>, sessions: SqliteSessionStore } => {
      const db = openDatabase(dir)
      const writer = new SqliteGroupWriter(db, { budgetMs: 5000 })
      t.teardown(() => { writer.close(); db.close() })
      return { db, sessions: new SqliteSessionStore(db, writer) }
    }
    const { db, sessions } = open()
    const events = new SqliteEventStore(db)
    return {
      sessions,
      events,
      another: async () => open().sessions,
      erase: async (sessionId) => db.transaction(() => ({ events: events.eraseSession(sessionId), session: sessions.erase(sessionId) }))()
    }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const open = async (): Promise<PgSessionStore> => {
      const pool = await openPostgres(url)
      t.teardown(async () => { await pool.end() })
      return new PgSessionStore(pool)
    }
    const pool = await openPostgres(url)
    t.teardown(async () => { await pool.end() })
    const sessions = new PgSessionStore(pool)
    const events = new PgEventStore(pool)
    return {
      sessions,
      events,
      another: open,
      erase: async (sessionId) => await inTransaction(pool, async (c) => ({ events: await events.eraseSessionIn(c, sessionId), session: await sessions.eraseIn(c, sessionId) }))
    }
  }
}

/** An interaction as the echo agent's run records it. */
function echoed (sessionId: string, requestId: string, query: string, calls = 1, extra: Partial<InteractionRecord> = {}): InteractionRecord {
  return { request_id: requestId, session_id: sessionId, user_id: 'user-1', agent_id: AGENTS.echo, agent_request_id: requestId, root_request_id: requestId, timestamp: new Date().toISOString(), status: 'done', input: { query }, output: { echo: query, calls }, ...extra }
}

const rid = (n: number): string => `5e550000-0000-4000-8000-${String(n).padStart(12, '0')}`

t.test('the words of a recall: letters and digits, lower-cased, each once; as FTS5 syntax, each quoted', async (t) => {
  t.same(queryWords('Fox, fox & HOUND 42'), ['fox', 'hound', '42'])
  t.same(queryWords('"); --'), [])
  t.equal(ftsQuery('Fox, fox & HOUND'), '"fox" OR "hound"')
  t.equal(ftsQuery('  '), undefined)
  t.equal(normaliseRank(0), 0)
  t.ok(normaliseRank(-3) > normaliseRank(-1))
})

for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} store: the session store contract`, async (t) => {
    t.test('history and values survive reopening the store', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const sessionId = rid(1)
      await s.sessions.recordNow(echoed(sessionId, rid(101), 'first question', 1))
      await s.sessions.record(echoed(sessionId, rid(102), 'second question', 2, { parent_request_id: rid(101), root_request_id: rid(101) }))
      await s.sessions.open(sessionId, ID).store('profile', { colour: 'teal', tags: ['a', 'b'] })
      const again = await s.another()
      const handle = again.open(sessionId, ID)
      t.same(await handle.get('profile'), { colour: 'teal', tags: ['a', 'b'] })
      t.equal(await handle.get('missing', 7), 7, 'the fallback when there is no value')
      const history = await handle.history()
      t.same(history.map((h) => [h.input, h.output, h.status]), [
        [{ query: 'first question' }, { echo: 'first question', calls: 1 }, 'done'],
        [{ query: 'second question' }, { echo: 'second question', calls: 2 }, 'done']
      ])
      t.equal(history[0]?.agent_id, AGENTS.echo)
      t.equal(history[0]?.root_request_id, history[0]?.agent_request_id, 'lineage defaults are recorded')
      t.notOk('parent_request_id' in (history[0] ?? {}), 'no parent: none given back')
      t.match(history[1], { request_id: rid(102), parent_request_id: rid(101), root_request_id: rid(101) })
      t.equal(await again.owner(sessionId), 'user-1')
      await again.close()
    })

    t.test('history pages from the newest, in time order; count counts', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const sessionId = rid(5)
      for (let i = 1; i <= 12; i++) await s.sessions.recordNow(echoed(sessionId, rid(500 + i), `q${i}`))
      const queries = async (limit?: number, offset?: number): Promise<unknown[]> => (await s.sessions.history(sessionId, limit, offset)).map((i) => i.input.query)
      t.equal(await s.sessions.count(sessionId), 12)
      t.same(await queries(2), ['q11', 'q12'])
      t.same(await queries(2, 2), ['q9', 'q10'])
      t.equal((await queries()).length, 10, 'ten by default')
      t.same(await queries(5, 10), ['q1', 'q2'])
      t.same(await queries(-1), [], 'a negative limit is none')
      t.same(await queries(1, -5), ['q12'], 'a negative offset is none')
      t.equal(await s.sessions.count(rid(6)), 0)
      t.same(await s.sessions.history(rid(6)), [])
    })

    t.test('recall finds interactions and values by their words, best first, threshold in 0..1', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const sessionId = rid(2)
      let calls = 0
      for (const q of ['the quick brown fox', 'a lazy dog sleeps', 'quick quick quick']) await s.sessions.recordNow(echoed(sessionId, rid(200 + ++calls), q, calls))
      const handle = s.sessions.open(sessionId, ID)
      await handle.store('pet', 'a fox named Ember')
      const hits = await handle.recall('fox')
      t.same(hits.map((h) => h.kind).sort(), ['interaction', 'value'])
      t.ok(hits.every((h) => h.score > 0 && h.score < 1))
      t.same(hits.find((h) => h.kind === 'value'), { kind: 'value', ref: 'pet', score: hits.find((h) => h.kind === 'value')?.score, content: { key: 'pet', value: 'a fox named Ember' } })
      t.match(hits.find((h) => h.kind === 'interaction'), { ref: rid(201), content: { request_id: rid(201), input: { query: 'the quick brown fox' }, output: { echo: 'the quick brown fox', calls: 1 } } })
      const quick = await handle.recall('quick', 5)
      t.equal((quick[0]?.content as { input: { query: string } }).input.query, 'quick quick quick', 'the denser match ranks first')
      t.ok((quick[0]?.score ?? 0) >= (quick[1]?.score ?? 0))
      t.same(await handle.recall('fox', 1).then((h) => h.length), 1)
      t.same(await handle.recall('fox', 5, 0.99), [], 'threshold filters')
      t.same(await handle.recall('zebra'), [])
      t.same(await handle.recall('"); DROP TABLE sessions; --'), [], 'query syntax never reaches the search')
      t.same(await handle.recall("' | ! & <-> :* fox"), (await handle.recall('fox')), 'tsquery syntax neither')
      t.same(await handle.recall('   '), [])
      t.same((await handle.recall('ZEBRA OR FOX')).length, 2, 'any of the words, whatever their case')
      const other = s.sessions.open(rid(99), ID)
      t.same(await other.recall('fox'), [], 'only the session\'s own memory')
    })

    t.test('recall: equal matches come back oldest first (values: the last stored first), a shorter match before a longer one; at most `limit` hits', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const sessionId = rid(3)
      for (let i = 1; i <= 6; i++) await s.sessions.recordNow(echoed(sessionId, rid(300 + i), 'same words exactly'))
      const handle = s.sessions.open(sessionId, ID)
      const hits = await handle.recall('exactly', 4)
      t.same(hits.map((h) => h.ref), [rid(301), rid(302), rid(303), rid(304)])
      t.equal(new Set(hits.map((h) => h.score)).size, 1, 'an equal score')
      t.same((await handle.recall('words', 2)).map((h) => h.ref), [rid(301), rid(302)])
      await s.sessions.recordNow(echoed(sessionId, rid(307), 'a marten, and many other words that make this text longer than the next one'))
      await s.sessions.recordNow(echoed(sessionId, rid(308), 'a marten'))
      t.same((await handle.recall('marten')).map((h) => h.ref), [rid(308), rid(307)], 'of two single matches, the shorter text ranks first')
      await handle.store('a', 'heron')
      await handle.store('b', 'heron')
      t.same((await handle.recall('heron')).map((h) => h.ref), ['b', 'a'], 'equal values: the one stored last first')
      await handle.store('a', 'heron')
      t.same((await handle.recall('heron')).map((h) => h.ref), ['a', 'b'], 'stored again, it is the last')
    })

    t.test('stored values: JSON round-trips exactly, including SQL-looking strings; limits are enforced', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const handle = s.sessions.open(rid(7), ID)
      const tricky = { q: "'; DROP TABLE session_values; --", u: 'ünïcødé ✓ \u2028', n: null, nested: { a: [1.5, -0, true] } }
      await handle.store("key'); --", tricky)
      t.same(await handle.get("key'); --"), JSON.parse(JSON.stringify(tricky)))
      await handle.store('k', 1)
      await handle.store('k', 2)
      t.equal(await handle.get('k'), 2, 'a second store replaces')
      t.equal(await handle.get('nope'), undefined)
      await t.rejects(handle.store('big', 'x'.repeat(MAX_VALUE_BYTES)), { code: 'AH_ERR_SESSION_VALUE_INVALID' })
      await t.rejects(handle.store('fn', undefined), { code: 'AH_ERR_SESSION_VALUE_INVALID' })
      t.same(await handle.recall('DROP'), [{ kind: 'value', ref: "key'); --", score: (await handle.recall('DROP'))[0]?.score, content: { key: "key'); --", value: JSON.parse(JSON.stringify(tricky)) } }])
      t.same((await handle.recall('ünïcødé')).map((h) => h.ref), ["key'); --"], 'words beyond ASCII are found')
    })

    t.test('a value or an interaction of the largest size, of many different words, is stored and found', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const handle = s.sessions.open(rid(8), ID)
      // ~1 MiB of distinct words: more than one tsvector holds, were the whole text indexed
      const words = Array.from({ length: 180_000 }, (_, i) => `w${i.toString(36)}`)
      const value = words.join(' ').slice(0, MAX_VALUE_BYTES - 2)
      await handle.store('big', value)
      t.equal(await handle.get('big'), value)
      t.same((await handle.recall('w0 w1')).map((h) => h.ref), ['big'])
      await s.sessions.recordNow(echoed(rid(8), rid(801), value, 1, { output: { echo: 'kingfisher' } }))
      t.equal((await s.sessions.history(rid(8)))[0]?.input.query, value)
      t.same((await handle.recall('kingfisher')).map((h) => h.ref), [rid(801)], 'an answer after a large input is found')
    })

    t.test('a recall finds an interaction recorded a moment ago', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const sessionId = rid(11)
      await s.sessions.recordNow(echoed(sessionId, rid(1101), 'zeppelins over Lisbon'))
      t.same((await s.sessions.open(sessionId, ID).recall('zeppelins')).map((h) => h.ref), [rid(1101)])
    })

    t.test('what is recorded after an erasure is still found; nothing of the erased session is', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const gone = rid(12)
      const kept = rid(13)
      await s.sessions.recordNow(echoed(gone, rid(1201), 'marmalade'))
      t.same((await s.sessions.open(gone, ID).recall('marmalade')).map((h) => h.ref), [rid(1201)])
      t.ok(await s.sessions.erase(gone))
      await s.sessions.recordNow(echoed(kept, rid(1301), 'marmalade again'))
      t.same((await s.sessions.open(kept, ID).recall('marmalade')).map((h) => h.ref), [rid(1301)])
      t.same(await s.sessions.open(gone, ID).recall('marmalade'), [], 'nothing of the erased session is found')
    })

    t.test('a value stored again and again is found by its latest content only', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const session = s.sessions.open(rid(14), ID)
      for (let i = 0; i < 50; i++) await session.store('counter', `pelican ${i}`)
      t.same((await session.recall('pelican')).map((h) => h.content), [{ key: 'counter', value: 'pelican 49' }], 'one hit, the latest')
      await session.store('counter', 'albatross')
      t.same((await session.recall('albatross')).map((h) => h.content), [{ key: 'counter', value: 'albatross' }])
      t.same(await session.recall('pelican'), [], 'the replaced content is gone')
    })

    t.test('erasing a session removes its history, values, search hits and events, and nothing of another', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const gone = rid(15)
      const kept = rid(16)
      for (const sessionId of [gone, kept]) {
        await s.sessions.recordNow(echoed(sessionId, `${sessionId.slice(0, -4)}aaaa`, `secret words of ${sessionId}`))
        await s.sessions.open(sessionId, ID).store('v', 'secret value')
        await s.events.append({ kind: 'cloudevent', id: 'e1', type: 't.e', source: '/t', time: new Date().toISOString(), session_id: sessionId, event: { id: 'e1' } })
      }
      t.same(await s.erase(gone), { events: 1, session: true })
      t.equal(await s.sessions.owner(gone), undefined)
      t.equal(await s.sessions.keyOf(gone), undefined)
      t.same(await s.sessions.history(gone), [])
      t.equal(await s.sessions.count(gone), 0)
      t.equal(await s.sessions.open(gone, ID).get('v'), undefined)
      t.same(await s.sessions.open(gone, ID).recall('secret'), [])
      t.same(await s.events.list({ session_id: gone }), [])
      t.equal((await s.sessions.history(kept)).length, 1, 'the other session is intact')
      t.equal((await s.sessions.open(kept, ID).recall('secret')).length, 2)
      t.equal((await s.events.list({ session_id: kept })).length, 1)
      t.same(await s.erase(gone), { events: 0, session: false }, 'erasing again finds nothing')
      t.equal(await s.sessions.erase(rid(17)), false)
    })

    t.test('claim: a new session is the claiming key\'s; a claimed one stays its owner\'s; one made before keys has none', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      t.equal(await s.sessions.keyOf(rid(18)), undefined, 'no such session')
      t.equal(await s.sessions.claim(rid(18), 'user-1', 'key-a'), 'key-a')
      t.equal(await s.sessions.claim(rid(18), 'user-2', 'key-b'), 'key-a', 'another key finds it taken')
      t.equal(await s.sessions.keyOf(rid(18)), 'key-a')
      t.equal(await s.sessions.owner(rid(18)), 'user-1', 'the first claim\'s user owns it')
      await s.sessions.open(rid(19), ID).store('x', 1)
      t.equal(await s.sessions.keyOf(rid(19)), null, 'a session made by a store() has no key')
      t.equal(await s.sessions.claim(rid(19), 'user-1', 'key-a'), null)
      await s.sessions.recordNow(echoed(rid(18), rid(1801), 'later'))
      t.equal(await s.sessions.keyOf(rid(18)), 'key-a', 'recording keeps the key')
    })

    t.test('two instances claiming a new session at once: one key wins, and both are told the same', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const other = await s.another()
      for (let i = 0; i < 20; i++) {
        const sessionId = rid(2000 + i)
        const [a, b] = await Promise.all([s.sessions.claim(sessionId, 'user-a', 'key-a'), other.claim(sessionId, 'user-b', 'key-b')])
        t.equal(a, b, `session ${i}: the same answer`)
        t.ok(a === 'key-a' || a === 'key-b')
        t.equal(await s.sessions.keyOf(sessionId), a)
      }
    })
  })
}

t.test('postgres store: a session erased in a transaction that rolls back is all still there', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const sessions = new PgSessionStore(pool)
  const events = new PgEventStore(pool)
  const sessionId = rid(30)
  await sessions.claim(sessionId, 'user-1', 'key-a')
  await inTransaction(pool, async (c) => {
    await sessions.recordIn(c, echoed(sessionId, rid(3001), 'kept together'))
    await events.appendIn(c, { kind: 'task', id: 'e', type: 'x', source: 's', time: new Date().toISOString(), session_id: sessionId, event: {} })
  })
  await t.rejects(inTransaction(pool, async (c) => {
    t.equal(await events.eraseSessionIn(c, sessionId), 1)
    t.equal(await sessions.eraseIn(c, sessionId), true)
    throw new Error('the route failed after erasing')
  }), /the route failed/)
  t.equal(await sessions.keyOf(sessionId), 'key-a')
  t.equal(await sessions.count(sessionId), 1)
  t.equal((await events.list({ session_id: sessionId })).length, 1)
  t.same((await sessions.open(sessionId, ID).recall('together')).map((h) => h.ref), [rid(3001)])
  await t.rejects(inTransaction(pool, async (c) => {
    await sessions.recordIn(c, echoed(sessionId, rid(3002), 'never kept'))
    t.equal(await sessions.claimIn(c, rid(31), 'user-1', 'key-b'), 'key-b')
    throw new Error('the run failed')
  }))
  t.equal(await sessions.count(sessionId), 1, 'an interaction recorded in a rolled-back transaction is not there')
  t.equal(await sessions.keyOf(rid(31)), undefined, 'nor is a session claimed in it')
})
