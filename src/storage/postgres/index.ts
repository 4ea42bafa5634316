import type pg from 'pg'
import { auditKeysRetired, parseApiKeys, type Config } from '../../config.js'
import { AuditKeyring } from '../audit-key.js'
import { ensureWritableDir } from '../data-dir.js'
import type { AuditReader, Stores, StoresOptions } from '../stores.js'
import { openFileTaskStore } from '../file/index.js'
import { pgPushChanges, PgPushStore } from './a2a-push.js'
import { databaseName, openAuditReader, PgAuditLog } from './audit.js'
import { PgBusStore } from './bus.js'
import { openPostgres } from './database.js'
import { PgEventStore } from './events.js'
import { PgGroupWriter } from './group-writer.js'
import { PgKeyStore } from './keys.js'
import { PgNarrator } from './narrator.js'
import { PgNotifications } from './notifications.js'
import { pgRateLimitStore } from './rate-limit-store.js'
import { PgRunLedger } from './run-ledger.js'
import { PgSessionStore } from './sessions.js'
import { PgStreamGate } from './stream-slots.js'
import { PgTaskStore } from './tasks.js'

/** The stores on PostgreSQL, with what tests of this driver look at: the pool. */
export interface PgStores extends Stores {
  readonly driver: 'postgres'
  readonly pool: pg.Pool
  readonly audit: PgAuditLog
  readonly events: PgEventStore
}

/** DATABASE_URL's audit log, read-only: the database is neither migrated nor written. */
export async function openPgAuditReader (config: Config): Promise<AuditReader> {
  const where = databaseName(config.DATABASE_URL)
  let pool
  try {
    pool = await openAuditReader(config.DATABASE_URL)
  } catch (err) {
    return { problem: `cannot read the audit log at ${where}: ${(err as Error).message}` }
  }
  if (pool === undefined) return { problem: `no audit log in ${where}: is DATABASE_URL right?` }
  const opened = pool
  return { audit: await PgAuditLog.open(opened, new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config)), { readOnly: true }), close: async () => { await opened.end() } }
}

/**
 * DATABASE_URL's PostgreSQL database (migrated under an advisory lock), shared by every instance and
 * worker given the same URL, and every store on it; the task graph there too with TASK_STORE=postgres
 * (the default with DATABASE_URL), else in DATA_DIR's `tasks.graph.json`. Each store's write is its
 * own transaction; the run engine's are group-committed. DATA_DIR still holds this instance's audit
 * checkpoints and the local agents' workspaces. A server also listens (`LISTEN/NOTIFY`) for journal
 * growth and cancels on other instances, and counts rate limits and stream slots with them.
 */
export async function openPgStores (config: Config, options: StoresOptions): Promise<PgStores> {
  ensureWritableDir(config.DATA_DIR, 'audit-checkpoints.jsonl')
  const log = options.log.child?.({ component: 'postgres' }) ?? options.log
  const pool = await openPostgres(config.DATABASE_URL, {
    max: config.DB_POOL_MAX,
    applicationName: `agent-host ${options.instanceId}`,
    onIdleError: (err) => { log.warn({ err }, 'a pooled PostgreSQL connection failed while idle; it is replaced on next use') },
    onMigration: options.onMigration ?? ((step, index, pending) => { log.info({ version: step.version, step: index + 1, of: pending }, `migrating: ${step.description}`) })
  })
  let audit: PgAuditLog
  let notifications: PgNotifications | undefined
  try {
    audit = await PgAuditLog.open(pool, new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config)))
    if (options.serving) {
      notifications = new PgNotifications({ connectionString: config.DATABASE_URL, application_name: `agent-host ${options.instanceId} (listen)` }, log)
      await notifications.start()
    }
  } catch (err) {
    await notifications?.close()
    await pool.end()
    throw err
  }
  const writer = new PgGroupWriter(pool)
  const events = new PgEventStore(pool)
  const sessions = new PgSessionStore(pool, writer)
  const streams = options.serving
    ? new PgStreamGate(pool, { max: config.MAX_STREAMS, perCaller: config.MAX_STREAMS_PER_CALLER, instance: options.instanceId, leaseMs: config.RUN_LEASE_MS, onError: (err) => { log.warn({ err }, 'keeping the stream slots\' lease failed; trying again') } })
    : undefined
  const made = new Map<string, unknown>()
  const once = <T>(name: string, make: () => T): T => {
    if (!made.has(name)) made.set(name, make())
    return made.get(name) as T
  }

  let quiesced: Promise<void> | undefined
  let closed: Promise<void> | undefined
  const quiesce = async (): Promise<void> => {
    quiesced ??= (async () => {
      await streams?.close()
      if (made.has('tasks')) await (made.get('tasks') as Stores['tasks']).close()
      await writer.drain()
    })()
    await quiesced
  }

  return {
    driver: 'postgres',
    pool,
    audit,
    events,
    sessions,
    get ledger () {
      if (notifications === undefined) throw new Error('the run ledger is a server\'s: open the stores with serving: true')
      const listening = notifications
      return once('ledger', () => new PgRunLedger({ pool, writer, notifications: listening, sessions, audit, events }))
    },
    get bus () { return once('bus', () => new PgBusStore(pool)) },
    get keys () { return once('keys', () => new PgKeyStore(pool, { configKeys: parseApiKeys(config.API_KEYS), audit })) },
    get tasks () { return once('tasks', () => config.TASK_STORE === 'postgres' ? new PgTaskStore(pool) : openFileTaskStore(config)) },
    get narrator () { return once('narrator', () => new PgNarrator(pool, events)) },
    get push () {
      return once('push', () => {
        const store = new PgPushStore(pool)
        return { store, changes: pgPushChanges(pool, store, audit) }
      })
    },
    get rateLimits () {
      // while the database is away, routes that need nothing of it go on answering, uncounted (the limits plugin skips on error)
      return once('rateLimits', () => pgRateLimitStore(pool, { onPruneError: (err) => { log.warn({ err }, 'pruning ended rate-limit windows failed; the next prune tries again') } }))
    },
    streams,
    get connected () { return notifications?.connected ?? true },
    write: async (op) => await op(),
    trace: () => {},
    ready: async () => { await streams?.start() },
    quiesce,
    close: async () => {
      closed ??= (async () => {
        await quiesce()
        await notifications?.close()
        await pool.end()
      })()
      await closed
    }
  }
}
