import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { loadConfig } from '../config.js'
import { openAuditReader } from '../plugins/storage.js'
import { CHECKPOINT_FILE, parseCheckpoint, readCheckpoints, type FoundCheckpoint } from '../storage/audit-checkpoints.js'
import { type AuditVerification } from '../storage/audit.js'
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
  const reader = await openAuditReader(config)
  if ('problem' in reader) { io.err(reader.problem); return 2 }
  const { audit, close } = reader
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
