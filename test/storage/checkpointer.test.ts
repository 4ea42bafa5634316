import t from 'tap'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { SqliteCheckpointer } from '../../src/storage/sqlite/checkpointer.js'
import { DB_FILE, openDatabase } from '../../src/storage/sqlite/database.js'
import { loadConfig } from '../../src/config.js'
import { build, tempDataDir, sqliteDb } from '../helper.js'
import { until } from '../socket.js'

t.test('a checkpointer copies the WAL into the database file from its worker thread, and checkpoints once more when closed', async (t) => {
  const dir = tempDataDir(t)
  const db = openDatabase(dir, { autoCheckpoint: false })
  t.teardown(() => { db.close() })
  t.equal(db.pragma('wal_autocheckpoint', { simple: true }), 0, 'the main connection never checkpoints by itself')
  db.exec('CREATE TABLE scratch (v TEXT)')
  const before = statSync(join(dir, DB_FILE)).size
  const insert = db.prepare('INSERT INTO scratch (v) VALUES (?)')
  db.transaction(() => { for (let i = 0; i < 2000; i++) insert.run('x'.repeat(500)) })()
  t.equal(statSync(join(dir, DB_FILE)).size, before, 'written to the WAL only')
  const checkpointer = new SqliteCheckpointer(join(dir, DB_FILE), 20)
  await until('a checkpoint', () => (checkpointer.last?.checkpointed ?? 0) > 0, 10_000)
  t.match(checkpointer.last, { busy: 0 })
  t.ok(statSync(join(dir, DB_FILE)).size > before + 500_000, 'the rows are in the database file')
  db.transaction(() => { for (let i = 0; i < 100; i++) insert.run('y') })()
  await checkpointer.close()
  const last = checkpointer.last as { log: number, checkpointed: number }
  t.ok(last.log > 0 && last.checkpointed === last.log, `closing copied every frame (${last.checkpointed} of ${last.log})`)
})

t.test('the server checkpoints from a worker by default, and with DB_CHECKPOINT_INTERVAL_MS=0 leaves it to SQLite', async (t) => {
  const app = await build(t)
  t.equal(sqliteDb(app).pragma('wal_autocheckpoint', { simple: true }), 0)
  t.equal(sqliteDb(app).pragma('cache_size', { simple: true }), -65536, 'DB_CACHE_KIB')
  const plain = await build(t, { DB_CHECKPOINT_INTERVAL_MS: '0', DB_CACHE_KIB: '4096' })
  t.equal(sqliteDb(plain).pragma('wal_autocheckpoint', { simple: true }), 1000)
  t.equal(sqliteDb(plain).pragma('cache_size', { simple: true }), -4096)
})

t.test('DB_PAGE_SIZE sets the page size of a new database; an existing one keeps its own', async (t) => {
  const dir = tempDataDir(t)
  const small = await build(t, { DATA_DIR: dir, DB_PAGE_SIZE: '1024' })
  t.equal(sqliteDb(small).pragma('page_size', { simple: true }), 1024)
  t.equal(sqliteDb(small).pragma('temp_store', { simple: true }), 2, 'statement journals stay in memory')
  await small.close()
  const again = await build(t, { DATA_DIR: dir, DB_PAGE_SIZE: '8192' })
  t.equal(sqliteDb(again).pragma('page_size', { simple: true }), 1024)
  t.equal(sqliteDb(await build(t)).pragma('page_size', { simple: true }), 4096, 'the default')
  t.throws(() => loadConfig({ DB_PAGE_SIZE: '3000' }), /DB_PAGE_SIZE/)
})

t.test('a checkpointer whose worker cannot open the database says so, and closing it still resolves', async (t) => {
  const failures: unknown[] = []
  const checkpointer = new SqliteCheckpointer('/nonexistent/dir/agent-host.db', 20, (err) => { failures.push(err) })
  await until('the failure', () => failures.length > 0, 10_000)
  t.match(failures[0], { message: /Cannot open database/ })
  await checkpointer.close()
  t.equal(checkpointer.last, undefined)
})

// regression (issue 28): a worker that failed after its app had closed the database was reported,
// and the storage plugin, told so, ran a pragma on the closed database: "The database connection is
// not open", thrown from the worker's error event, ended a whole group of test files
t.test('a worker that fails once closing has begun is not reported: there is nothing left to hand checkpoints back to', async (t) => {
  const failures: unknown[] = []
  const checkpointer = new SqliteCheckpointer('/nonexistent/dir/agent-host.db', 20, (err) => { failures.push(err) })
  await checkpointer.close()
  t.same(failures, [])
})
