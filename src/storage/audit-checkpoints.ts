import { closeSync, existsSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs'
import { join } from 'node:path'

/**
 * The checkpoint file's name inside DATA_DIR: beside the database on SQLite. With PostgreSQL
 * (`DATABASE_URL`) every instance keeps its own, in its own DATA_DIR, and never in the database:
 * whoever could cut rows from the log there could cut checkpoints too. They are all checkpoints of
 * the one chain, so any instance's file catches rows cut before its last checkpoint; `agent-host
 * audit verify` reads its own DATA_DIR's file and takes the others with `--checkpoint-file`.
 */
export const CHECKPOINT_FILE = 'audit-checkpoints.jsonl'

/** The audit log's size and head at a moment, signed with the audit key when there is one. */
export interface AuditCheckpoint {
  /** Rows in the log (the head's audit_id). */
  rows: number
  /** The last row's integrity_hash (the genesis value for an empty log). */
  head: string
  at: string
  /** The key that signed it; null: unsigned (no AUDIT_KEY). */
  key_id: string | null
  /** HMAC-SHA256 of the canonical `{ rows, head, at, key_id }`; null when unsigned. */
  signature: string | null
}

/** A checkpoint as read back, with where it came from (for messages). */
export type FoundCheckpoint = AuditCheckpoint & { source: string }

/** Append one checkpoint as a line to `DATA_DIR/audit-checkpoints.jsonl` (this instance's, with PostgreSQL), and fsync it. */
export function appendCheckpoint (dataDir: string, checkpoint: AuditCheckpoint): void {
  const fd = openSync(join(dataDir, CHECKPOINT_FILE), 'a', 0o600)
  try {
    writeSync(fd, `${JSON.stringify(checkpoint)}\n`)
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

const isCheckpoint = (value: unknown): value is AuditCheckpoint => {
  const c = value as Partial<AuditCheckpoint> | null
  return typeof c === 'object' && c !== null && Number.isSafeInteger(c.rows) && (c.rows as number) >= 0 && typeof c.head === 'string' && typeof c.at === 'string' &&
    (c.key_id === null || typeof c.key_id === 'string') && (c.signature === null || typeof c.signature === 'string')
}

/**
 * The checkpoints of a file, oldest first; a line that is not a checkpoint is a problem (the file
 * is append-only: nothing but whole checkpoints belongs in it). A missing file has none.
 */
export function readCheckpoints (file: string): { checkpoints: FoundCheckpoint[], problems: string[] } {
  if (!existsSync(file)) return { checkpoints: [], problems: [] }
  const checkpoints: FoundCheckpoint[] = []
  const problems: string[] = []
  readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
    if (line === '') return
    let parsed: unknown
    try { parsed = JSON.parse(line) } catch { parsed = undefined }
    if (isCheckpoint(parsed)) checkpoints.push({ ...parsed, source: `${file}:${i + 1}` })
    else problems.push(`${file}:${i + 1} is not a checkpoint`)
  })
  return { checkpoints, problems }
}

/** A checkpoint given on the command line or by a monitor (`{"rows":…,"head":…}` at least). */
export function parseCheckpoint (text: string, source: string): FoundCheckpoint | undefined {
  let parsed: unknown
  try { parsed = JSON.parse(text) } catch { return undefined }
  const c = parsed as Partial<AuditCheckpoint>
  const full = { at: '', key_id: null, signature: null, ...c }
  return isCheckpoint(full) ? { ...full, source } : undefined
}
