import { existsSync } from 'node:fs'
import Database from 'better-sqlite3'
import { AUDIT_GENESIS } from '../audit.js'

/** better-sqlite3's most pages per step: the whole database in one step, so in one read transaction. */
const ALL_PAGES = 0x7fffffff

/**
 * The point in time of a backup's database: its last audit row (a checkpoint of the copy:
 * `audit verify --checkpoint '{"rows":…,"head":"…"}'` holds a log to it) and its runs.
 */
export interface BackupPoint {
  audit: { rows: number, head: string, at: string | null }
  runs: { count: number, last_started_at: string | null }
}

/**
 * The database at `file` copied to `target` through SQLite's online backup API, in one step: one
 * read transaction, so the copy is the database at one commit, with what the WAL holds, while the
 * server goes on writing (a reader in WAL mode blocks no writer). The copy is checked
 * (`quick_check`) and closed, and so needs no WAL of its own. Returns its pages and its point in time.
 */
export async function backupDatabase (file: string, target: string): Promise<{ pages: number, point: BackupPoint }> {
  const source = new Database(file, { readonly: true, fileMustExist: true })
  let pages: number
  try {
    source.pragma('busy_timeout = 5000')
    pages = (await source.backup(target, { progress: () => ALL_PAGES })).totalPages
  } finally {
    source.close()
  }
  const copy = new Database(target, { fileMustExist: true })
  let point: BackupPoint
  try {
    const check = copy.pragma('quick_check', { simple: true })
    if (check !== 'ok') throw new Error(`the copy of ${file} fails SQLite's quick_check: ${String(check)}`)
    const last = copy.prepare('SELECT audit_id, integrity_hash, timestamp FROM audit_log ORDER BY audit_id DESC LIMIT 1').get() as { audit_id: number, integrity_hash: string, timestamp: string } | undefined
    const runs = copy.prepare('SELECT count(*) AS count, max(started_at) AS last FROM runs').get() as { count: number, last: number | null }
    point = {
      audit: last === undefined ? { rows: 0, head: AUDIT_GENESIS, at: null } : { rows: last.audit_id, head: last.integrity_hash, at: last.timestamp },
      runs: { count: runs.count, last_started_at: runs.last === null ? null : new Date(runs.last).toISOString() }
    }
    copy.pragma('wal_checkpoint(TRUNCATE)')
  } finally {
    copy.close()
  }
  for (const leftover of ['-wal', '-shm']) {
    if (existsSync(target + leftover)) throw new Error(`the copy ${target} still has a ${leftover} file after it was closed`)
  }
  return { pages, point }
}
