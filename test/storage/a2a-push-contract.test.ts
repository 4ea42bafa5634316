// One contract, two stores: every behaviour of the A2A push configs' store, run against SQLite and
// against PostgreSQL. Pushing itself (signing, SSRF, the delivery loop) is test/a2a/a2a-push.test.ts.
import t, { type Test } from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqlitePushStore } from '../../src/storage/sqlite/a2a-push.js'
import { type A2APushStore, type ClaimedPushConfig, type NewPushConfig, type PushConfigRecord } from '../../src/storage/a2a-push.js'
import { inTransaction, openPostgres, PG_LOCKS } from '../../src/storage/postgres/database.js'
import { PgPushStore } from '../../src/storage/postgres/a2a-push.js'
import { pgDatabase } from '../pg.js'

const T = Date.parse('2026-11-22T10:00:00.000Z')

/** A store, a second handle on its database (another instance), and the runs and journal it reads. */
interface Fixture {
  store: A2APushStore
  another: () => Promise<A2APushStore>
  /** A running run keyed `key`. */
  run: (key: string) => Promise<void>
  /** A journal row of the run up to `ord`. */
  journal: (key: string, ord: number) => Promise<void>
  /** The run ends. */
  end: (key: string) => Promise<void>
}

const RUN = `INSERT INTO runs (request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, started_at)
  VALUES ($1, 'h', '{"request_id":"wire"}', 's', 'agent', 'm', 'running', 'i', 1, 0)`
const JOURNAL = 'INSERT INTO journal (run_id, ord, count, frames) VALUES ((SELECT run_id FROM runs WHERE request_id = $1), $2, 1, \'{}\')'
const END = "UPDATE runs SET state = 'ended' WHERE request_id = $1"
/** The same statement with SQLite's placeholders (each `$n` is used once, in order). */
const sqlite = (sql: string): string => sql.replace(/\$\d/g, '?')

const stores: Record<string, (t: Test) => Promise<Fixture | undefined>> = {
  sqlite: async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'agent-host-push-'))
    const db = openDatabase(dir)
    t.teardown(() => { db.close(); rmSync(dir, { recursive: true, force: true }) })
    return {
      store: new SqlitePushStore(db),
      another: async () => {
        const other = openDatabase(dir)
        t.teardown(() => other.close())
        return new SqlitePushStore(other)
      },
      run: async (key) => { db.prepare(sqlite(RUN)).run(key) },
      journal: async (key, ord) => { db.prepare(sqlite(JOURNAL)).run(key, ord) },
      end: async (key) => { db.prepare(sqlite(END)).run(key) }
    }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const pool = await openPostgres(url)
    t.teardown(async () => { await pool.end() })
    return {
      store: new PgPushStore(pool),
      another: async () => {
        const other = await openPostgres(url)
        t.teardown(async () => { await other.end() })
        return new PgPushStore(other)
      },
      run: async (key) => { await pool.query(RUN, [key]) },
      journal: async (key, ord) => { await pool.query(JOURNAL, [key, ord]) },
      end: async (key) => { await pool.query(END, [key]) }
    }
  }
}

function config (runKey: string, id: string, extra: Partial<NewPushConfig> = {}): NewPushConfig {
  return { run_key: runKey, id, task_id: `task-${runKey}`, agent_id: 'agent', owner_key: 'k1', created_by: 'k1', url: `https://example.com/${id}`, token: `token-${id}`, auth_scheme: null, auth_credentials: null, ...extra }
}

/** What a config is right after it was saved. */
function fresh (c: NewPushConfig, seq: number, cursor: number, at: number): PushConfigRecord {
  return { ...c, seq, created_at: at, updated_at: at, cursor, delivered: 0, attempts: 0, last_status: null, last_error: null, next_attempt_at: at, state: 'active', lease_token: null, lease_expires_at: null }
}

const seqs = (claimed: ClaimedPushConfig[]): number[] => claimed.map((c) => c.seq)

for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} store: the A2APushStore contract`, async (t) => {
    t.test('a config starts at the start of its task\'s journal or where it stands; get, list and delete', async (t) => {
      const f = await make(t)
      if (f === undefined) return
      const { store } = f
      await f.run('r1')
      await f.run('r2')
      for (const ord of [1, 2, 3]) await f.journal('r1', ord)
      const a = await store.save(config('r1', 'a', { auth_scheme: 'Bearer', auth_credentials: 'secret' }), 'start', T)
      t.same(a, fresh(config('r1', 'a', { auth_scheme: 'Bearer', auth_credentials: 'secret' }), a.seq, 0, T), 'from the start: the task as submitted comes first')
      const b = await store.save(config('r1', 'b'), 'now', T + 1)
      t.same(b, fresh(config('r1', 'b'), b.seq, 3, T + 1), 'from now: after the last journaled packet')
      t.ok(b.seq > a.seq)
      const c = await store.save(config('r2', 'a'), 'now', T)
      t.equal(c.cursor, 0, 'a task with no journal yet starts at 0')
      t.same(await store.get('r1', 'a'), a)
      t.equal(await store.get('r1', 'nope'), undefined)
      t.equal(await store.get('r3', 'a'), undefined)
      t.same(await store.list('r1'), [a, b], 'oldest first')
      t.same(await store.list('r3'), [])
      t.equal(await store.delete('r1', 'a'), true)
      t.equal(await store.delete('r1', 'a'), false, 'deleted once')
      t.same(await store.list('r1'), [b])
      t.same(await store.list('r2'), [c], 'another task\'s config of the same id stays')
    })

    t.test('saving a config of the same id replaces its URL and credentials, keeps its delivery, and tries a failed one again', async (t) => {
      const f = await make(t)
      if (f === undefined) return
      const { store } = f
      await f.run('r1')
      for (const ord of [1, 2, 3]) await f.journal('r1', ord)
      const first = await store.save(config('r1', 'a'), 'start', T)
      const [held] = await store.claim(T, 1000, 10)
      t.ok(await store.advance(first.seq, held?.lease_token as string, { cursor: 2, delivered: 2, status: 200 }, T + 1000))
      t.ok(await store.fail(first.seq, held?.lease_token as string, { status: 500, error: 'gave up', retryAt: null }))
      t.match(await store.get('r1', 'a'), { state: 'failed', attempts: 1, last_error: 'gave up', last_status: 500 })
      const again = await store.save(config('r1', 'a', { url: 'https://example.com/new', token: 'new-token', auth_scheme: 'Basic', auth_credentials: 'x', created_by: 'admin' }), 'now', T + 5)
      t.same(again, {
        ...first,
        url: 'https://example.com/new',
        token: 'new-token',
        auth_scheme: 'Basic',
        auth_credentials: 'x',
        created_by: 'admin',
        updated_at: T + 5,
        cursor: 2,
        delivered: 2,
        last_status: 500,
        next_attempt_at: T + 5,
        state: 'active'
      }, 'the same seq and creation, its cursor and count kept, failures cleared, due now')
      t.same(await store.list('r1'), [again], 'still one config')
    })

    t.test('a claim takes configs with something to push, due and not leased elsewhere, each under a token of its own, soonest due first', async (t) => {
      const f = await make(t)
      if (f === undefined) return
      const { store } = f
      await f.run('r1')
      await f.journal('r1', 1)
      const a = await store.save(config('r1', 'a'), 'start', T)
      const b = await store.save(config('r1', 'b'), 'now', T)
      const later = await store.save(config('r1', 'later'), 'start', T + 50)
      t.same(await store.claim(T - 1, 1000, 10), [], 'none due yet')
      const first = await store.claim(T, 1000, 1)
      t.same(seqs(first), [a.seq], 'up to the limit, oldest first')
      t.match(first[0], { ...a, lease_token: String, lease_expires_at: T + 1000, run_state: 'running' })
      const second = await store.claim(T + 50, 1000, 10)
      t.same(seqs(second), [b.seq, later.seq], 'what is leased is not taken again; by due time, then age')
      t.not(second[0]?.lease_token, first[0]?.lease_token, 'each claim its own token')
      t.not(second[0]?.lease_token, second[1]?.lease_token)
      t.match(await store.get('r1', 'a'), { lease_token: first[0]?.lease_token, lease_expires_at: T + 1000 })
      // b has pushed the task and everything journaled: nothing to push until the journal grows or the run ends
      t.ok(await store.advance(b.seq, second[0]?.lease_token as string, { cursor: 1, delivered: 1, status: 200 }, T + 1050))
      t.ok(await store.release(b.seq, second[0]?.lease_token as string))
      t.same(await store.claim(T + 100, 1000, 10), [], 'nothing new for b; a and later still leased')
      await f.journal('r1', 2)
      t.same(seqs(await store.claim(T + 100, 1000, 10)), [b.seq], 'a packet after its cursor')
      const retaken = await store.claim(T + 1000, 1000, 10)
      t.same(seqs(retaken), [a.seq], 'a lapsed lease is anyone\'s')
      t.not(retaken[0]?.lease_token, first[0]?.lease_token, 'under a new token')
    })

    t.test('a config whose task ended is claimed with nothing after its cursor; done and failed ones never', async (t) => {
      const f = await make(t)
      if (f === undefined) return
      const { store } = f
      await f.run('r1')
      await f.journal('r1', 4)
      const open = await store.save(config('r1', 'open'), 'now', T)
      const done = await store.save(config('r1', 'done'), 'now', T)
      const failed = await store.save(config('r1', 'failed'), 'now', T)
      const held = await store.claim(T, 1000, 10)
      t.same(seqs(held), [open.seq, done.seq, failed.seq])
      const token = (seq: number): string => held.find((c) => c.seq === seq)?.lease_token as string
      for (const c of [open, done, failed]) t.ok(await store.advance(c.seq, token(c.seq), { cursor: 4, delivered: 1, status: null }, T + 1000))
      t.ok(await store.release(open.seq, token(open.seq)))
      t.ok(await store.finish(done.seq, token(done.seq)))
      t.ok(await store.fail(failed.seq, token(failed.seq), { status: 410, error: 'gone', retryAt: null }))
      t.same(await store.claim(T + 1, 1000, 10), [], 'running, nothing new')
      await f.end('r1')
      const ended = await store.claim(T + 1, 1000, 10)
      t.same(seqs(ended), [open.seq], 'the end is pushed; done and failed stay put')
      t.equal(ended[0]?.run_state, 'ended')
      t.match(await store.get('r1', 'done'), { state: 'done', lease_token: null, lease_expires_at: null })
    })

    t.test('every write of a holder is fenced by its token: one whose lease was taken changes nothing', async (t) => {
      const f = await make(t)
      if (f === undefined) return
      const { store } = f
      await f.run('r1')
      for (const ord of [1, 2, 3]) await f.journal('r1', ord)
      const c = await store.save(config('r1', 'a'), 'start', T)
      const [mine] = await store.claim(T, 1000, 10)
      const token = mine?.lease_token as string
      t.equal(await store.advance(c.seq, 'forged', { cursor: 3, delivered: 9, status: 200 }, T + 5000), false, 'another token')
      t.ok(await store.advance(c.seq, token, { cursor: 1, delivered: 1, status: 202 }, T + 2000))
      t.match(await store.get('r1', 'a'), { cursor: 1, delivered: 1, last_status: 202, attempts: 0, lease_token: token, lease_expires_at: T + 2000 }, 'the lease extended')
      t.ok(await store.advance(c.seq, token, { cursor: 2, delivered: 1, status: null }, T + 2500))
      t.match(await store.get('r1', 'a'), { cursor: 2, last_status: 202 }, 'a packet passed over keeps the last status')
      t.ok(await store.fail(c.seq, token, { status: 503, error: 'busy', retryAt: T + 3000 }))
      t.match(await store.get('r1', 'a'), { attempts: 1, last_status: 503, last_error: 'busy', next_attempt_at: T + 3000, state: 'active', lease_token: null, lease_expires_at: null }, 'a retry waits, its lease released')
      t.equal(await store.advance(c.seq, token, { cursor: 3, delivered: 2, status: 200 }, T + 5000), false, 'a released lease is gone')
      t.equal(await store.nextRetry(T), T + 3000)
      const [next] = await store.claim(T + 3000, 1000, 10)
      t.ok(await store.advance(c.seq, next?.lease_token as string, { cursor: 3, delivered: 2, status: 200 }, T + 4000))
      t.match(await store.get('r1', 'a'), { attempts: 0, last_error: null, last_status: 200 }, 'a success clears the failures')
      t.same(await store.claim(T + 4000, 1000, 10), [], 'its lease lapsed, but nothing is left to push')
      await f.end('r1')
      const [stolen] = await store.claim(T + 4000, 1000, 10)
      t.ok(stolen !== undefined && stolen.lease_token !== next?.lease_token, 'the run ended: another process takes it')
      const old = next?.lease_token as string
      t.equal(await store.advance(c.seq, old, { cursor: 9, delivered: 9, status: 200 }, T + 9000), false)
      t.equal(await store.fail(c.seq, old, { status: 500, error: 'x', retryAt: null }), false)
      t.equal(await store.finish(c.seq, old), false)
      t.equal(await store.release(c.seq, old), false)
      t.match(await store.get('r1', 'a'), { cursor: 3, delivered: 2, state: 'active', lease_token: stolen?.lease_token }, 'nothing the old holder did counted')
      t.ok(await store.finish(c.seq, stolen?.lease_token as string))
      t.equal(await store.release(c.seq, stolen?.lease_token as string), false, 'finished: the lease is gone')
      t.ok(await store.delete('r1', 'a'))
      t.equal(await store.advance(c.seq, stolen?.lease_token as string, { cursor: 3, delivered: 2, status: 200 }, T), false, 'a deleted config takes no write')
    })

    t.test('nextRetry: the soonest active config waiting past now', async (t) => {
      const f = await make(t)
      if (f === undefined) return
      const { store } = f
      await f.run('r1')
      t.equal(await store.nextRetry(T), undefined, 'none')
      await store.save(config('r1', 'now'), 'start', T)
      t.equal(await store.nextRetry(T), undefined, 'due now is not waiting')
      const later = await store.save(config('r1', 'later'), 'start', T)
      const failed = await store.save(config('r1', 'failed'), 'start', T)
      const held = await store.claim(T, 1000, 10)
      const token = (seq: number): string => held.find((c) => c.seq === seq)?.lease_token as string
      await store.fail(later.seq, token(later.seq), { status: null, error: 'refused', retryAt: T + 700 })
      await store.fail(failed.seq, token(failed.seq), { status: null, error: 'refused', retryAt: null })
      t.equal(await store.nextRetry(T), T + 700)
      t.equal(await store.nextRetry(T + 700), undefined)
    })

    t.test('the delivery state: configs after a cursor, a page at a time, by owner, task or state, with the updates to come', async (t) => {
      const f = await make(t)
      if (f === undefined) return
      const { store } = f
      await f.run('r1')
      await f.run('r2')
      for (const ord of [1, 2, 3, 4]) await f.journal('r1', ord)
      const a = await store.save(config('r1', 'a'), 'start', T)
      const b = await store.save(config('r1', 'b', { owner_key: 'k2' }), 'now', T)
      const c = await store.save(config('r2', 'c'), 'start', T)
      const held = await store.claim(T, 1000, 10)
      const token = (seq: number): string => held.find((x) => x.seq === seq)?.lease_token as string
      t.ok(await store.advance(a.seq, token(a.seq), { cursor: 1, delivered: 2, status: 200 }, T + 1000))
      t.ok(await store.advance(c.seq, token(c.seq), { cursor: 0, delivered: 1, status: 200 }, T + 1000))
      t.ok(await store.finish(c.seq, token(c.seq)))
      const rows = await store.deliveries({})
      t.same(rows, [
        { seq: a.seq, id: 'a', task_id: 'task-r1', agent_id: 'agent', url: 'https://example.com/a', state: 'active', delivered: 2, pending: 3, attempts: 0, last_status: 200, last_error: null, next_attempt_at: T, created_at: T },
        { seq: b.seq, id: 'b', task_id: 'task-r1', agent_id: 'agent', url: 'https://example.com/b', state: 'active', delivered: 0, pending: 1, attempts: 0, last_status: null, last_error: null, next_attempt_at: T, created_at: T },
        { seq: c.seq, id: 'c', task_id: 'task-r2', agent_id: 'agent', url: 'https://example.com/c', state: 'done', delivered: 1, pending: 0, attempts: 0, last_status: 200, last_error: null, next_attempt_at: T, created_at: T }
      ], 'pending: packets after the cursor, and the task itself while not pushed; none once done; no secrets')
      t.same((await store.deliveries({ after: a.seq })).map((r) => r.id), ['b', 'c'])
      t.same((await store.deliveries({ limit: 1 })).map((r) => r.id), ['a'])
      t.same((await store.deliveries({ viewer: { owner: 'k2' } })).map((r) => r.id), ['b'])
      t.same((await store.deliveries({ taskId: 'task-r2' })).map((r) => r.id), ['c'])
      t.same((await store.deliveries({ state: 'active', viewer: { owner: 'k1' } })).map((r) => r.id), ['a'])
      t.same(await store.deliveries({ state: 'failed' }), [])
    })

    t.test('instances claiming at once never hold one config both, and between them take every one', async (t) => {
      const f = await make(t)
      if (f === undefined) return
      const { store } = f
      const other = await f.another()
      const CONFIGS = 40
      await f.run('r1')
      for (let i = 0; i < CONFIGS; i++) await store.save(config('r1', `c${i}`), 'start', T)
      const taken: number[][] = [[], []]
      for (let round = 0; round < CONFIGS; round++) {
        const got = await Promise.all([store.claim(T, 60_000, 3), other.claim(T, 60_000, 3)])
        got.forEach((claimed, i) => { taken[i]?.push(...seqs(claimed)) })
        if (got.every((claimed) => claimed.length === 0)) break
      }
      const all = taken.flat()
      t.equal(all.length, CONFIGS, 'every config claimed')
      t.equal(new Set(all).size, CONFIGS, 'none by both')
      t.ok(taken.every((mine) => mine.length > 0), `both took some: ${taken.map((mine) => mine.length).join(', ')}`)
    })
  })
}

t.test('postgres store: a task\'s configs listed inside a transaction are held against another instance\'s save until it ends', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const store = new PgPushStore(pool)
  await pool.query(RUN, ['r1'])
  const order: string[] = []
  let listed!: () => void
  const holding = new Promise<void>((resolve) => { listed = resolve })
  let finish!: () => void
  const release = new Promise<void>((resolve) => { finish = resolve })
  const first = inTransaction(pool, async (client) => {
    const known = await store.listIn(client, 'r1')
    listed()
    await release
    order.push(`first saw ${known.length}`)
    await store.saveIn(client, config('r1', 'a'), 'start', T)
  })
  await holding
  const second = inTransaction(pool, async (client) => {
    const known = await store.listIn(client, 'r1')
    order.push(`second saw ${known.length}`)
    await store.deleteIn(client, 'r1', 'nothing')
  })
  // let the first go on only once the second waits for its lock
  for (const deadline = Date.now() + 30_000; ;) {
    const { rows } = await pool.query<{ waiting: number }>(`SELECT count(*)::integer AS waiting FROM pg_locks
      WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, [PG_LOCKS.pushConfigs])
    if (rows[0]?.waiting === 1) break
    if (Date.now() > deadline) throw new Error('the second instance never waited for the task\'s lock')
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  t.same(order, [], 'neither has gone on')
  finish()
  await Promise.all([first, second])
  t.same(order, ['first saw 0', 'second saw 1'])
})
