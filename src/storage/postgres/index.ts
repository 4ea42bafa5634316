import type pg from 'pg'
import { parseApiKeys, type Config } from '../../config.js'
import { configuredKeyring } from '../audit-key.js'
import { ensureWritableDir } from '../data-dir.js'
import { PgInterruptStore } from './interrupts.js'
import { Lazy, runOnce, type AuditReader, type Stores, type StoresOptions } from '../stores.js'
import { openFileTaskStore } from '../file/index.js'
import { pgPushChanges, PgPushStore } from './a2a-push.js'
import { sealedPushStores } from '../a2a-push.js'
import { loadSecretKeyring, type SecretKeyring } from '../secret-keyring.js'
import { PgStoredSecrets } from './secrets.js'
import { databaseName, openAuditReader, PgAuditLog } from './audit.js'
import { PgBudgetStore } from './budgets.js'
import { PgBusStore } from './bus.js'
import { openPostgres } from './database.js'
import { PgEventStore } from './events.js'
import { PgGroupWriter } from './group-writer.js'
import { PgKeyStore } from './keys.js'
import { PgMcpSessionStore } from './mcp-sessions.js'
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
  return { audit: await PgAuditLog.open(opened, configuredKeyring(config), { readOnly: true }), close: async () => { await opened.end() } }
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
  let keyring: SecretKeyring
  let notifications: PgNotifications | undefined
  try {
    audit = await PgAuditLog.open(pool, configuredKeyring(config))
    keyring = loadSecretKeyring(config, { defaultFile: false, log })
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
  const sessions = new PgSessionStore(pool, writer, { searchInteractions: config.SESSION_SEARCH === 'all' })
  const streams = options.serving
    ? new PgStreamGate(pool, { max: config.MAX_STREAMS, perCaller: config.MAX_STREAMS_PER_CALLER, instance: options.instanceId, leaseMs: config.RUN_LEASE_MS, onError: (err) => { log.warn({ err }, 'keeping the stream slots\' lease failed; trying again') } })
    : undefined
  const listening = notifications
  const ledger = listening === undefined ? undefined : new Lazy(() => new PgRunLedger({ pool, writer, notifications: listening, sessions, audit, events }))
  const bus = new Lazy(() => new PgBusStore(pool))
  const keys = new Lazy(() => new PgKeyStore(pool, { configKeys: parseApiKeys(config.API_KEYS), audit }))
  const tasks = new Lazy(() => config.TASK_STORE === 'postgres' ? new PgTaskStore(pool) : openFileTaskStore(config))
  const narrator = new Lazy(() => new PgNarrator(pool, events))
  const interrupts = new Lazy(() => new PgInterruptStore(pool, audit))
  const mcp = new Lazy(() => new PgMcpSessionStore(pool, notifications, options.instanceId))
  const budgets = new Lazy(() => new PgBudgetStore(pool))
  const push = new Lazy(() => {
    const store = new PgPushStore(pool)
    return sealedPushStores({ store, changes: pgPushChanges(pool, store, audit) }, keyring)
  })
  // while the database is away, routes that need nothing of it go on answering, uncounted (the limits plugin skips on error)
  const rateLimits = new Lazy(() => pgRateLimitStore(pool, { onPruneError: (err) => { log.warn({ err }, 'pruning ended rate-limit windows failed; the next prune tries again') } }))

  const quiesce = runOnce(async () => {
    await streams?.close()
    if (tasks.made) await tasks.value.close()
    await writer.drain()
  })

  return {
    driver: 'postgres',
    pool,
    audit,
    events,
    sessions,
    get ledger () {
      if (ledger === undefined) throw new Error('the run ledger is a server\'s: open the stores with serving: true')
      return ledger.value
    },
    get bus () { return bus.value },
    get keys () { return keys.value },
    get tasks () { return tasks.value },
    get narrator () { return narrator.value },
    get push () { return push.value },
    secrets: new PgStoredSecrets(pool, keyring, audit),
    get interrupts () { return interrupts.value },
    get mcp () { return mcp.value },
    get budgets () { return budgets.value },
    get rateLimits () { return rateLimits.value },
    streams,
    get connected () { return listening?.connected ?? true },
    write: async (op) => await op(),
    trace: () => {},
    ready: async () => { await streams?.start() },
    quiesce,
    close: runOnce(async () => {
      await quiesce()
      await listening?.close()
      await pool.end()
    })
  }
}
