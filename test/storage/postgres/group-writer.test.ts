import t, { type Test } from 'tap'
import pg from 'pg'
import { openPostgres } from '../../../src/storage/postgres/database.js'
import { PgGroupWriter, WRITE_RANK, type PgWrite } from '../../../src/storage/postgres/group-writer.js'
import { pgDatabase } from '../../pg.js'

/** A migrated database with a table `n` of unique numbers, its pool, and what the writer told of each commit. */
async function setup (t: Test): Promise<{ pool: pg.Pool, writer: PgGroupWriter, commits: Array<{ writes: number, failed: number }> } | undefined> {
  const url = await pgDatabase(t)
  if (url === undefined) return undefined
  const pool = await openPostgres(url)
  const commits: Array<{ writes: number, failed: number }> = []
  const writer = new PgGroupWriter(pool, { onCommit: (stats) => { commits.push(stats) } })
  t.teardown(async () => {
    await writer.drain()
    await pool.end()
  })
  await pool.query('CREATE TABLE n (n integer PRIMARY KEY)')
  return { pool, writer, commits }
}

/** A write that inserts `n` and returns the id of the transaction it ran in. */
const insert = (n: number): PgWrite<string> => async (client) => {
  await client.query('INSERT INTO n (n) VALUES ($1)', [n])
  return (await client.query<{ x: string }>('SELECT txid_current()::text AS x')).rows[0]?.x as string
}

async function numbers (pool: pg.Pool): Promise<number[]> {
  return (await pool.query<{ n: number }>('SELECT n FROM n ORDER BY n')).rows.map((r) => r.n)
}

t.test('the writes of one turn share one transaction; a later turn\'s are another', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const turn = await Promise.all([s.writer.write(insert(1)), s.writer.write(insert(2)), s.writer.write(insert(3))])
  t.equal(new Set(turn).size, 1, 'one transaction id')
  const later = await s.writer.write(insert(4))
  t.not(later, turn[0])
  t.same(await numbers(s.pool), [1, 2, 3, 4])
  t.same(s.commits, [{ writes: 3, failed: 0 }, { writes: 1, failed: 0 }])
})

t.test('a write that fails fails alone: the batch is rolled back and the others rerun, each committed', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  await s.writer.write(insert(2))
  const results = await Promise.allSettled([s.writer.write(insert(1)), s.writer.write(insert(2)), s.writer.write(insert(3))])
  t.match(results, [{ status: 'fulfilled' }, { status: 'rejected', reason: { code: '23505' } }, { status: 'fulfilled' }], 'a duplicate key is the failing write\'s own error')
  const [one, , three] = results as Array<PromiseFulfilledResult<string>>
  t.not(one?.value, three?.value, 'rerun each in a transaction of its own')
  t.same(await numbers(s.pool), [1, 2, 3], 'nothing of the rolled-back batch is left twice, nothing lost')
  t.same(s.commits.at(-1), { writes: 3, failed: 1 })
})

t.test('a lone write that fails rejects with its error and is counted as failed', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  await t.rejects(s.writer.write(async (client) => await client.query('SELECT 1/0')), { code: '22012' })
  t.same(s.commits, [{ writes: 1, failed: 1 }])
  t.equal(await s.writer.write(async (client) => (await client.query<{ x: number }>('SELECT 1 AS x')).rows[0]?.x), 1, 'the connection serves the next write')
})

t.test('writes run in WRITE_RANK order within a batch, in their queued order within a rank', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const order: string[] = []
  const op = (name: string): PgWrite<void> => async (client) => { order.push(name); await client.query('SELECT 1') }
  await Promise.all([
    s.writer.write(op('audit 1'), WRITE_RANK.audit),
    s.writer.write(op('plain 1')),
    s.writer.write(op('events 1'), WRITE_RANK.events),
    s.writer.write(op('plain 2'), WRITE_RANK.plain),
    s.writer.write(op('audit 2'), WRITE_RANK.audit),
    s.writer.write(op('events 2'), WRITE_RANK.events)
  ])
  t.same(order, ['plain 1', 'plain 2', 'events 1', 'events 2', 'audit 1', 'audit 2'])
})

t.test('writes queued while a transaction is in flight wait for its commit, then go together in the next', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  let open!: () => void
  const gate = new Promise<void>((resolve) => { open = resolve })
  let started!: () => void
  const inFlight = new Promise<void>((resolve) => { started = resolve })
  const first = s.writer.write(async (client) => {
    const id = await insert(1)(client)
    started()
    await gate
    return id
  })
  await inFlight
  const second = s.writer.write(insert(2))
  const third = s.writer.write(insert(3))
  t.equal(s.writer.pending, 2, 'queued, not yet running')
  t.same(await numbers(s.pool), [], 'nothing is visible before the commit')
  open()
  const [a, b, c] = await Promise.all([first, second, third])
  t.not(a, b)
  t.equal(b, c)
  t.equal(s.writer.pending, 0)
  // the second transaction runs while the first one's COMMIT waits for its flush, on another
  // connection: either acknowledgement may come first (on a loaded machine the second's did)
  t.same([...s.commits].sort((x, y) => x.writes - y.writes), [{ writes: 1, failed: 0 }, { writes: 2, failed: 0 }])
})

t.test('drain waits until everything queued so far is committed', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  await s.writer.drain()
  t.pass('nothing queued: at once')
  const settled: number[] = []
  for (let i = 1; i <= 3; i++) s.writer.write(insert(i)).then(() => { settled.push(i) }, () => {})
  t.equal(s.writer.pending, 3)
  await s.writer.drain()
  t.equal(s.writer.pending, 0)
  t.same(await numbers(s.pool), [1, 2, 3])
  await new Promise((resolve) => setImmediate(resolve))
  t.same(settled.sort(), [1, 2, 3])
})

t.test('a connection that cannot be had rejects every write of the batch', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const u = new URL(url)
  // a port nothing listens on: the server refuses the connection
  u.port = '1'
  const pool = new pg.Pool({ connectionString: u.toString(), connectionTimeoutMillis: 5000 })
  t.teardown(async () => { await pool.end() })
  const writer = new PgGroupWriter(pool)
  const results = await Promise.allSettled([writer.write(async () => 1), writer.write(async () => 2, WRITE_RANK.audit)])
  t.match(results, [{ status: 'rejected', reason: { code: 'ECONNREFUSED' } }, { status: 'rejected', reason: { code: 'ECONNREFUSED' } }])
})

t.test('a connection lost mid-batch rejects every write of the batch, and the pool goes on with a new connection', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const results = await Promise.allSettled([
    s.writer.write(insert(1)),
    s.writer.write(async (client) => await client.query('SELECT pg_terminate_backend(pg_backend_pid())'))
  ])
  t.match(results, [{ status: 'rejected' }, { status: 'rejected' }])
  t.equal(results[0]?.status === 'rejected' && results[0].reason, results[1]?.status === 'rejected' && results[1].reason, 'the error that broke the transaction, for both')
  t.same(await numbers(s.pool), [], 'nothing committed')
  await s.writer.write(insert(2))
  t.same(await numbers(s.pool), [2])
})

t.test('a lone write whose connection is lost rejects, and the next write gets a new connection', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  await t.rejects(s.writer.write(async (client) => await client.query('SELECT pg_terminate_backend(pg_backend_pid())')))
  t.same(s.commits, [{ writes: 1, failed: 1 }])
  await s.writer.write(insert(1))
  t.same(await numbers(s.pool), [1])
})

t.test('the next turn runs while the previous one\'s COMMIT is awaited, and waits for it wherever they touch the same rows', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  await s.pool.query('CREATE TABLE counter (v integer NOT NULL)')
  await s.pool.query('INSERT INTO counter VALUES (0)')
  // a COMMIT that waits for the test: a deferred trigger on `n` takes an advisory lock the test holds
  await s.pool.query('CREATE FUNCTION held_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$')
  await s.pool.query('CREATE CONSTRAINT TRIGGER held AFTER INSERT ON n DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION held_commit()')
  const gate = await s.pool.connect()
  t.teardown(() => { gate.release() })
  await gate.query('SELECT pg_advisory_lock(4242)')
  const order: string[] = []
  const first = s.writer.write(async (client) => {
    await client.query('INSERT INTO n VALUES (1)')
    await client.query('UPDATE counter SET v = v + 1')
  }).then(() => { order.push('first committed') })
  let secondRunning!: () => void
  const running = new Promise<void>((resolve) => { secondRunning = resolve })
  // queued once the first is running: the next turn
  await new Promise((resolve) => setImmediate(resolve))
  const second = s.writer.write(async (client) => {
    order.push('second running')
    secondRunning()
    return (await client.query<{ v: number }>('UPDATE counter SET v = v * 10 RETURNING v')).rows[0]?.v
  })
  // bounded: a writer that waited for the first COMMIT would never run the second while the gate is shut
  let timer: NodeJS.Timeout | undefined
  const ran = await Promise.race([running.then(() => true), new Promise<boolean>((resolve) => { timer = setTimeout(() => { resolve(false) }, 15_000) })])
  clearTimeout(timer)
  t.ok(ran, 'the second turn runs before the first\'s COMMIT is acknowledged')
  t.same(order, ['second running'])
  await gate.query('SELECT pg_advisory_unlock(4242)')
  const [, v] = await Promise.all([first, second])
  t.equal(v, 10, 'the second waited for the first\'s row lock and saw its commit: (0 + 1) × 10, as one after the other')
  t.same(order, ['second running', 'first committed'])
  t.same(await numbers(s.pool), [1])
})
