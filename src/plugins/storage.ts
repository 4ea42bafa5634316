import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { Config } from '../config.js'
import { AUDIT_BOOT, type AuditStore } from '../storage/audit.js'
import { appendCheckpoint } from '../storage/audit-checkpoints.js'
import { type EventLog } from '../storage/events.js'
import { type RunLedger } from '../storage/run-ledger.js'
import { type HostSessionStore } from '../storage/sessions.js'
import type { AuditReader, Driver, Stores, StoresOptions } from '../storage/stores.js'
import { settleSecrets } from '../storage/secrets.js'
import pkg from '../../package.json' with { type: 'json' }

/** The driver a configuration uses: PostgreSQL when DATABASE_URL is set, else SQLite under DATA_DIR. */
export function driverOf (config: Pick<Config, 'DATABASE_URL'>): Driver {
  return config.DATABASE_URL === '' ? 'sqlite' : 'postgres'
}

/**
 * Every store of the configured driver, opened (and migrated): the one place that picks the driver,
 * for the server (this plugin) and the commands alike. A driver's code is imported only when it is
 * the one in use.
 */
export async function openStores (config: Config, options: StoresOptions): Promise<Stores> {
  let stores: Stores
  if (driverOf(config) === 'postgres') {
    const { openPgStores } = await import('../storage/postgres/index.js')
    stores = await openPgStores(config, options)
  } else {
    const { openSqliteStores } = await import('../storage/sqlite/index.js')
    stores = openSqliteStores(config, options)
  }
  // a missing or wrong secrets key stops the boot here, not at the first push
  try {
    const sealed = await settleSecrets(stores.secrets)
    if (sealed > 0) options.log.info({ sealed }, 'sealed the secrets an earlier version stored in plain text')
  } catch (err) {
    await stores.close()
    throw err
  }
  return stores
}

/** The configured driver's audit log, read-only (`agent-host audit verify`), or why it cannot be read. */
export async function openAuditReader (config: Config): Promise<AuditReader> {
  if (driverOf(config) === 'postgres') {
    const { openPgAuditReader } = await import('../storage/postgres/index.js')
    return await openPgAuditReader(config)
  }
  const { openSqliteAuditReader } = await import('../storage/sqlite/index.js')
  return openSqliteAuditReader(config)
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Everything durable, opened by the configured driver (src/plugins/storage.ts). */
    stores: Stores
    /** The tamper-evident audit log (`stores.audit`). */
    audit: AuditStore
    /** The event log, CloudEvents and graph events (`stores.events`). */
    events: EventLog
    /** Durable sessions: history, values, recall (`stores.sessions`). */
    sessions: HostSessionStore
    /** Everything the run engine reads and writes: runs, journals, answers, interactions, events, audit rows (`stores.ledger`). */
    ledger: RunLedger
  }
}

/**
 * Opens the database (migrating it), makes its stores available, audits boot and shutdown, and
 * closes the database last. The audit log's signed checkpoints go to DATA_DIR on every instance.
 */
async function storage (app: FastifyInstance): Promise<void> {
  const config = app.config
  const stores = await openStores(config, { instanceId: app.instanceId, log: app.log, serving: true })
  app.decorate('stores', stores)
  app.decorate('audit', stores.audit)
  app.decorate('events', stores.events)
  app.decorate('sessions', stores.sessions)
  app.decorate('ledger', stores.ledger)
  app.addHook('onReady', async () => { await stores.ready() })
  const audit = stores.audit
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
    await stores.quiesce()
    await audit.append({ actor: 'agent-host', action: 'shutdown', resource: app.instanceId, success: true, details: { pid: process.pid } })
    await checkpoint()
    await stores.close()
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

export default fp(storage, { name: 'storage', fastify: '5.x', dependencies: ['config'] })
