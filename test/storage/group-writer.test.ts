import t from 'tap'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { AH_ERR_STORAGE_BUSY } from '../../src/errors.js'
import { DB_FILE, openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteGroupWriter, type CommitStats } from '../../src/storage/sqlite/group-writer.js'
import { tempDataDir } from '../helper.js'
import { holdDbLock } from '../lock-holder.js'

/** A database with a scratch table, a group writer over it, and a second connection (another process's view). */
function setup (t: Parameters<typeof tempDataDir>[0], budgetMs = 2000) {
  const dir = tempDataDir(t)
  const db = openDatabase(dir, { busyTimeoutMs: 10 })
  db.exec('CREATE TABLE scratch (id INTEGER PRIMARY KEY, v TEXT NOT NULL)')
  const commits: CommitStats[] = []
  const writer = new SqliteGroupWriter(db, { budgetMs, onCommit: (s) => { commits.push(s) } })
  const other = new Database(join(dir, DB_FILE), { readonly: true })
  t.teardown(() => { other.close(); db.close() })
  const insert = db.prepare('INSERT INTO scratch (id, v) VALUES (?, ?)')
  const seen = (id: number): boolean => other.prepare('SELECT 1 FROM scratch WHERE id = ?').get(id) !== undefined
  return { dir, db, writer, commits, insert, seen }
}

t.test('every write queued in one turn goes into one commit, and each is acknowledged only once another connection can read it', async (t) => {
  const { writer, commits, insert, seen } = setup(t)
  const acknowledged: boolean[] = []
  const writes = Array.from({ length: 50 }, async (_, i) => {
    const id = await writer.write(() => { insert.run(i, `row ${i}`); return i })
    acknowledged.push(seen(id))
    return id
  })
  t.equal(writer.pending, 50, 'nothing is written in the turn that queued it')
  t.same(await Promise.all(writes), Array.from({ length: 50 }, (_, i) => i), 'each gets its own result')
  t.same(commits, [{ writes: 50, failed: 0 }], 'one transaction for the turn')
  t.ok(acknowledged.every(Boolean), 'every acknowledged write was visible to another connection')
})

t.test('a write that throws is rolled back alone; the others in its turn commit', async (t) => {
  const { db, writer, commits, insert } = setup(t)
  const results = await Promise.allSettled([
    writer.write(() => insert.run(1, 'a')),
    writer.write(() => { insert.run(2, 'half done'); throw new Error('the agent changed its mind') }),
    writer.write(() => insert.run(1, 'duplicate key')),
    writer.write(() => insert.run(3, 'c'))
  ])
  t.same(results.map((r) => r.status), ['fulfilled', 'rejected', 'rejected', 'fulfilled'])
  t.match((results[1] as PromiseRejectedResult).reason, { message: 'the agent changed its mind' })
  t.match((results[2] as PromiseRejectedResult).reason, { code: 'SQLITE_CONSTRAINT_PRIMARYKEY' })
  t.same(db.prepare('SELECT id, v FROM scratch ORDER BY id').all(), [{ id: 1, v: 'a' }, { id: 3, v: 'c' }], 'the failed writes left nothing behind')
  t.same(commits, [{ writes: 4, failed: 2 }])
})

t.test('writes queued while a commit resolves go into the next turn\'s commit', async (t) => {
  const { writer, commits, insert } = setup(t)
  await writer.write(() => insert.run(1, 'first'))
  const chained = await writer.write(() => insert.run(2, 'second')).then(async () => await writer.write(() => insert.run(3, 'third')))
  t.equal(chained.changes, 1)
  t.same(commits.map((c) => c.writes), [1, 1, 1])
})

t.test('another process holding the lock: writes wait without blocking the event loop and commit once it is free', async (t) => {
  const { dir, writer, commits, insert, seen } = setup(t, 10_000)
  const holder = await holdDbLock(t, dir)
  const write = writer.write(() => insert.run(7, 'waited'))
  // the loop keeps turning while the write waits: 20 timers fire one after another
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setTimeout(resolve, 5))
  t.equal(seen(7), false, 'not written while the lock is held')
  t.equal(commits.length, 0)
  await holder.release()
  await write
  t.equal(seen(7), true, 'written once the lock was free')
})

t.test('a write that cannot get the lock within its budget fails with AH_ERR_STORAGE_BUSY; a later one succeeds', async (t) => {
  const { dir, writer, insert, seen } = setup(t, 150)
  const holder = await holdDbLock(t, dir)
  await t.rejects(writer.write(() => insert.run(1, 'too late')), AH_ERR_STORAGE_BUSY)
  t.equal(writer.pending, 0, 'the refused write is not kept')
  await holder.release()
  await writer.write(() => insert.run(2, 'in time'))
  t.equal(seen(1), false, 'the refused write never happened')
  t.equal(seen(2), true)
})

t.test('close() commits what is queued at once, and later writes commit synchronously', async (t) => {
  const { writer, insert, seen } = setup(t)
  const queued = writer.write(() => insert.run(1, 'queued'))
  writer.close()
  t.equal(seen(1), true, 'committed by close, before any later turn')
  await queued
  const after = writer.write(() => insert.run(2, 'after close'))
  t.equal(seen(2), true, 'written in the call')
  await after
})

t.test('commitNow() commits the queue in the call; while another process holds the lock it cannot, and the queue waits', async (t) => {
  const { dir, writer, commits, insert, seen } = setup(t, 10_000)
  const first = writer.write(() => insert.run(1, 'now'))
  t.equal(writer.commitNow(), true)
  t.equal(seen(1), true, 'committed before the turn ended')
  await first
  t.equal(writer.commitNow(), true, 'nothing queued: nothing to wait for')
  const holder = await holdDbLock(t, dir)
  const second = writer.write(() => insert.run(2, 'later'))
  t.equal(writer.commitNow(), false, 'the lock is held elsewhere')
  t.equal(writer.commitNow(), false, 'and the queue is backing off')
  await holder.release()
  await second
  t.equal(seen(2), true)
  t.same(commits.map((c) => c.writes), [1, 1])
})
