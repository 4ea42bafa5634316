import t from 'tap'
import Database from 'better-sqlite3'
import { join } from 'node:path'
import { DB_FILE, migrate, openDatabase, SCHEMA_VERSION } from '../../src/storage/database.js'
import { buildApp } from '../../src/app.js'
import { MIGRATIONS } from '../../src/storage/migrations.js'
import { tempDataDir, testConfig } from '../helper.js'

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

t.test('a database from a newer version refuses to open, and the app refuses to boot', async (t) => {
  const dir = tempDataDir(t)
  openDatabase(dir).close()
  const raw = new Database(join(dir, DB_FILE))
  raw.prepare("INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, 'from the future', '2030-01-01')").run(SCHEMA_VERSION + 1)
  raw.close()
  t.throws(() => openDatabase(dir), { code: 'AH_ERR_STORAGE_SCHEMA_TOO_NEW', message: new RegExp(`schema version ${SCHEMA_VERSION + 1}`) })
  await t.rejects(buildApp(testConfig(t, { DATA_DIR: dir })), { code: 'AH_ERR_STORAGE_SCHEMA_TOO_NEW' })
})
