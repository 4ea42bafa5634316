import { loadConfig } from '../config.js'
import { USAGE } from './usage.js'
import { driverOf } from '../plugins/storage.js'
import { backupDataDir, backupRefusal, BACKUP_MANIFEST, type BackupManifest } from '../backup.js'
import type { CommandIo } from './shared.js'

/** A size for people: bytes, KiB or MiB. */
function size (bytes: number): string {
  if (bytes < 1024) return `${bytes} B`
  return bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 / 1024).toFixed(1)} MiB`
}

/** A backup's manifest as lines: what it copied, what it left out and why, its point in time. */
function backupLines (manifest: BackupManifest): string[] {
  const point = manifest.point_in_time
  return [
    ...manifest.copied.map((c) => `copied ${c.path} (${size(c.bytes)}): ${c.how}`),
    ...manifest.left_out.map((l) => `left out ${l.path}: ${l.why}`),
    ...(point === null
      ? []
      : [
          `point in time: audit row ${point.audit.rows}${point.audit.at === null ? '' : ` of ${point.audit.at}`}; ${point.runs.count} runs, the last started ${point.runs.last_started_at ?? 'never'}`,
          `keep with the backup, as its checkpoint: ${JSON.stringify({ rows: point.audit.rows, head: point.audit.head })}`
        ]),
    `backup of ${manifest.data_dir} written to ${manifest.to} (${BACKUP_MANIFEST} last), ${manifest.started_at} to ${manifest.finished_at}`
  ]
}

/**
 * `backup --to DIR`: DATA_DIR copied while the server runs (see src/backup.ts). Exit 0 when done, 1
 * when it failed (what it wrote removed), 2 when refused (nothing written), 3 with DATABASE_URL:
 * DATA_DIR's files copied, and the database left to pg_dump.
 */
export async function backup (values: { to?: string, json?: boolean }, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  if (values.to === undefined || values.to === '') { io.err(`backup needs --to DIR\n\n${USAGE}`); return 2 }
  const config = loadConfig(env)
  const database = driverOf(config)
  const options = { dataDir: config.DATA_DIR, to: values.to, database, graphLock: { staleMs: config.TASK_LOCK_STALE_MS } } as const
  const refused = backupRefusal(options)
  if (refused !== undefined) { io.err(`backup refused: ${refused}`); return 2 }
  let manifest: BackupManifest
  try {
    manifest = await backupDataDir(options)
  } catch (err) {
    io.err(`backup failed: ${(err as Error).message}; ${values.to} is as it was`)
    return 1
  }
  if (values.json === true) io.out(JSON.stringify(manifest))
  else for (const line of backupLines(manifest)) io.out(line)
  if (database === 'sqlite') return 0
  io.err(`the database is not in this backup: DATABASE_URL is set, and PostgreSQL's data is backed up with pg_dump --format=custom (or a base backup and WAL archiving): see docs/backups.md. This copied ${config.DATA_DIR}'s own files, which belong with it`)
  return 3
}
