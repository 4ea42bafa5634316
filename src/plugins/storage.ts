import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { openDatabase, type Db } from '../storage/database.js'
import { AuditLog } from '../storage/audit.js'
import { EventStore } from '../storage/events.js'
import { RunStore } from '../storage/runs.js'
import { SqliteSessionStore } from '../storage/sessions.js'
import pkg from '../../package.json' with { type: 'json' }

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
    /** Durable sessions: history, values, recall. */
    sessions: SqliteSessionStore
  }
}

/**
 * Opens the database (migrating it), makes its stores available, audits boot and shutdown, and
 * closes the database last.
 */
async function storage (app: FastifyInstance): Promise<void> {
  const db = openDatabase(app.config.DATA_DIR, { busyTimeoutMs: app.config.DB_BUSY_TIMEOUT_MS })
  const audit = new AuditLog(db)
  app.decorate('db', db)
  app.decorate('audit', audit)
  app.decorate('events', new EventStore(db))
  app.decorate('runStore', new RunStore(db))
  app.decorate('sessions', new SqliteSessionStore(db))
  audit.append({ actor: 'agent-host', action: 'boot', resource: app.instanceId, success: true, details: { version: pkg.version, pid: process.pid } })
  app.addHook('onClose', async () => {
    audit.append({ actor: 'agent-host', action: 'shutdown', resource: app.instanceId, success: true, details: { pid: process.pid } })
    db.close()
  })
}

export default fp(storage, { name: 'storage', fastify: '5.x', dependencies: ['config'] })
