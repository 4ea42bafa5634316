import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { join } from 'node:path'
import type pg from 'pg'
import { SqliteCheckpointer } from '../storage/sqlite/checkpointer.js'
import { DB_FILE, openDatabase, type Db } from '../storage/sqlite/database.js'
import { ensureWritableDir } from '../storage/data-dir.js'
import { SqliteAuditLog } from '../storage/sqlite/audit.js'
import { AUDIT_BOOT, type AuditStore } from '../storage/audit.js'
import { appendCheckpoint } from '../storage/audit-checkpoints.js'
import { AuditKeyring } from '../storage/audit-key.js'
import type { Awaitable } from '../storage/awaitable.js'
import { auditKeysRetired } from '../config.js'
import { SqliteEventStore } from '../storage/sqlite/events.js'
import { type EventLog } from '../storage/events.js'
import { SqliteGroupWriter } from '../storage/sqlite/group-writer.js'
import { SqliteRunLedger } from '../storage/sqlite/run-ledger.js'
import { type RunLedger } from '../storage/run-ledger.js'
import { SqliteRunStore } from '../storage/sqlite/runs.js'
import { SqliteSessionStore } from '../storage/sqlite/sessions.js'
import { INDEX_BATCH, type HostSessionStore } from '../storage/sessions.js'
import { PgAuditLog } from '../storage/postgres/audit.js'
import { openPostgres } from '../storage/postgres/database.js'
import { PgEventStore } from '../storage/postgres/events.js'
import { PgGroupWriter } from '../storage/postgres/group-writer.js'
import { PgNotifications } from '../storage/postgres/notifications.js'
import { PgRunLedger } from '../storage/postgres/run-ledger.js'
import { PgSessionStore } from '../storage/postgres/sessions.js'
import pkg from '../../package.json' with { type: 'json' }

/** How often interactions recorded since the last time are added to the search index. */
const INDEX_INTERVAL_MS = 250

/** How long a write may block on another process's lock while the server is not serving (boot, close). */
const BLOCKING_BUSY_TIMEOUT_MS = 5000

/**
 * Where everything durable lives, and how a store's write is made durable: SQLite under DATA_DIR
 * (one machine; writes through the group writer) or PostgreSQL at DATABASE_URL (any number of
 * instances; each store's write is its own transaction, the run engine's are group-committed).
 */
export type StorageBackend =
  | { kind: 'sqlite', db: Db, writer: SqliteGroupWriter, audit: SqliteAuditLog, events: SqliteEventStore, write: <T>(op: () => Awaitable<T>) => Promise<T> }
  | { kind: 'postgres', pool: pg.Pool, writer: PgGroupWriter, notifications: PgNotifications, audit: PgAuditLog, events: PgEventStore, write: <T>(op: () => Awaitable<T>) => Promise<T> }

declare module 'fastify' {
  interface FastifyInstance {
    /** The database and how to write to it (src/plugins/storage.ts). */
    storage: StorageBackend
    /** The tamper-evident audit log. */
    audit: AuditStore
    /** The event log (CloudEvents and graph events). */
    events: EventLog
    /** Durable sessions: history, values, recall. */
    sessions: HostSessionStore
    /** Everything the run engine reads and writes (runs, journals, answers, interactions, events, audit rows). */
    ledger: RunLedger
  }
}

/**
 * Opens the database (migrating it), makes its stores available, audits boot and shutdown, and
 * closes the database last. The audit log's signed checkpoints go to DATA_DIR on every instance.
 */
async function storage (app: FastifyInstance): Promise<void> {
  const backend = app.config.DATABASE_URL === '' ? sqlite(app) : await postgres(app)
  const { audit, config } = app
  if (!audit.keyed) app.log.warn('AUDIT_KEY is not set: the audit log shows accidental damage only; anyone who can write the database can rewrite it unseen. Set AUDIT_KEY (kept outside DATA_DIR) for a log an auditor can trust')
  else await warnIfUnsigned(app, audit)
  await audit.append({ ...AUDIT_BOOT, resource: app.instanceId, success: true, details: { version: pkg.version, pid: process.pid } })
  // signed checkpoints outside the database: what catches rows cut from the end of the log
  let checkpointed = -1
  const checkpoint = async (): Promise<void> => {
    const now = await audit.checkpoint()
    if (now.rows === checkpointed) return
    appendCheckpoint(config.DATA_DIR, now)
    checkpointed = now.rows
  }
  await checkpoint()
  const checkpoints = config.AUDIT_CHECKPOINT_INTERVAL_MS === 0
    ? undefined
    : setInterval(() => {
      checkpoint().catch((err: unknown) => { app.log.error({ err }, 'writing the audit checkpoint failed; the next interval tries again') })
    }, config.AUDIT_CHECKPOINT_INTERVAL_MS).unref()
  app.addHook('onClose', async () => {
    clearInterval(checkpoints)
    await backend.quiesce()
    await audit.append({ actor: 'agent-host', action: 'shutdown', resource: app.instanceId, success: true, details: { pid: process.pid } })
    await checkpoint()
    await backend.close()
  })
}

/**
 * With an audit key, a log whose last row is plain is one this boot starts to sign: the key was
 * just turned on, or someone without it rewrote a signed log as a plain one (and its checkpoint
 * file), which once this boot has signed a row nothing in DATA_DIR can tell any more. Said loudly.
 */
async function warnIfUnsigned (app: FastifyInstance, audit: AuditStore): Promise<void> {
  const { rows } = await audit.checkpoint()
  const last = rows === 0 ? undefined : (await audit.list({ after: rows - 1, limit: 1 }))[0]
  if (last?.key_id !== null) return
  app.log.warn({ rows }, 'AUDIT_KEY is set and no row of the audit log is signed yet: signing starts with this boot. If a server with an audit key wrote to this log before, it was rewritten without the key: check it now against a checkpoint kept elsewhere (agent-host audit verify --checkpoint)')
}

/** How a backend closes: `quiesce` stops its background work and commits what is queued; `close` closes the database (after the audit's last row). */
interface Closing { quiesce: () => Promise<void>, close: () => Promise<void> }

/** SQLite under DATA_DIR. */
function sqlite (app: FastifyInstance): Closing {
  // booting and closing may wait for another process's lock; serving must not (see storage/busy.ts)
  const config = app.config
  const db = openDatabase(config.DATA_DIR, { busyTimeoutMs: BLOCKING_BUSY_TIMEOUT_MS, cacheKiB: config.DB_CACHE_KIB, pageSize: config.DB_PAGE_SIZE, autoCheckpoint: config.DB_CHECKPOINT_INTERVAL_MS === 0 })
  const checkpointer = config.DB_CHECKPOINT_INTERVAL_MS === 0
    ? undefined
    : new SqliteCheckpointer(join(config.DATA_DIR, DB_FILE), config.DB_CHECKPOINT_INTERVAL_MS, (err) => {
      app.log.error({ err }, 'the checkpoint worker failed: SQLite checkpoints by itself again')
      if (db.open) db.pragma('wal_autocheckpoint = 1000')
    })
  let audit: SqliteAuditLog
  try {
    audit = new SqliteAuditLog(db, new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config)))
  } catch (err) {
    db.close()
    throw err
  }
  const writer = new SqliteGroupWriter(db, { budgetMs: config.DB_WRITE_BUDGET_MS })
  const events = new SqliteEventStore(db)
  const runStore = new SqliteRunStore(db)
  const sessions = new SqliteSessionStore(db, writer)
  app.decorate('storage', { kind: 'sqlite', db, writer, audit, events, write: async (op) => await writer.write(op) })
  app.decorate('audit', audit)
  app.decorate('events', events)
  app.decorate('sessions', sessions)
  app.decorate('ledger', new SqliteRunLedger({ store: runStore, sessions, audit, events, writer }))
  // interactions join the search index in batches, off the request path; a full batch is followed at once by the next
  let indexing: NodeJS.Immediate | undefined
  const index = (): void => {
    indexing = undefined
    writer.write(() => sessions.indexPending()).then((n) => {
      if (n === INDEX_BATCH && indexer !== undefined) indexing = setImmediate(index)
    }, (err: unknown) => { app.log.warn({ err }, 'indexing interactions failed; the next batch tries again') })
  }
  let indexer: NodeJS.Timeout | undefined = setInterval(() => { if (indexing === undefined) index() }, INDEX_INTERVAL_MS).unref()
  app.addHook('onReady', async () => { db.pragma(`busy_timeout = ${config.DB_BUSY_TIMEOUT_MS}`) })
  return {
    quiesce: async () => {
      clearInterval(indexer)
      indexer = undefined
      if (indexing !== undefined) clearImmediate(indexing)
      db.pragma(`busy_timeout = ${Math.min(BLOCKING_BUSY_TIMEOUT_MS, Math.floor(config.CLOSE_GRACE_MS / 4))}`)
      writer.close()
    },
    close: async () => {
      db.close()
      await checkpointer?.close()
    }
  }
}

/** PostgreSQL at DATABASE_URL, shared with every other instance and worker on it. */
async function postgres (app: FastifyInstance): Promise<Closing> {
  const config = app.config
  // DATA_DIR still holds this instance's audit checkpoints and the local agents' workspaces
  ensureWritableDir(config.DATA_DIR, 'audit-checkpoints.jsonl')
  const log = app.log.child({ component: 'postgres' })
  const pool = await openPostgres(config.DATABASE_URL, {
    max: config.DB_POOL_MAX,
    applicationName: `agent-host ${app.instanceId}`,
    onIdleError: (err) => { log.warn({ err }, 'a pooled PostgreSQL connection failed while idle; it is replaced on next use') },
    onMigration: (step, index, pending) => { log.info({ version: step.version, step: index + 1, of: pending }, `migrating: ${step.description}`) }
  })
  let audit: PgAuditLog
  try {
    audit = await PgAuditLog.open(pool, new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config)))
  } catch (err) {
    await pool.end()
    throw err
  }
  const notifications = new PgNotifications({ connectionString: config.DATABASE_URL, application_name: `agent-host ${app.instanceId} (listen)` }, log)
  await notifications.start()
  const writer = new PgGroupWriter(pool)
  const events = new PgEventStore(pool)
  const sessions = new PgSessionStore(pool, writer)
  app.decorate('storage', { kind: 'postgres', pool, writer, notifications, audit, events, write: async (op) => await op() })
  app.decorate('audit', audit)
  app.decorate('events', events)
  app.decorate('sessions', sessions)
  app.decorate('ledger', new PgRunLedger({ pool, writer, notifications, sessions, audit, events }))
  return {
    quiesce: async () => { await writer.drain() },
    close: async () => {
      await notifications.close()
      await pool.end()
    }
  }
}

export default fp(storage, { name: 'storage', fastify: '5.x', dependencies: ['config'] })
