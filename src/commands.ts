import { parseArgs } from 'node:util'
import { auditKeysRetired, loadConfig, type Config } from './config.js'
import { DB_FILE, openDatabase, type Db } from './storage/sqlite/database.js'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { CHECKPOINT_FILE, parseCheckpoint, readCheckpoints, type FoundCheckpoint } from './storage/audit-checkpoints.js'
import { AuditKeyring } from './storage/audit-key.js'
import { AuditLog, type AuditStore, type AuditVerification } from './storage/audit.js'
import { databaseName, openAuditReader, PgAuditLog } from './storage/postgres/audit.js'
import { EventStore, type EventLog } from './storage/events.js'
import type { Awaitable } from './storage/awaitable.js'
import { PgEventStore } from './storage/postgres/events.js'
import { PgBusStore } from './storage/postgres/bus.js'
import { PgTaskStore } from './storage/postgres/pg-task-store.js'
import type { TaskStore } from './storage/tasks/task-store.js'
import { loadAgents } from './agents/loader.js'
import { FileTaskStore } from './storage/file/file-task-store.js'
import { SqliteTaskStore } from './storage/sqlite/sqlite-task-store.js'
import { WorkerPool } from './runtime/worker-pool.js'
import { SqliteKeyStore, type ApiKeyRecord, type NewKey } from './auth/keys.js'
import { PgKeyStore } from './storage/postgres/keys.js'
import { inTransaction, openPostgres } from './storage/postgres/database.js'
import type pg from 'pg'
import { createBackends } from './backends/registry.js'
import { EventBus } from './bus/event-bus.js'
import { subscribeAgents } from './bus/agent-subscriptions.js'
import { TaskAccess } from './auth/task-access.js'
import { SqliteBusStore, type BusStore } from './storage/bus.js'
import { retryBusy } from './storage/busy.js'
import { randomUUID } from 'node:crypto'
import { userInfo } from 'node:os'
import { SCOPES } from './auth/scopes.js'
import { newAgent } from './scaffold.js'
import { backupDataDir, backupRefusal, BACKUP_MANIFEST, type BackupManifest } from './backup.js'
import type { Progress } from './terminal-progress.js'
import pkg from '../package.json' with { type: 'json' }
import { AH_ERR_KEY_NAME_AMBIGUOUS, AH_ERR_KEY_NAME_TAKEN } from './errors.js'

export const USAGE = `usage: agent-host <command>
       agent-host --version | -v                print the version
       agent-host --help | -h                   print this

commands:
  audit verify [--data-dir DIR] [--checkpoint JSON]... [--checkpoint-file FILE]...
                                                check the audit log (DATA_DIR's, or DATABASE_URL's) against
                                                its checkpoints and those kept elsewhere (with PostgreSQL:
                                                each instance's DATA_DIR/audit-checkpoints.jsonl, given
                                                with --checkpoint-file) (exit 0 when intact, 1 when not, 2
                                                when there is no log); needs AUDIT_KEY for a keyed log
  backup --to DIR [--data-dir DIR] [--json]     copy DATA_DIR into DIR (new or empty) while the server
                                                runs: the database through SQLite's online backup, the
                                                task graph under its lock, the audit checkpoints, the
                                                workspaces; prints what it copied and its point in time
                                                (--json: the manifest it writes, DIR/backup-manifest.json)
                                                (exit 0 when done, 1 when it failed and DIR is as it was,
                                                2 when refused); with DATABASE_URL it copies DATA_DIR's
                                                files only and exits 3: the database is pg_dump's
                                                (docs/backups.md)
  worker --type T [--concurrency N] [--data-dir DIR]
                                                work the task graph as task agent T until SIGTERM/SIGINT
  keys create --name N --scopes s1,s2 [--agents a,b] [--expires 30d|ISO date]
                                                make an API key and print it (once: only its hash is kept)
  keys list [--json]                            the keys, under a header: id, name, scopes, agents, created,
                                                expiry, state (active, expired, or revoked and when; never
                                                the key); columns aligned on a terminal, tab-separated when
                                                piped; --json: one JSON array
  keys revoke ID|NAME                           revoke a key, by its id or its name (a name is one key's
                                                among those not revoked: keys create refuses a name taken)
                                                (keys live in DATABASE_URL's database when it is set, else
                                                in DATA_DIR's; every change is audited)
  new agent NAME [--stream | --task | --contract]
                                                write a working agent, AGENTS_DIR/NAME/index.ts (default
                                                agents/), and its test, test/agents/NAME.test.ts: a JSON
                                                agent; --stream an SSE agent; --task a task agent;
                                                --contract a contract agent (a task agent too); run it
                                                from the project's root; it never overwrites

Settings come from the environment as for the server (DATA_DIR, AGENTS_DIR, TASK_STORE, TASK_*).
On a terminal, long work (audit verify, database migrations) shows its progress on stderr.`

/** Where a command writes, and what stops a long-running one. */
export interface CommandIo {
  out: (line: string) => void
  err: (line: string) => void
  /** Stops `worker` (the CLI wires SIGTERM and SIGINT to it). */
  signal?: AbortSignal
  /** The project folder `new` writes into (default: the current directory). */
  cwd?: string
  /** Where long work reports how far it got (the CLI gives one only when stderr is a terminal). */
  progress?: Progress
  /** `out` goes to a terminal: tables are aligned for reading, not tab-separated. */
  outIsTerminal?: boolean
}

/** DATA_DIR's database, its pending migrations (if any) shown on `io.progress`. */
function openData (dataDir: string, io: CommandIo): Db {
  const progress = io.progress
  if (progress === undefined) return openDatabase(dataDir)
  try {
    return openDatabase(dataDir, { onMigration: (step, index, pending) => { progress.update(index, pending, `migrating the database (${step.version}: ${step.description})`) } })
  } finally {
    progress.end()
  }
}

/** Rows under a header: tab-separated, or on a terminal in columns padded to their widest cell. */
function table (header: string[], rows: string[][], io: CommandIo): void {
  if (io.outIsTerminal !== true) {
    for (const row of [header, ...rows]) io.out(row.join('\t'))
    return
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)))
  for (const row of [header, ...rows]) io.out(row.map((cell, i) => i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)).join('  '))
}

/** Whether a key works at `now`: revoked (whatever its expiry), expired, or active. */
function keyState (k: ApiKeyRecord, now: Date): 'active' | 'expired' | 'revoked' {
  if (k.revoked_at !== null) return 'revoked'
  return k.expires_at !== null && Date.parse(k.expires_at) <= now.getTime() ? 'expired' : 'active'
}

/** A key as `keys list --json` prints it: the record's fields, named, and its state, never its hash. */
function keyJson (k: ApiKeyRecord, now: Date): Pick<ApiKeyRecord, 'id' | 'name' | 'scopes' | 'agents' | 'created_at' | 'expires_at' | 'revoked_at'> & { state: ReturnType<typeof keyState> } {
  return { id: k.id, name: k.name, scopes: k.scopes, agents: k.agents, created_at: k.created_at, expires_at: k.expires_at, revoked_at: k.revoked_at, state: keyState(k, now) }
}

async function worker (type: string | undefined, concurrency: number, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  if (type === undefined || type === '') { io.err(`worker needs --type\n\n${USAGE}`); return 2 }
  const config = loadConfig(env)
  const { taskAgents } = await loadAgents(config.AGENTS_DIR)
  const agent = taskAgents.find((a) => a.agent.agentType === type)
  if (agent === undefined) {
    io.err(`no task agent of type "${type}" in ${config.AGENTS_DIR} (found: ${taskAgents.map((a) => a.agent.agentType).join(', ') || 'none'})`)
    return 2
  }
  const data = await workerStores(config, io)
  const access = new TaskAccess(taskAgents.map((loaded) => ({ type: loaded.agent.agentType, id: loaded.id })), data.audit)
  const store = access.guard(data.tasks)
  const log = {
    info: (obj: object, msg?: string) => { io.out(JSON.stringify({ level: 'info', msg, ...obj })) },
    error: (obj: object, msg?: string) => { io.err(JSON.stringify({ level: 'error', msg, ...obj, err: String((obj as { err?: unknown }).err) })) }
  }
  const backends = createBackends(config, { ...log, warn: log.info })
  const bus = new EventBus({
    store: data.bus,
    write: data.write,
    instanceId: randomUUID(),
    pollMs: config.BUS_POLL_MS,
    leaseMs: config.BUS_LEASE_MS,
    maxAttempts: config.BUS_MAX_ATTEMPTS,
    backoffMs: config.BUS_RETRY_BACKOFF_MS,
    log: { warn: log.info, error: log.error }
  })
  const pool = new WorkerPool({
    store,
    events: data.events,
    audit: data.audit,
    workersPerType: concurrency,
    heartbeatMs: config.TASK_HEARTBEAT_MS,
    leaseMs: config.TASK_LEASE_MS,
    pollMs: config.TASK_POLL_MS,
    log,
    host: backends,
    bus
  })
  pool.start([agent.agent])
  await subscribeAgents(bus, store, [agent], access)
  io.out(`worker ready: type ${type}, ${concurrency} loop(s), pid ${process.pid}, store ${config.TASK_STORE}`)
  if (io.signal !== undefined && !io.signal.aborted) await new Promise((resolve) => io.signal?.addEventListener('abort', resolve, { once: true }))
  await bus.close()
  await pool.stop()
  await backends.close()
  await store.close()
  await data.close()
  io.out('worker stopped')
  return 0
}

/** What a worker process writes to: the database the server uses (DATABASE_URL, else DATA_DIR's SQLite file) and the task store TASK_STORE names. */
async function workerStores (config: Config, io: CommandIo): Promise<{ tasks: TaskStore, bus: BusStore, events: EventLog, audit: AuditStore, write: <T>(op: () => Awaitable<T>) => Promise<T>, close: () => Promise<void> }> {
  const keyring = new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config))
  if (config.DATABASE_URL !== '') {
    const pool = await openPostgres(config.DATABASE_URL, { max: config.DB_POOL_MAX, applicationName: 'agent-host worker' })
    try {
      return {
        tasks: config.TASK_STORE === 'postgres' ? new PgTaskStore(pool) : new FileTaskStore(config.DATA_DIR, { staleMs: config.TASK_LOCK_STALE_MS }),
        bus: new PgBusStore(pool),
        events: new PgEventStore(pool),
        audit: await PgAuditLog.open(pool, keyring),
        write: async (op) => await op(),
        close: async () => { await pool.end() }
      }
    } catch (err) {
      await pool.end()
      throw err
    }
  }
  const db = openData(config.DATA_DIR, io)
  return {
    tasks: config.TASK_STORE === 'sqlite' ? new SqliteTaskStore(db) : new FileTaskStore(config.DATA_DIR, { staleMs: config.TASK_LOCK_STALE_MS }),
    bus: new SqliteBusStore(db),
    events: new EventStore(db),
    audit: new AuditLog(db, keyring),
    write: async (op) => await retryBusy(op, config.DB_WRITE_BUDGET_MS),
    close: async () => { db.close() }
  }
}

/**
 * `audit verify`: the log of DATA_DIR (of DATABASE_URL when set), opened read-only, held against
 * the checkpoints beside it (DATA_DIR/audit-checkpoints.jsonl) and those given (`--checkpoint
 * '<json>'`, `--checkpoint-file <jsonl>`: copies kept elsewhere; with PostgreSQL, the other
 * instances' checkpoint files). Exit 0 when intact, 1 when not, 2 when there is nothing to verify
 * (or the database cannot be reached).
 */
async function auditVerify (values: { checkpoint?: string[], 'checkpoint-file'?: string[] }, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
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
    audit = new AuditLog(db, keyring, { readOnly: true })
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
async function backup (values: { to?: string, json?: boolean }, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  if (values.to === undefined || values.to === '') { io.err(`backup needs --to DIR\n\n${USAGE}`); return 2 }
  const config = loadConfig(env)
  const database = config.DATABASE_URL === '' ? 'sqlite' : 'postgres'
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

/** `30d`, `12h`, `45m` from now, or an ISO date. */
function expiry (text: string): Date | undefined {
  const relative = /^(\d+)([dhm])$/.exec(text)
  if (relative !== null) return new Date(Date.now() + Number(relative[1]) * { d: 86_400_000, h: 3_600_000, m: 60_000 }[relative[2] as 'd' | 'h' | 'm'])
  const date = new Date(text)
  return /^\d{4}-\d\d-\d\d/.test(text) && !Number.isNaN(date.getTime()) ? date : undefined
}

/**
 * `keys create|list|revoke`: the keys of DATABASE_URL's PostgreSQL database when it is set (shared
 * by every instance), else of DATA_DIR's SQLite database; each change is audited.
 */
async function keys (sub: string | undefined, target: string | undefined, values: { name?: string, scopes?: string, agents?: string, expires?: string, json?: boolean }, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  const list = (v: string | undefined): string[] => (v ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '')
  if (sub !== 'create' && sub !== 'list' && sub !== 'revoke') { io.err(`keys needs create, list or revoke\n\n${USAGE}`); return 2 }
  let expiresAt: Date | undefined
  if (sub === 'create') {
    const unknown = list(values.scopes).filter((s) => !(SCOPES as readonly string[]).includes(s))
    if (values.name === undefined || values.name === '' || list(values.scopes).length === 0) { io.err('keys create needs --name and --scopes'); return 2 }
    if (unknown.length > 0) { io.err(`unknown scope(s): ${unknown.join(', ')} (known: ${SCOPES.join(', ')})`); return 2 }
    if (values.expires !== undefined) {
      expiresAt = expiry(values.expires)
      if (expiresAt === undefined) { io.err('--expires must be like 30d, 12h, 45m or an ISO date'); return 2 }
      if (expiresAt.getTime() <= Date.now()) { io.err(`--expires ${values.expires} is in the past: the key would never work`); return 2 }
    }
  }
  const config = loadConfig(env)
  const agents = list(values.agents)
  if (sub === 'create' && agents.length > 0) {
    const { registry } = await loadAgents(config.AGENTS_DIR)
    const unknown = agents.filter((a) => registry.get(a) === undefined)
    if (unknown.length > 0) { io.err(`no agent ${unknown.map((a) => `"${a}"`).join(', ')} in ${config.AGENTS_DIR} (known: ${registry.list().map((h) => h.manifest.metadata.name).join(', ')})`); return 2 }
  }
  // who ran the command on this machine: the operating-system user (keys are made outside the HTTP API)
  const actor = `cli:${userInfo().username}`
  const keyring = new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config))
  const store = config.DATABASE_URL !== '' ? await pgKeys(config.DATABASE_URL, keyring, actor, io) : sqliteKeys(config.DATA_DIR, keyring, actor, io)
  try {
    if (sub === 'create') {
      const { key, record } = await store.create({ name: values.name as string, scopes: list(values.scopes), ...(agents.length > 0 ? { agents } : {}), ...(expiresAt !== undefined ? { expiresAt } : {}) })
      io.out(key)
      io.err(`key ${record.id} "${record.name}" made; it is shown only now`)
      return 0
    }
    if (sub === 'list') {
      const listed = await store.list()
      const now = new Date()
      if (values.json === true) { io.out(JSON.stringify(listed.map((k) => keyJson(k, now)))); return 0 }
      table(['ID', 'NAME', 'SCOPES', 'AGENTS', 'CREATED', 'EXPIRES', 'STATE'], listed.map((k) => [
        k.id, k.name, k.scopes.join(','), k.agents?.join(',') ?? '*', k.created_at, k.expires_at ?? 'never', k.revoked_at === null ? keyState(k, now) : `revoked ${k.revoked_at}`
      ]), io)
      return 0
    }
    const revoked = target === undefined ? 0 : await store.revoke(target)
    if (revoked === 0) { io.err(`no active key with id or name "${target ?? ''}"`); return 1 }
    io.out(`revoked ${revoked} key(s)`)
    return 0
  } catch (err) {
    // a name already taken, or shared by keys made before names were unique: nothing changed, and the message says what to do
    if (err instanceof AH_ERR_KEY_NAME_TAKEN || err instanceof AH_ERR_KEY_NAME_AMBIGUOUS) { io.err((err as Error).message); return 1 }
    throw err
  } finally {
    await store.close()
  }
}

/** The keys as `agent-host keys` changes them: each change with its audit row. */
interface KeysCommandStore {
  create: (options: NewKey) => Promise<{ key: string, record: ApiKeyRecord }>
  list: () => Promise<ApiKeyRecord[]>
  /** Revoke by id or name; audited when something was revoked. */
  revoke: (target: string) => Promise<number>
  close: () => Promise<void>
}

function keyCreated (record: ApiKeyRecord): Record<string, unknown> {
  return { name: record.name, scopes: record.scopes, agents: record.agents, expires_at: record.expires_at }
}

/** The keys of DATA_DIR's SQLite database. */
function sqliteKeys (dataDir: string, keyring: AuditKeyring, actor: string, io: CommandIo): KeysCommandStore {
  const db = openData(dataDir, io)
  const store = new SqliteKeyStore(db)
  const audit = (action: string, resource: string, details: Record<string, unknown>): void => {
    new AuditLog(db, keyring).append({ actor, action, resource, success: true, details })
  }
  return {
    create: async (options) => {
      const made = store.create(options)
      audit('key.create', made.record.id, keyCreated(made.record))
      return made
    },
    list: async () => store.list(),
    revoke: async (target) => {
      const revoked = store.revoke(target)
      if (revoked > 0) audit('key.revoke', target, { keys: revoked })
      return revoked
    },
    close: async () => { db.close() }
  }
}

/** The keys of DATABASE_URL's PostgreSQL database (migrated first): a key and its audit row are committed together. */
async function pgKeys (url: string, keyring: AuditKeyring, actor: string, io: CommandIo): Promise<KeysCommandStore> {
  const progress = io.progress
  let pool: pg.Pool
  try {
    pool = await openPostgres(url, { max: 2, applicationName: 'agent-host keys', ...(progress !== undefined ? { onMigration: (step, index, pending) => { progress.update(index, pending, `migrating the database (${step.version}: ${step.description})`) } } : {}) })
  } finally {
    progress?.end()
  }
  const opened = pool
  const store = new PgKeyStore(opened)
  let audit: PgAuditLog
  try {
    audit = await PgAuditLog.open(opened, keyring)
  } catch (err) {
    await opened.end()
    throw err
  }
  return {
    create: async (options) => await inTransaction(opened, async (client) => {
      const made = await store.createIn(client, options)
      await audit.appendIn(client, { actor, action: 'key.create', resource: made.record.id, success: true, details: keyCreated(made.record) })
      return made
    }),
    list: async () => await store.list(),
    revoke: async (target) => await inTransaction(opened, async (client) => {
      const revoked = await store.revokeIn(client, target)
      if (revoked > 0) await audit.appendIn(client, { actor, action: 'key.revoke', resource: target, success: true, details: { keys: revoked } })
      return revoked
    }),
    close: async () => { await opened.end() }
  }
}

/**
 * The `agent-host` command line (src/cli.ts is its process entry point).
 * @returns the exit code
 */
export async function main (argv: string[], env: Record<string, string | undefined>, io: CommandIo = { out: console.log, err: console.error }): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        'data-dir': { type: 'string' },
        type: { type: 'string' },
        concurrency: { type: 'string', default: '1' },
        name: { type: 'string' },
        scopes: { type: 'string' },
        agents: { type: 'string' },
        expires: { type: 'string' },
        checkpoint: { type: 'string', multiple: true },
        'checkpoint-file': { type: 'string', multiple: true },
        to: { type: 'string' },
        json: { type: 'boolean' },
        stream: { type: 'boolean' },
        task: { type: 'boolean' },
        contract: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' }
      }
    })
  } catch (e) {
    io.err(`${(e as Error).message}\n\n${USAGE}`)
    return 2
  }
  const [command, sub] = parsed.positionals
  if (parsed.values.version === true) { io.out(pkg.version); return 0 }
  if (parsed.values.help === true || command === undefined) {
    io.out(USAGE)
    return command === undefined && parsed.values.help !== true ? 2 : 0
  }
  const scoped = { ...env, ...(parsed.values['data-dir'] !== undefined ? { DATA_DIR: parsed.values['data-dir'] } : {}) }
  if (command === 'audit' && sub === 'verify') return await auditVerify(parsed.values, scoped, io)
  if (command === 'backup') return await backup(parsed.values, scoped, io)
  if (command === 'new') return await newAgent(parsed.positionals.slice(1), parsed.values, { root: io.cwd ?? process.cwd(), env }, io)
  if (command === 'keys') return await keys(sub, parsed.positionals[2], parsed.values, scoped, io)
  if (command === 'worker') {
    const concurrency = Number(parsed.values.concurrency)
    if (!Number.isInteger(concurrency) || concurrency < 1) { io.err('--concurrency must be a positive integer'); return 2 }
    return await worker(parsed.values.type, concurrency, scoped, io)
  }
  io.err(`unknown command: ${parsed.positionals.join(' ')}\n\n${USAGE}`)
  return 2
}
