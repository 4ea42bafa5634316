import { existsSync, readdirSync, statSync } from 'node:fs'
import { chmod, copyFile, mkdir, open, readFile, readdir, readlink, rm, stat, symlink, writeFile } from 'node:fs/promises'
import { dirname, isAbsolute, join, relative, resolve } from 'node:path'
import { backupDatabase, type BackupPoint } from './storage/sqlite/backup.js'
import { DB_FILE } from './storage/sqlite/database.js'
import { CHECKPOINT_FILE } from './storage/audit-checkpoints.js'
import type { Awaitable } from './storage/awaitable.js'
import { TASK_GRAPH_FILE } from './storage/file/tasks.js'
import { GraphLock } from './storage/file/graph-lock.js'
import { DEFAULT_KEY_FILE } from './storage/secret-keyring.js'

// This is the `backup` command's logic, beside commands.ts (as scaffold.ts is `new agent`'s); it takes
// the task graph's lock (storage/file/graph-lock.ts). (Issue 29 may move it into storage/ in a later step.)

/** The manifest a backup writes last into its folder: a folder without it is not a finished backup. */
export const BACKUP_MANIFEST = 'backup-manifest.json'

/** The local agents' working folders under DATA_DIR (backends/local/local-agent-protocol.ts). */
const WORKSPACES = 'workspaces'

/** One thing a backup copied. */
export interface CopiedEntry {
  /** Its path in DATA_DIR and in the backup (a folder ends with `/`). */
  path: string
  bytes: number
  /** How it was copied, in a few words. */
  how: string
}

/** One thing of DATA_DIR a backup did not copy, and why. */
export interface LeftOutEntry {
  path: string
  why: string
}

/** The point in time of a backup's database (`storage/sqlite/backup.ts`). */
export type { BackupPoint }

/** What a backup copied, left out and when: printed by `agent-host backup`, and written as {@link BACKUP_MANIFEST}. */
export interface BackupManifest {
  format: 1
  /** DATA_DIR, absolute. */
  data_dir: string
  /** The backup's folder, absolute. */
  to: string
  started_at: string
  finished_at: string
  /** `sqlite`: DATA_DIR's database is in the copy; `postgres`: DATABASE_URL is set, and the database is pg_dump's to back up. */
  database: 'sqlite' | 'postgres'
  copied: CopiedEntry[]
  left_out: LeftOutEntry[]
  /** The database's point in time; null without one (PostgreSQL). */
  point_in_time: BackupPoint | null
}

export interface BackupOptions {
  /** DATA_DIR (absolute, as the configuration resolves it). */
  dataDir: string
  /** The backup's folder: made if missing, else it must be empty. */
  to: string
  /** `postgres` when DATABASE_URL is set: DATA_DIR's own files only. */
  database: 'sqlite' | 'postgres'
  /** The task store's lock settings: `staleMs` is TASK_LOCK_STALE_MS; `waitMs` how long to wait for a writer (default 30 s). */
  graphLock: { staleMs: number, waitMs?: number }
  /** Called while the task graph's lock is held, before its copy (tests show with it that a writer waits). */
  whileGraphLocked?: () => Awaitable<void>
}

/**
 * Why `agent-host backup` must not run with these folders, or undefined when it may: DATA_DIR (or,
 * on SQLite, its database) missing, or a target that is inside DATA_DIR, not a folder, or not empty.
 * Nothing is written either way.
 */
export function backupRefusal (options: Pick<BackupOptions, 'dataDir' | 'to' | 'database'>): string | undefined {
  const dataDir = resolve(options.dataDir)
  const to = resolve(options.to)
  if (!existsSync(dataDir) || !statSync(dataDir).isDirectory()) return `no DATA_DIR at ${dataDir}: is --data-dir (or DATA_DIR) right?`
  if (options.database === 'sqlite' && !existsSync(join(dataDir, DB_FILE))) return `no agent-host database at ${join(dataDir, DB_FILE)}: is --data-dir (or DATA_DIR) right?`
  const inside = relative(dataDir, to)
  if (inside === '' || (!inside.startsWith('..') && !isAbsolute(inside))) return `${to} is inside DATA_DIR (${dataDir}): put the backup elsewhere (it would be copied into the next backup, and lost with DATA_DIR)`
  if (existsSync(to)) {
    if (!statSync(to).isDirectory()) return `${to} is not a folder: give a new or empty folder`
    const found = readdirSync(to)
    if (found.length > 0) return `${to} is not empty (${found.slice(0, 3).join(', ')}${found.length > 3 ? ', …' : ''}): a backup goes into a new or empty folder, and nothing was written`
  }
  return undefined
}

/** fsync a file or a folder (so a rename or a new entry in it is durable). */
async function sync (path: string): Promise<void> {
  const handle = await open(path, 'r')
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}

/** Give `to` the permission bits of `from` (the backup holds what DATA_DIR holds, as closely kept). */
async function sameMode (from: string, to: string): Promise<void> {
  await chmod(to, (await stat(from)).mode & 0o777)
}

/**
 * The audit checkpoints, copied before the database: each one counts rows committed before it was
 * written, so every checkpoint in the copy is of a log the database copy holds, and the copy
 * verifies. A line still being appended (no newline yet) is left out.
 */
async function copyCheckpoints (dataDir: string, to: string): Promise<CopiedEntry> {
  const text = await readFile(join(dataDir, CHECKPOINT_FILE))
  const whole = text.subarray(0, text.lastIndexOf(0x0a) + 1)
  const target = join(to, CHECKPOINT_FILE)
  await writeFile(target, whole, { mode: 0o600, flag: 'wx' })
  await sameMode(join(dataDir, CHECKPOINT_FILE), target)
  await sync(target)
  const count = whole.toString('utf8').split('\n').filter((l) => l !== '').length
  return { path: CHECKPOINT_FILE, bytes: whole.length, how: `${count} checkpoint${count === 1 ? '' : 's'}, copied before the database` }
}

/** The database, copied as the SQLite driver copies it (`storage/sqlite/backup.ts`), made durable with its folder's permission bits. */
async function copyDatabase (dataDir: string, to: string): Promise<{ entry: CopiedEntry, point: BackupPoint }> {
  const file = join(dataDir, DB_FILE)
  const target = join(to, DB_FILE)
  const { pages, point } = await backupDatabase(file, target)
  await sameMode(file, target)
  await sync(target)
  return { entry: { path: DB_FILE, bytes: (await stat(target)).size, how: `SQLite online backup, ${pages} pages in one read transaction; quick_check ok` }, point }
}

/**
 * The task graph, copied while holding its store's lock (`storage/file/graph-lock.ts`, the protocol every
 * writer follows, a stale lock taken over as they do): the copy is a graph the store committed, and
 * no writer replaces it meanwhile.
 */
async function copyGraph (dataDir: string, to: string, options: BackupOptions): Promise<CopiedEntry> {
  const file = join(dataDir, TASK_GRAPH_FILE)
  const staleMs = options.graphLock.staleMs
  const lock = new GraphLock(file, { staleMs, updateMs: Math.max(50, Math.floor(staleMs / 5)), waitMs: options.graphLock.waitMs ?? 30_000 })
  const held = await lock.acquire()
  try {
    await options.whileGraphLocked?.()
    const target = join(to, TASK_GRAPH_FILE)
    await copyFile(file, target)
    await sameMode(file, target)
    await sync(target)
    const tasks = (JSON.parse(await readFile(target, 'utf8')) as { tasks?: unknown[] }).tasks?.length ?? 0
    return { path: TASK_GRAPH_FILE, bytes: (await stat(target)).size, how: `${tasks} task${tasks === 1 ? '' : 's'}, copied holding the task store's lock` }
  } finally {
    await held.release()
  }
}

/**
 * A folder copied file by file as found (no point in time: the local agents' processes write there
 * at will): folders, files (fsynced) and symbolic links as they are; anything else is listed as left out.
 */
async function copyTree (from: string, to: string, path: string, leftOut: LeftOutEntry[]): Promise<{ files: number, bytes: number }> {
  await mkdir(to)
  await sameMode(from, to)
  let files = 0
  let bytes = 0
  for (const entry of await readdir(from, { withFileTypes: true })) {
    const source = join(from, entry.name)
    const target = join(to, entry.name)
    if (entry.isDirectory()) {
      const inner = await copyTree(source, target, `${path}${entry.name}/`, leftOut)
      files += inner.files
      bytes += inner.bytes
    } else if (entry.isSymbolicLink()) {
      await symlink(await readlink(source), target)
    } else if (entry.isFile()) {
      await copyFile(source, target)
      await sameMode(source, target)
      await sync(target)
      files++
      bytes += (await stat(target)).size
    } else {
      leftOut.push({ path: `${path}${entry.name}`, why: 'not a file, folder or link (a socket or pipe)' })
    }
  }
  await sync(to)
  return { files, bytes }
}

/** What DATA_DIR holds that a backup leaves out on purpose, by name. */
function leftOutOnPurpose (name: string, database: BackupOptions['database']): string | undefined {
  if (name === `${DB_FILE}-wal` || name === `${DB_FILE}-shm` || name === `${DB_FILE}-journal`) {
    return database === 'sqlite' ? 'the live database\'s WAL and index: the copy holds what they hold, and needs neither' : 'DATABASE_URL is set: this SQLite database is not the one in use'
  }
  if (name === DB_FILE) return 'DATABASE_URL is set: this SQLite database is not the one in use'
  if (name === `${TASK_GRAPH_FILE}.lock`) return 'the task store\'s lock: a copy must not hold it'
  if (name.startsWith(`${TASK_GRAPH_FILE}.lock-stale-`) || (name.startsWith(`${TASK_GRAPH_FILE}.`) && name.endsWith('.tmp'))) return 'what a crashed writer left, which the task store removes'
  if (name === BACKUP_MANIFEST) return 'the manifest of the backup this DATA_DIR was restored from'
  if (name === DEFAULT_KEY_FILE) return 'the key that seals the stored secrets: keep it apart from the data (a restore needs it; docs/security.md#secrets-at-rest)'
  return undefined
}

/**
 * Copy DATA_DIR into `to` while the server runs, as a folder usable as DATA_DIR as it is:
 *
 * 1. `audit-checkpoints.jsonl`, first (so that none of its checkpoints is ahead of the database copy);
 * 2. `agent-host.db` through SQLite's online backup API, in one read transaction (SQLite only);
 * 3. `tasks.graph.json` while holding the task store's lock;
 * 4. `workspaces/`, the local agents' folders, file by file;
 * 5. {@link BACKUP_MANIFEST}, last.
 *
 * Left out: the WAL and its index, the task store's lock and a crashed writer's leftovers, an earlier
 * backup's manifest, and anything agent-host does not write (listed, for the operator to judge).
 * Every file and folder written is fsynced. On a failure whatever this wrote is removed (and `to`,
 * if this made it) and the error is thrown. Call {@link backupRefusal} first.
 */
export async function backupDataDir (options: BackupOptions): Promise<BackupManifest> {
  const dataDir = resolve(options.dataDir)
  const to = resolve(options.to)
  const startedAt = new Date().toISOString()
  const made = !existsSync(to)
  const written: string[] = []
  try {
    if (made) await mkdir(to, { recursive: true, mode: 0o700 })
    const names = (await readdir(dataDir)).sort()
    const copied: CopiedEntry[] = []
    const leftOut: LeftOutEntry[] = []
    let point: BackupPoint | null = null
    const step = async (name: string, copy: () => Promise<CopiedEntry>): Promise<void> => {
      if (!names.includes(name)) return
      written.push(name)
      copied.push(await copy())
    }
    await step(CHECKPOINT_FILE, async () => await copyCheckpoints(dataDir, to))
    if (options.database === 'sqlite') {
      await step(DB_FILE, async () => {
        const { entry, point: at } = await copyDatabase(dataDir, to)
        point = at
        return entry
      })
    }
    await step(TASK_GRAPH_FILE, async () => await copyGraph(dataDir, to, options))
    await step(WORKSPACES, async () => {
      const tree = await copyTree(join(dataDir, WORKSPACES), join(to, WORKSPACES), `${WORKSPACES}/`, leftOut)
      return { path: `${WORKSPACES}/`, bytes: tree.bytes, how: `${tree.files} file${tree.files === 1 ? '' : 's'}, copied one by one as found` }
    })
    const known = new Set(copied.map((c) => c.path.replace(/\/$/, '')))
    for (const name of names) {
      if (known.has(name)) continue
      leftOut.push({ path: name, why: leftOutOnPurpose(name, options.database) ?? 'not written by agent-host: copy it yourself if it belongs with the backup' })
    }
    leftOut.sort((a, b) => a.path.localeCompare(b.path))
    const manifest: BackupManifest = {
      format: 1,
      data_dir: dataDir,
      to,
      started_at: startedAt,
      finished_at: new Date().toISOString(),
      database: options.database,
      copied,
      left_out: leftOut,
      point_in_time: point
    }
    written.push(BACKUP_MANIFEST)
    await writeFile(join(to, BACKUP_MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o600, flag: 'wx' })
    await sync(join(to, BACKUP_MANIFEST))
    await sync(to)
    if (made) await sync(dirname(to))
    return manifest
  } catch (err) {
    if (made) await rm(to, { recursive: true, force: true })
    else await Promise.all(written.map(async (name) => { await rm(join(to, name), { recursive: true, force: true }) }))
    throw err
  }
}
