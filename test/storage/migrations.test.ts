import t from 'tap'
import Database from 'better-sqlite3'
import { join } from 'node:path'
import { DB_FILE, migrate, openDatabase, SCHEMA_VERSION } from '../../src/storage/sqlite/database.js'
import { buildApp } from '../../src/app.js'
import { MIGRATIONS } from '../../src/storage/sqlite/migrations.js'
import { tempDataDir, testConfig, sqliteDb } from '../helper.js'

/** A database in `dir` as the code of schema `version` left it (to test the migrations after it). */
function databaseAt (dir: string, version: number): Database.Database {
  const raw = new Database(join(dir, DB_FILE))
  raw.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)')
  for (const step of MIGRATIONS.filter((m) => m.version <= version)) {
    raw.exec(step.sql)
    raw.prepare('INSERT INTO schema_migrations VALUES (?, ?, ?)').run(step.version, step.description, 'then')
  }
  return raw
}

t.test('a fresh database gets every table, WAL and foreign keys', async (t) => {
  const db = openDatabase(tempDataDir(t))
  t.teardown(() => db.close())
  const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type IN ('table') ORDER BY name").all() as Array<{ name: string }>).map((r) => r.name)
  for (const name of ['audit_head', 'audit_log', 'events', 'interactions', 'journal', 'runs', 'schema_migrations', 'session_values', 'sessions', 'tasks']) t.ok(tables.includes(name), name)
  t.equal(db.pragma('journal_mode', { simple: true }), 'wal')
  t.equal(db.pragma('foreign_keys', { simple: true }), 1)
  t.ok(Number(db.pragma('busy_timeout', { simple: true })) >= 1000)
  t.same(db.prepare('SELECT version FROM schema_migrations ORDER BY version').all(), MIGRATIONS.map((m) => ({ version: m.version })))
  t.equal(SCHEMA_VERSION, MIGRATIONS.length, 'versions are 1..n')
})

t.test('migrating again is a no-op', async (t) => {
  const dir = tempDataDir(t)
  openDatabase(dir).close()
  const db = openDatabase(dir)
  t.teardown(() => db.close())
  t.same(migrate(db), [])
  t.equal((db.prepare('SELECT count(*) AS n FROM schema_migrations').get() as { n: number }).n, MIGRATIONS.length)
})

t.test('a database at this schema opens while another process holds the write lock', async (t) => {
  const dir = tempDataDir(t)
  openDatabase(dir).close()
  const writer = new Database(join(dir, DB_FILE))
  t.teardown(() => writer.close())
  writer.exec('BEGIN IMMEDIATE')
  const db = openDatabase(dir, { busyTimeoutMs: 20 })
  t.teardown(() => db.close())
  t.equal((db.prepare('SELECT count(*) AS n FROM schema_migrations').get() as { n: number }).n, MIGRATIONS.length)
  writer.exec('ROLLBACK')
})

t.test('a database from a newer version refuses to open, and the app refuses to boot', async (t) => {
  const dir = tempDataDir(t)
  openDatabase(dir).close()
  const raw = new Database(join(dir, DB_FILE))
  raw.prepare("INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, 'from the future', '2030-01-01')").run(SCHEMA_VERSION + 1)
  raw.close()
  t.throws(() => openDatabase(dir), { code: 'AH_ERR_STORAGE_SCHEMA_TOO_NEW', message: new RegExp(`schema version ${SCHEMA_VERSION + 1}`) })
  await t.rejects(buildApp(testConfig(t, { DATA_DIR: dir })), { code: 'AH_ERR_STORAGE_SCHEMA_TOO_NEW' })
})

t.test('a journal keyed by request id (schema 6) is carried over to one keyed by run id, and cascades with its run', async (t) => {
  const dir = tempDataDir(t)
  const raw = databaseAt(dir, 6)
  const run = raw.prepare(`INSERT INTO runs (request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, started_at)
    VALUES (?, 'h', '{}', 's', 'a', 'm', 'ended', 'i', 1, 0)`)
  const frame = raw.prepare('INSERT INTO journal (request_id, ord, stream_id, seq, frame) VALUES (?, ?, ?, ?, ?)')
  for (const id of ['r-b', 'r-a']) {
    run.run(id)
    for (let ord = 1; ord <= 3; ord++) frame.run(id, ord, 'm', ord, `${id}:${ord}`)
  }
  raw.close()

  const db = openDatabase(dir)
  t.teardown(() => db.close())
  const journal = db.prepare('SELECT j.ord, j.count, j.frames FROM journal j JOIN runs r USING (run_id) WHERE r.request_id = ? ORDER BY j.ord')
  t.same(journal.all('r-b'), [1, 2, 3].map((ord) => ({ ord, count: 1, frames: `r-b:${ord}` })))
  t.same(journal.all('r-a'), [1, 2, 3].map((ord) => ({ ord, count: 1, frames: `r-a:${ord}` })))
  t.same(db.prepare('SELECT request_id FROM runs ORDER BY run_id').pluck().all(), ['r-b', 'r-a'], 'runs keep their order')
  t.same(db.pragma('foreign_key_check'), [])
  db.prepare("DELETE FROM runs WHERE request_id = 'r-b'").run()
  t.same(db.prepare('SELECT count(*) FROM journal').pluck().get(), 3, 'deleting a run deletes its journal')
})

t.test('interactions and values indexed under schema 7 are found by recall after migrating, and new ones join them', async (t) => {
  const dir = tempDataDir(t)
  const raw = databaseAt(dir, 7)
  raw.exec("INSERT INTO sessions (session_id, user_id, created_at, updated_at) VALUES ('s1', 'u', 'then', 'then')")
  const interaction = raw.prepare(`INSERT INTO interactions (request_id, session_id, agent_id, agent_request_id, root_request_id, timestamp, status, input, output)
    VALUES (?, 's1', 'a', ?, ?, 'then', 'done', ?, '{}')`)
  const fts = raw.prepare('INSERT INTO memory_fts (content, session_id, kind, ref) VALUES (?, ?, ?, ?)')
  interaction.run('r1', 'r1', 'r1', '{"query":"walrus tusks"}')
  raw.prepare('UPDATE interactions SET fts_rowid = ? WHERE request_id = ?').run(fts.run('{"query":"walrus tusks"} {}', 's1', 'interaction', 'r1').lastInsertRowid, 'r1')
  interaction.run('r2', 'r2', 'r2', '{"query":"walrus not indexed yet"}')
  const value = fts.run('colour "teal walrus"', 's1', 'value', 'colour').lastInsertRowid
  raw.prepare("INSERT INTO session_values (session_id, key, value, updated_at, fts_rowid) VALUES ('s1', 'colour', '\"teal walrus\"', 'then', ?)").run(value)
  raw.close()

  const app = await buildApp(testConfig(t, { DATA_DIR: dir }))
  t.teardown(() => app.close())
  const session = app.sessions.open('s1', { user_id: 'u', tier: 'free', locale: 'en' })
  t.same((await session.recall('walrus', 10)).map((h) => `${h.kind}:${h.ref}`).sort(), ['interaction:r1', 'interaction:r2', 'value:colour'])
  t.same(sqliteDb(app).prepare('SELECT count(*) FROM memory_fts WHERE content IS NOT NULL').pluck().get(), 0, 'the index keeps no copy of the text')
  await session.store('colour', 'plain walrus')
  await session.store('shape', 'round walrus')
  t.same((await session.recall('walrus', 10)).map((h) => `${h.kind}:${h.ref}`).sort(), ['interaction:r1', 'interaction:r2', 'value:colour', 'value:shape'])
  t.same(await session.recall('teal'), [], 'a replaced value is gone from the index')
})

t.test('task events stored before schema 10 are found by their task id after migrating', async (t) => {
  const dir = tempDataDir(t)
  const raw = databaseAt(dir, 9)
  const insert = raw.prepare("INSERT INTO events (id, kind, type, source, time, body) VALUES (?, ?, 'AGENT_RESULT', 's', 'then', ?)")
  insert.run('e1', 'task', '{"task_id":"t-1","outcome":"completed"}')
  insert.run('e2', 'cloudevent', '{"task_id":"t-1"}')
  insert.run('e3', 'task', 'not json')
  raw.close()
  const app = await buildApp(testConfig(t, { DATA_DIR: dir }))
  t.teardown(() => app.close())
  t.same((await app.events.list({ task_id: 't-1' })).map((e) => e.kind), ['task'], 'the task\'s own event; an agent\'s event that names it is not one')
})
