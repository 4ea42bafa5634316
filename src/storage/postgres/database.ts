import type pg from 'pg'
import { AH_ERR_STORAGE_SCHEMA_TOO_NEW } from '../../errors.js'
import type { MigrationProgress } from '../stores.js'
import { PG_MIGRATIONS } from './migrations.js'

/** The schema version this code writes on PostgreSQL (the last migration's). */
export const PG_SCHEMA_VERSION = PG_MIGRATIONS.at(-1)?.version ?? 0

/**
 * Advisory lock keys (`pg_advisory_lock`): one per thing that happens on one instance at a time.
 * Fixed numbers, so that every instance of every version agrees on them.
 */
export const PG_LOCKS = {
  migrate: 0x61680001,
  audit: 0x61680002,
  reaper: 0x61680003,
  narrator: 0x61680004,
  runRecovery: 0x61680005,
  /** Held by each bus publication until it commits: dedup by key and `seq` in commit order (postgres/bus.ts). */
  busPublish: 0x61680101,
  /** With a task's run key hashed as the second key: one change of that task's push configs at a time (postgres/a2a-push.ts). */
  pushConfigs: 0x61680102,
  /** With a caller's hash as the second key: one acquire of that caller's stream slots at a time (stream-slots.ts). */
  streamQuota: 0x61680010,
  /** Held from an event's insert to its commit: events commit in seq order (postgres/events.ts). */
  events: 0x61680011,
  /** With a key's name hashed as the second key: one create or revoke of that name at a time, so a name is one key's (postgres/keys.ts). */
  keyName: 0x61680012
} as const

let driver: typeof pg | undefined

/**
 * The `pg` driver, imported on first use: a server, worker or CLI without a DATABASE_URL never loads
 * it (some 100 ms of CPU at every start).
 */
export async function loadPg (): Promise<typeof pg> {
  driver ??= (await import('pg')).default
  return driver
}

/** The driver, where {@link loadPg} has run: whatever holds a pool, a client or one of their errors. */
export function loadedPg (): typeof pg {
  if (driver === undefined) throw new Error('the pg driver is not loaded: call loadPg() first')
  return driver
}

/** `int8` (bigint, counts) as a JavaScript number: every one this schema holds is below 2^53 (ids, milliseconds). */
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
    const { types } = loadedPg()
    if (oid === types.builtins.INT8) return (value: string) => Number(value)
    return format === undefined ? types.getTypeParser(oid) : types.getTypeParser(oid, format)
  }) as typeof pg.types.getTypeParser
}

/** The type parsers of {@link openPostgres}'s pools, for a connection that must not migrate (`agent-host audit verify`). */
export const PG_TYPES = types

export interface PostgresOptions {
  /** DB_POOL_MAX: connections this process keeps open at most. */
  max?: number
  /** Shown in `pg_stat_activity.application_name` (the instance id). */
  applicationName?: string
  /** How long a checkout may wait for a free connection before it fails (ms). */
  connectionTimeoutMs?: number
  /** A connection that failed while idle in the pool (the server went away): told, never thrown. */
  onIdleError?: (err: Error) => void
  onMigration?: MigrationProgress
  /**
   * How long the server lets one of these connections sit idle inside a transaction before it ends
   * the session (default 5 000 ms). Our transactions await nothing but the database, so such a
   * session belongs to a frozen process (SIGSTOP, a paused VM): without this, the locks it holds (the
   * event log's, the audit chain's, a task's row) would stall every instance until it woke.
   */
  idleInTransactionTimeoutMs?: number
}

/**
 * Open a pool on `url` and migrate the database (see {@link migratePostgres}). A failure while a
 * connection sits idle (the server restarted) is told to `onIdleError` and the connection dropped:
 * the pool opens a new one for the next query.
 */
export async function openPostgres (url: string, options: PostgresOptions = {}): Promise<pg.Pool> {
  const { Pool } = await loadPg()
  const pool = new Pool({
    connectionString: url,
    max: options.max ?? 10,
    application_name: options.applicationName ?? 'agent-host',
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 10_000,
    idle_in_transaction_session_timeout: options.idleInTransactionTimeoutMs ?? 5000,
    types
  })
  pool.on('error', (err) => { options.onIdleError?.(err) })
  // the pool listens for errors only on idle connections: a checked-out one that the server drops
  // between two statements would otherwise throw an uncaught 'error' and end the process (its caller's
  // next query fails, and the pool discards it on release)
  pool.on('connect', (client) => { client.on('error', () => {}) })
  try {
    await migratePostgres(pool, options.onMigration)
  } catch (err) {
    await pool.end()
    throw err
  }
  return pool
}

/**
 * Apply the migrations the database lacks, each in its own transaction, holding an advisory lock
 * for the whole run: instances booting together wait for each other, and the later ones find
 * nothing left to do. Refuses a database newer than the code.
 * @returns the versions applied now
 */
export async function migratePostgres (pool: pg.Pool, onStep?: MigrationProgress): Promise<number[]> {
  const client = await pool.connect()
  try {
    await client.query('SELECT pg_advisory_lock($1)', [PG_LOCKS.migrate])
    try {
      await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, description text NOT NULL, applied_at text NOT NULL)')
      const { rows } = await client.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations')
      const found = rows[0]?.v ?? 0
      if (found > PG_SCHEMA_VERSION) throw new AH_ERR_STORAGE_SCHEMA_TOO_NEW(redacted(client), found, PG_SCHEMA_VERSION)
      const pending = PG_MIGRATIONS.filter((m) => m.version > found)
      const applied: number[] = []
      for (const [index, step] of pending.entries()) {
        onStep?.({ version: step.version, description: step.description }, index, pending.length)
        await client.query('BEGIN')
        try {
          await client.query(step.sql)
          await client.query('INSERT INTO schema_migrations (version, description, applied_at) VALUES ($1, $2, $3)', [step.version, step.description, new Date().toISOString()])
          await client.query('COMMIT')
        } catch (err) {
          await client.query('ROLLBACK')
          throw err
        }
        applied.push(step.version)
      }
      return applied
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [PG_LOCKS.migrate])
    }
  } finally {
    client.release()
  }
}

/** The database a client is connected to, for messages (never its password). */
function redacted (client: pg.PoolClient): string {
  const { host, port, database } = client as unknown as { host: string, port: number, database: string }
  return `postgres://${host}:${port}/${database}`
}

/**
 * Run `fn` in one transaction on one connection of `pool`: committed when it resolves, rolled back
 * when it throws (and the error rethrown).
 */
export async function inTransaction<T> (pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    let result: T
    try {
      result = await fn(client)
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {})
      throw err
    }
    await client.query('COMMIT')
    return result
  } finally {
    client.release()
  }
}
