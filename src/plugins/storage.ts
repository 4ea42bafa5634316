import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { join } from 'node:path'
import { Checkpointer } from '../storage/checkpointer.js'
import { DB_FILE, openDatabase, type Db } from '../storage/database.js'
import { AuditLog } from '../storage/audit.js'
import { appendCheckpoint } from '../storage/audit-checkpoints.js'
import { AuditKeyring } from '../storage/audit-key.js'
import { auditKeysRetired } from '../config.js'
import { EventStore } from '../storage/events.js'
import { GroupWriter } from '../storage/group-writer.js'
import { SqliteRunLedger, type RunLedger } from '../storage/run-ledger.js'
import { RunStore } from '../storage/runs.js'
import { INDEX_BATCH, SqliteSessionStore } from '../storage/sessions.js'
import pkg from '../../package.json' with { type: 'json' }

/** How often interactions recorded since the last time are added to the search index. */
const INDEX_INTERVAL_MS = 250

/** How long a write may block on another process's lock while the server is not serving (boot, close). */
const BLOCKING_BUSY_TIMEOUT_MS = 5000

declare module 'fastify' {
  interface FastifyInstance {
    /** The SQLite database (DATA_DIR/agent-host.db). */
    db: Db
    /** The tamper-evident audit log. */
    audit: AuditLog
    /** The event log (CloudEvents and graph events). */
    events: EventStore
    /** Runs, their journals and their stored answers. */
    runStore: RunStore
    /** Everything the run engine reads and writes (runs, journals, answers, interactions, events, audit rows). */
    ledger: RunLedger
    /** Durable sessions: history, values, recall. */
    sessions: SqliteSessionStore
    /** Group commit: the run engine's writes, one transaction per turn of the event loop. */
    writer: GroupWriter
  }
}

/**
 * Opens the database (migrating it), makes its stores available, audits boot and shutdown, and
 * closes the database last.
 */
async function storage (app: FastifyInstance): Promise<void> {
  // booting and closing may wait for another process's lock; serving must not (see storage/busy.ts)
  const config = app.config
  const db = openDatabase(config.DATA_DIR, { busyTimeoutMs: BLOCKING_BUSY_TIMEOUT_MS, cacheKiB: config.DB_CACHE_KIB, pageSize: config.DB_PAGE_SIZE, autoCheckpoint: config.DB_CHECKPOINT_INTERVAL_MS === 0 })
  const checkpointer = config.DB_CHECKPOINT_INTERVAL_MS === 0
    ? undefined
    : new Checkpointer(join(config.DATA_DIR, DB_FILE), config.DB_CHECKPOINT_INTERVAL_MS, (err) => {
      app.log.error({ err }, 'the checkpoint worker failed: SQLite checkpoints by itself again')
      db.pragma('wal_autocheckpoint = 1000')
    })
  let audit: AuditLog
  try {
    audit = new AuditLog(db, new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config)))
  } catch (err) {
    db.close()
    throw err
  }
  if (!audit.keyed) app.log.warn('AUDIT_KEY is not set: the audit log shows accidental damage only; anyone who can write DATA_DIR can rewrite it unseen. Set AUDIT_KEY (kept outside DATA_DIR) for a log an auditor can trust')
  const writer = new GroupWriter(db, { budgetMs: config.DB_WRITE_BUDGET_MS })
  app.decorate('db', db)
  app.decorate('writer', writer)
  app.decorate('audit', audit)
  app.decorate('events', new EventStore(db))
  const runStore = new RunStore(db)
  app.decorate('runStore', runStore)
  const sessions = new SqliteSessionStore(db, writer)
  app.decorate('sessions', sessions)
  app.decorate('ledger', new SqliteRunLedger({ store: runStore, sessions, audit, events: app.events, writer }))
  // interactions join the search index in batches, off the request path; a full batch is followed at once by the next
  let indexing: NodeJS.Immediate | undefined
  const index = (): void => {
    indexing = undefined
    writer.write(() => sessions.indexPending()).then((n) => {
      if (n === INDEX_BATCH && indexer !== undefined) indexing = setImmediate(index)
    }, (err: unknown) => { app.log.warn({ err }, 'indexing interactions failed; the next batch tries again') })
  }
  let indexer: NodeJS.Timeout | undefined = setInterval(() => { if (indexing === undefined) index() }, INDEX_INTERVAL_MS).unref()
  audit.append({ actor: 'agent-host', action: 'boot', resource: app.instanceId, success: true, details: { version: pkg.version, pid: process.pid } })
  // signed checkpoints outside the database: what catches rows cut from the end of the log
  let checkpointed = -1
  const checkpoint = (): void => {
    const now = audit.checkpoint()
    if (now.rows === checkpointed) return
    appendCheckpoint(config.DATA_DIR, now)
    checkpointed = now.rows
  }
  checkpoint()
  const checkpoints = config.AUDIT_CHECKPOINT_INTERVAL_MS === 0
    ? undefined
    : setInterval(() => {
      try { checkpoint() } catch (err) { app.log.error({ err }, 'writing the audit checkpoint failed; the next interval tries again') }
    }, config.AUDIT_CHECKPOINT_INTERVAL_MS).unref()
  app.addHook('onReady', async () => { db.pragma(`busy_timeout = ${config.DB_BUSY_TIMEOUT_MS}`) })
  app.addHook('onClose', async () => {
    clearInterval(indexer)
    indexer = undefined
    if (indexing !== undefined) clearImmediate(indexing)
    db.pragma(`busy_timeout = ${Math.min(BLOCKING_BUSY_TIMEOUT_MS, Math.floor(config.CLOSE_GRACE_MS / 4))}`)
    writer.close()
    clearInterval(checkpoints)
    audit.append({ actor: 'agent-host', action: 'shutdown', resource: app.instanceId, success: true, details: { pid: process.pid } })
    checkpoint()
    db.close()
    await checkpointer?.close()
  })
}

export default fp(storage, { name: 'storage', fastify: '5.x', dependencies: ['config'] })
