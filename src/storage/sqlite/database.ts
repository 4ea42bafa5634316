import { ensureWritableDir } from '../data-dir.js'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { AH_ERR_STORAGE_SCHEMA_TOO_NEW } from '../../errors.js'
import { MIGRATIONS } from './migrations.js'
import type { MigrationProgress } from '../stores.js'

export type Db = Database.Database

/** The database file's name inside DATA_DIR. */
export const DB_FILE = 'agent-host.db'

/** The schema version this code writes (the last migration's). */
export const SCHEMA_VERSION = MIGRATIONS.at(-1)?.version ?? 0

/**
 * Apply the migrations the database lacks, each in its own immediate transaction, so several
 * processes booting on one DATA_DIR apply each step once. A database already at this schema is
 * only read: a process joining busy peers waits for no write lock. Refuses a database newer than the code.
 * @param onStep told before each step, only when there are steps to apply
 * @returns the versions applied now
 */
export function migrate (db: Db, onStep?: MigrationProgress): number[] {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)')
  const current = (): number => (db.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number | null }).v ?? 0
  const found = current()
  if (found > SCHEMA_VERSION) throw new AH_ERR_STORAGE_SCHEMA_TOO_NEW(db.name, found, SCHEMA_VERSION)
  const applied: number[] = []
  const pending = MIGRATIONS.filter((m) => m.version > found)
  for (const [index, step] of pending.entries()) {
    onStep?.({ version: step.version, description: step.description }, index, pending.length)
    db.transaction(() => {
      if (current() >= step.version) return
      db.exec(step.sql)
      db.prepare('INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)')
        .run(step.version, step.description, new Date().toISOString())
      applied.push(step.version)
    }).immediate()
  }
  return applied
}

/**
 * Open (creating if needed) `DATA_DIR/agent-host.db`: WAL journal, a busy timeout so that
 * processes sharing the file wait for each other, foreign keys on, the page cache, statement
 * journals in memory; then migrate. `pageSize` applies to a database created now (an existing
 * one keeps its own). `autoCheckpoint: false` leaves checkpoints to `storage/sqlite/checkpointer.ts`.
 * `onMigration` is told of each migration step applied (see {@link migrate}).
 */
export function openDatabase (dataDir: string, options: { busyTimeoutMs?: number, cacheKiB?: number, pageSize?: number, autoCheckpoint?: boolean, onMigration?: MigrationProgress } = {}): Db {
  ensureWritableDir(dataDir, DB_FILE)
  const db = new Database(join(dataDir, DB_FILE))
  try {
    // before WAL mode and the first table, or it has no effect
    if (options.pageSize !== undefined) db.pragma(`page_size = ${options.pageSize}`)
    db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`)
    db.pragma('journal_mode = WAL')
    db.pragma('synchronous = NORMAL')
    db.pragma('foreign_keys = ON')
    // each write of a group commit is a savepoint: its statement journal spilled to a temp file
    // past 64 KiB, ~17 KiB of every request's 69 KiB of disk writes (bench/assist.js)
    db.pragma('temp_store = MEMORY')
    db.pragma('temp_store = MEMORY')
    db.pragma(`cache_size = ${-(options.cacheKiB ?? 2000)}`)
    // a checkpointer (storage/sqlite/checkpointer.ts) copies the WAL instead of the commit that crosses 1 000 pages
    if (options.autoCheckpoint === false) db.pragma('wal_autocheckpoint = 0')
    migrate(db, options.onMigration)
  } catch (err) {
    db.close()
    throw err
  }
  return db
}
