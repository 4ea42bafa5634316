/**
 * The audit stores the contract and tamper suites run against (one contract, two stores): each a
 * fresh, empty log, what its command line needs to find it, and raw SQL on its database as an
 * attacker with the database's owner rights would write it.
 */
import type { Test } from 'tap'
import { openDatabase } from '../../src/storage/database.js'
import { AuditLog, type AuditStore } from '../../src/storage/audit.js'
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
  /** The log (`AuditLog` or `PgAuditLog.open`), with this keyring. */
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
      open: async (keyring = new AuditKeyring(''), options = {}) => new AuditLog(db, keyring, options),
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
