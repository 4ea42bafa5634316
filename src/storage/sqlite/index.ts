import { existsSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { parseApiKeys, type Config } from '../../config.js'
import { configuredKeyring } from '../audit-key.js'
import { INDEX_BATCH } from '../sessions.js'
import { SqliteInterruptStore } from './interrupts.js'
import { Lazy, runOnce, type AuditReader, type Stores, type StoresOptions } from '../stores.js'
import { openFileTaskStore } from '../file/index.js'
import { sqlitePushChanges, SqlitePushStore } from './a2a-push.js'
import { sealedPushStores } from '../a2a-push.js'
import { loadSecretKeyring, type SecretKeyring } from '../secret-keyring.js'
import { SqliteStoredSecrets } from './secrets.js'
import { SqliteAuditLog } from './audit.js'
import { SqliteBudgetStore } from './budgets.js'
import { SqliteBusStore } from './bus.js'
import { SqliteCheckpointer } from './checkpointer.js'
import { DB_FILE, openDatabase, type Db } from './database.js'
import { SqliteEventStore } from './events.js'
import { SqliteGroupWriter } from './group-writer.js'
import { SqliteKeyStore } from './keys.js'
import { SqliteMcpSessionStore } from './mcp-sessions.js'
import { SqliteNarrator } from './narrator.js'
import { SqliteRunLedger } from './run-ledger.js'
import { SqliteRunStore } from './runs.js'
import { SqliteSessionStore } from './sessions.js'
import { SqliteTaskStore } from './tasks.js'

/** How often interactions recorded since the last time are added to the search index. */
const INDEX_INTERVAL_MS = 250

/** How long a write may block on another process's lock while the server is not serving (boot, close). */
const BLOCKING_BUSY_TIMEOUT_MS = 5000

/** The stores on SQLite, with what tests of this driver look at: the database and its group writer. */
export interface SqliteStores extends Stores {
  readonly driver: 'sqlite'
  readonly db: Db
  readonly writer: SqliteGroupWriter
  readonly audit: SqliteAuditLog
  readonly events: SqliteEventStore
  readonly sessions: SqliteSessionStore
}

/** DATA_DIR's audit log, read-only: the database is neither made nor migrated. */
export function openSqliteAuditReader (config: Config): AuditReader {
  const file = join(config.DATA_DIR, DB_FILE)
  if (!existsSync(file)) return { problem: `no audit database at ${file}: is --data-dir (or DATA_DIR) right?` }
  const db = new Database(file, { readonly: true, fileMustExist: true })
  return { audit: new SqliteAuditLog(db, configuredKeyring(config), { readOnly: true }), close: async () => { db.close() } }
}

/**
 * DATA_DIR's SQLite database (migrated), and every store on it; the task graph there too with
 * TASK_STORE=sqlite, else in the file store's `tasks.graph.json`. Every write goes through the group
 * writer (one transaction per turn of the event loop). Booting and closing may wait up to 5 s for
 * another process's lock; serving waits DB_BUSY_TIMEOUT_MS at most (see `storage/busy.ts`).
 * Stores are made when first used: a command that lists keys prepares no run ledger.
 */
export function openSqliteStores (config: Config, options: StoresOptions): SqliteStores {
  const log = options.log
  const serving = options.serving
  const checkpointed = serving && config.DB_CHECKPOINT_INTERVAL_MS > 0
  const db = openDatabase(config.DATA_DIR, {
    busyTimeoutMs: BLOCKING_BUSY_TIMEOUT_MS,
    cacheKiB: config.DB_CACHE_KIB,
    pageSize: config.DB_PAGE_SIZE,
    autoCheckpoint: !checkpointed,
    ...(options.onMigration !== undefined ? { onMigration: options.onMigration } : {})
  })
  let audit: SqliteAuditLog
  let keyring: SecretKeyring
  try {
    audit = new SqliteAuditLog(db, configuredKeyring(config))
    keyring = loadSecretKeyring(config, { defaultFile: true, log })
  } catch (err) {
    db.close()
    throw err
  }
  const checkpointer = checkpointed
    ? new SqliteCheckpointer(join(config.DATA_DIR, DB_FILE), config.DB_CHECKPOINT_INTERVAL_MS, (err) => {
      log.error({ err }, 'the checkpoint worker failed: SQLite checkpoints by itself again')
      if (db.open) db.pragma('wal_autocheckpoint = 1000')
    })
    : undefined
  const writer = new SqliteGroupWriter(db, { budgetMs: config.DB_WRITE_BUDGET_MS })
  const events = new SqliteEventStore(db)
  const sessions = new SqliteSessionStore(db, writer, { searchInteractions: config.SESSION_SEARCH === 'all' })
  const write = async <T>(op: () => T | Promise<T>): Promise<T> => await writer.write(op)
  const ledger = new Lazy(() => new SqliteRunLedger({ store: new SqliteRunStore(db), sessions, audit, events, writer }))
  const bus = new Lazy(() => new SqliteBusStore(db))
  const keys = new Lazy(() => new SqliteKeyStore(db, parseApiKeys(config.API_KEYS), audit))
  const tasks = new Lazy(() => config.TASK_STORE === 'sqlite' ? new SqliteTaskStore(db) : openFileTaskStore(config))
  const narrator = new Lazy(() => new SqliteNarrator(events, db))
  const interrupts = new Lazy(() => new SqliteInterruptStore(db, audit, write))
  const mcp = new Lazy(() => new SqliteMcpSessionStore(db, write))
  const budgets = new Lazy(() => new SqliteBudgetStore(db, write))
  const push = new Lazy(() => {
    const store = new SqlitePushStore(db)
    return sealedPushStores({ store, changes: sqlitePushChanges(store, audit, write) }, keyring)
  })

  // interactions join the search index in batches, off the request path; a full batch is followed at once by the next
  let indexing: NodeJS.Immediate | undefined
  let indexer: NodeJS.Timeout | undefined
  const index = (): void => {
    indexing = undefined
    writer.write(() => sessions.indexPending()).then((n) => {
      if (n === INDEX_BATCH && indexer !== undefined) indexing = setImmediate(index)
    }, (err: unknown) => { log.warn({ err }, 'indexing interactions failed; the next batch tries again') })
  }
  if (serving) indexer = setInterval(() => { if (indexing === undefined) index() }, INDEX_INTERVAL_MS).unref()

  const quiesce = runOnce(async () => {
    clearInterval(indexer)
    indexer = undefined
    if (indexing !== undefined) clearImmediate(indexing)
    if (tasks.made) await tasks.value.close()
    db.pragma(`busy_timeout = ${Math.min(BLOCKING_BUSY_TIMEOUT_MS, Math.floor(config.CLOSE_GRACE_MS / 4))}`)
    writer.close()
  })

  return {
    driver: 'sqlite',
    db,
    writer,
    audit,
    events,
    sessions,
    get ledger () {
      if (!serving) throw new Error('the run ledger is a server\'s: open the stores with serving: true')
      return ledger.value
    },
    get bus () { return bus.value },
    get keys () { return keys.value },
    get tasks () { return tasks.value },
    get narrator () { return narrator.value },
    get push () { return push.value },
    secrets: new SqliteStoredSecrets(db, keyring, audit),
    get interrupts () { return interrupts.value },
    get mcp () { return mcp.value },
    get budgets () { return budgets.value },
    rateLimits: undefined,
    streams: undefined,
    connected: true,
    write,
    trace: (tracer) => { writer.trace(tracer) },
    ready: async () => { db.pragma(`busy_timeout = ${config.DB_BUSY_TIMEOUT_MS}`) },
    quiesce,
    close: runOnce(async () => {
      await quiesce()
      db.close()
      await checkpointer?.close()
    })
  }
}
