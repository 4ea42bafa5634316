/**
 * The audit stores the contract and tamper suites run against (one contract, two stores): each a
 * fresh, empty log, what its command line needs to find it, and raw SQL on its database as an
 * attacker with the database's owner rights would write it.
 */
import type { Test } from 'tap'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteAuditLog } from '../../src/storage/sqlite/audit.js'
import { auditRowFromRaw, hashAuditRow, type AuditRawRow, type AuditRow, type AuditStore } from '../../src/storage/audit.js'
import { AuditKeyring } from '../../src/storage/audit-key.js'
import { PgAuditLog } from '../../src/storage/postgres/audit.js'
import { openPostgres } from '../../src/storage/postgres/database.js'
import { pgDatabase } from '../pg.js'
import { tempDataDir } from '../helper.js'

/** Raw SQL on a store's database, `?` for parameters on both. */
export interface RawSql {
  /** Statements without parameters, several at once. */
  exec: (sql: string) => Promise<void>
  run: (sql: string, ...params: unknown[]) => Promise<void>
  all: <T>(sql: string, ...params: unknown[]) => Promise<T[]>
  /** Take the append-only triggers out of the way, as an attacker would. */
  unguard: () => Promise<void>
}

export interface AuditSubject {
  kind: 'sqlite' | 'postgres'
  /** DATA_DIR: where this instance's checkpoint file goes (and, on SQLite, the database). */
  dir: string
  /** The setting that names the database (`DATABASE_URL`: empty for SQLite). */
  database: { DATABASE_URL: string }
  /** What `test/fixtures/scripts/audit-writer.ts` takes: the DATA_DIR or the URL. */
  target: string
  /** The log (`SqliteAuditLog` or `PgAuditLog.open`), with this keyring. */
  open: (keyring?: AuditKeyring, options?: { readOnly?: boolean }) => Promise<AuditStore>
  sql: RawSql
}

const numbered = (sql: string): string => {
  let n = 0
  return sql.replace(/\?/g, () => `$${++n}`)
}

/** A fresh log of each kind; postgres is undefined (and the test skipped, loudly) without a server. */
export const AUDIT_STORES: Record<'sqlite' | 'postgres', (t: Test) => Promise<AuditSubject | undefined>> = {
  sqlite: async (t) => {
    const dir = tempDataDir(t)
    const db = openDatabase(dir)
    t.teardown(() => { if (db.open) db.close() })
    return {
      kind: 'sqlite',
      dir,
      database: { DATABASE_URL: '' },
      target: dir,
      open: async (keyring = new AuditKeyring(''), options = {}) => new SqliteAuditLog(db, keyring, options),
      sql: {
        exec: async (sql) => { db.exec(sql) },
        run: async (sql, ...params) => { db.prepare(sql).run(...params) },
        all: async <T>(sql: string, ...params: unknown[]) => db.prepare(sql).all(...params) as T[],
        unguard: async () => { db.exec('DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete') }
      }
    }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const pool = await openPostgres(url)
    t.teardown(async () => { await pool.end() })
    return {
      kind: 'postgres',
      dir: tempDataDir(t),
      database: { DATABASE_URL: url },
      target: url,
      open: async (keyring = new AuditKeyring(''), options = {}) => await PgAuditLog.open(pool, keyring, options),
      sql: {
        exec: async (sql) => { await pool.query(sql) },
        run: async (sql, ...params) => { await pool.query(numbered(sql), params) },
        all: async <T>(sql: string, ...params: unknown[]) => (await pool.query(numbered(sql), params)).rows as T[],
        // a superuser's way round the append-only triggers (row and TRUNCATE alike)
        unguard: async () => { await pool.query('ALTER TABLE audit_log DISABLE TRIGGER ALL') }
      }
    }
  }
}

/** Every row of the log, oldest first, read with raw SQL. */
export const rows = async (sql: RawSql): Promise<AuditRow[]> => (await sql.all<AuditRawRow>('SELECT * FROM audit_log ORDER BY audit_id')).map(auditRowFromRaw)

/** What someone without the key can do after changing rows: rewrite them from `from` on as a plain SHA-256 chain, renumbered, and move the head. */
export async function rechain (sql: RawSql, from: number): Promise<void> {
  const all = await rows(sql)
  await sql.run('DELETE FROM audit_log WHERE audit_id >= ?', from)
  let previous = all.find((r) => r.audit_id === from - 1)?.integrity_hash ?? '0'.repeat(64)
  for (const [i, row] of all.filter((r) => r.audit_id >= from).entries()) {
    const { integrity_hash: _old, ...rest } = row
    const unhashed = { ...rest, audit_id: from + i, key_id: null, previous_hash: previous }
    const hash = hashAuditRow(unhashed) as string
    await sql.run(`INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, claimed_user, request_id, root_request_id, trace_id, details, key_id, previous_hash, integrity_hash)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, unhashed.audit_id, unhashed.timestamp, unhashed.actor, unhashed.action, unhashed.resource, unhashed.success ? 1 : 0, unhashed.claimed_user,
    unhashed.request_id, unhashed.root_request_id, unhashed.trace_id, unhashed.details === null ? null : JSON.stringify(unhashed.details), unhashed.key_id, unhashed.previous_hash, hash)
    previous = hash
  }
  const last = (await rows(sql)).at(-1)
  await sql.run('UPDATE audit_head SET audit_id = ?, integrity_hash = ? WHERE id = 1', last?.audit_id ?? 0, last?.integrity_hash ?? '0'.repeat(64))
}
