import t from 'tap'
import Database from 'better-sqlite3'
import { join } from 'node:path'
import { DB_FILE, migrate, openDatabase } from '../../src/storage/sqlite/database.js'
import { MIGRATIONS } from '../../src/storage/sqlite/migrations.js'
import { SqliteAuditLog } from '../../src/storage/sqlite/audit.js'
import { AUDIT_PROGRESS_ROWS } from '../../src/storage/audit.js'
import { tempDataDir } from '../helper.js'

t.test('verify tells its progress every AUDIT_PROGRESS_ROWS rows, against the last row id', async (t) => {
  const db = openDatabase(tempDataDir(t))
  t.teardown(() => db.close())
  const audit = new SqliteAuditLog(db)
  const told: Array<[number, number]> = []
  t.match(audit.verify([], { onProgress: (rows, total) => { told.push([rows, total]) } }), { ok: true, rows: 0 })
  t.same(told, [], 'an empty log: nothing to tell')
  const rows = 2 * AUDIT_PROGRESS_ROWS + 500
  db.transaction(() => {
    for (let i = 1; i <= rows; i++) audit.append({ actor: 'a', action: 'assist', resource: 'agent', success: true })
  })()
  const result = audit.verify([], { onProgress: (rows, total) => { told.push([rows, total]) } })
  t.match(result, { ok: true, rows })
  t.same(told, [[AUDIT_PROGRESS_ROWS, rows], [2 * AUDIT_PROGRESS_ROWS, rows]])
  t.same({ ...audit.verify(), seconds: 0, rows_per_second: 0 }, { ...result, seconds: 0, rows_per_second: 0 }, 'the verdict is the same without a listener')
})

t.test('migrate tells each pending step before applying it, and nothing when none is pending', async (t) => {
  const dir = tempDataDir(t)
  // a database as the code of schema 2 left it
  const raw = new Database(join(dir, DB_FILE))
  raw.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)')
  for (const step of MIGRATIONS.slice(0, 2)) {
    raw.exec(step.sql)
    raw.prepare('INSERT INTO schema_migrations VALUES (?, ?, ?)').run(step.version, step.description, 'then')
  }
  const told: Array<{ version: number, index: number, pending: number, applied: number }> = []
  const applied = (): number => (raw.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number }).v
  t.same(migrate(raw, (step, index, pending) => { told.push({ version: step.version, index, pending, applied: applied() }) }), MIGRATIONS.slice(2).map((m) => m.version))
  raw.close()
  const pending = MIGRATIONS.length - 2
  t.same(told, MIGRATIONS.slice(2).map((m, index) => ({ version: m.version, index, pending, applied: m.version - 1 })), 'each step told before it is applied')
  const again: number[] = []
  openDatabase(dir, { onMigration: (step) => { again.push(step.version) } }).close()
  t.same(again, [], 'an up-to-date database tells nothing')
  const fresh: Array<[string, number]> = []
  openDatabase(tempDataDir(t), { onMigration: (step, index) => { fresh.push([step.description, index]) } }).close()
  t.same(fresh, MIGRATIONS.map((m, i) => [m.description, i]), 'openDatabase passes it on')
})
