import { existsSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { auditKeysRetired, loadConfig } from '../config.js'
import { DB_FILE } from '../storage/sqlite/database.js'
import { CHECKPOINT_FILE, parseCheckpoint, readCheckpoints, type FoundCheckpoint } from '../storage/audit-checkpoints.js'
import { AuditKeyring } from '../storage/audit-key.js'
import { SqliteAuditLog } from '../storage/sqlite/audit.js'
import { type AuditStore, type AuditVerification } from '../storage/audit.js'
import { databaseName, openAuditReader, PgAuditLog } from '../storage/postgres/audit.js'
import type { CommandIo } from './shared.js'

/**
 * `audit verify`: the log of DATA_DIR (of DATABASE_URL when set), opened read-only, held against
 * the checkpoints beside it (DATA_DIR/audit-checkpoints.jsonl) and those given (`--checkpoint
 * '<json>'`, `--checkpoint-file <jsonl>`: copies kept elsewhere; with PostgreSQL, the other
 * instances' checkpoint files). Exit 0 when intact, 1 when not, 2 when there is nothing to verify
 * (or the database cannot be reached).
 */
export async function auditVerify (values: { checkpoint?: string[], 'checkpoint-file'?: string[] }, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  const config = loadConfig(env)
  const file = join(config.DATA_DIR, DB_FILE)
  const postgres = config.DATABASE_URL !== ''
  if (!postgres && !existsSync(file)) { io.err(`no audit database at ${file}: is --data-dir (or DATA_DIR) right?`); return 2 }
  const checkpoints: FoundCheckpoint[] = []
  const problems: string[] = []
  for (const path of [join(config.DATA_DIR, CHECKPOINT_FILE), ...(values['checkpoint-file'] ?? [])]) {
    if (path !== join(config.DATA_DIR, CHECKPOINT_FILE) && !existsSync(path)) { io.err(`no checkpoint file at ${path}`); return 2 }
    const read = readCheckpoints(path)
    checkpoints.push(...read.checkpoints)
    problems.push(...read.problems)
  }
  for (const [i, text] of (values.checkpoint ?? []).entries()) {
    const given = parseCheckpoint(text, `--checkpoint #${i + 1}`)
    if (given === undefined) { io.err(`--checkpoint #${i + 1} is not a checkpoint: give the JSON of GET /v1/audit/checkpoint (at least {"rows": N, "head": "<hash>"})`); return 2 }
    checkpoints.push(given)
  }
  const keyring = new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config))
  let audit: AuditStore
  let close: () => Promise<void>
  if (postgres) {
    const where = databaseName(config.DATABASE_URL)
    let pool
    try {
      pool = await openAuditReader(config.DATABASE_URL)
    } catch (err) {
      io.err(`cannot read the audit log at ${where}: ${(err as Error).message}`)
      return 2
    }
    if (pool === undefined) { io.err(`no audit log in ${where}: is DATABASE_URL right?`); return 2 }
    const opened = pool
    audit = await PgAuditLog.open(opened, keyring, { readOnly: true })
    close = async () => { await opened.end() }
  } else {
    const db = new Database(file, { readonly: true, fileMustExist: true })
    audit = new SqliteAuditLog(db, keyring, { readOnly: true })
    close = async () => { db.close() }
  }
  try {
    const onProgress = io.progress === undefined ? undefined : (rows: number, total: number) => { io.progress?.update(rows, total, 'verifying audit rows') }
    let verdict: AuditVerification
    // the line is cleared before the verdict, which would otherwise be printed after it on the same row
    try {
      verdict = await audit.verify(checkpoints, { onProgress, checkpointFile: join(config.DATA_DIR, CHECKPOINT_FILE), problems })
    } finally {
      io.progress?.end()
    }
    io.out(JSON.stringify(verdict))
    if (verdict.ok && verdict.keyed_rows < verdict.rows) io.err(`${verdict.rows - verdict.keyed_rows} rows are not signed (written without AUDIT_KEY): they are checked against accidents and the checkpoints only`)
    return verdict.ok ? 0 : 1
  } finally {
    await close()
  }
}
