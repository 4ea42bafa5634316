import type pg from 'pg'
import { AH_ERR_AUDIT_KEY_MISSING } from '../../errors.js'
import type { AuditCheckpoint, FoundCheckpoint } from '../audit-checkpoints.js'
import { AuditKeyring } from '../audit-key.js'
import {
  AuditWalk, auditRowFromRaw, chainAuditRow, signAuditCheckpoint, storedAuditRow,
  type AuditInput, type AuditQuery, type AuditRawRow, type AuditRow, type AuditStore, type AuditVerification, type AuditVerifyOptions
} from '../audit.js'
import { inTransaction, loadedPg, loadPg, PG_LOCKS, PG_TYPES } from './database.js'
import { viewerSql } from '../tenants.js'

/** Rows fetched per round trip while verifying: memory stays constant whatever the log's size. */
const VERIFY_PAGE_ROWS = 1000

const COLUMNS = ['audit_id', 'timestamp', 'actor', 'action', 'resource', 'success', 'claimed_user', 'request_id', 'root_request_id', 'trace_id', 'details', 'key_id', 'previous_hash', 'integrity_hash'] as const

// the rows and the head that names the last of them, in one statement
const INSERT = `WITH added AS (
  INSERT INTO audit_log (${COLUMNS.join(', ')})
  SELECT * FROM unnest(${COLUMNS.map((c, i) => `$${i + 1}::${c === 'audit_id' ? 'bigint' : c === 'success' ? 'smallint' : 'text'}[]`).join(', ')})
  RETURNING audit_id, integrity_hash
)
INSERT INTO audit_head (id, audit_id, integrity_hash) SELECT 1, audit_id, integrity_hash FROM added ORDER BY audit_id DESC LIMIT 1
ON CONFLICT (id) DO UPDATE SET audit_id = excluded.audit_id, integrity_hash = excluded.integrity_hash`

// always one row: the head (nulls for an empty log), the key of the row it names, and the isolation level the append runs in
const HEAD = `SELECT h.audit_id, h.integrity_hash, l.key_id, current_setting('transaction_isolation') AS isolation
FROM (SELECT 1) AS one LEFT JOIN audit_head h ON h.id = 1 LEFT JOIN audit_log l ON l.audit_id = h.audit_id`

/*
 * The chain's lock, then the head, in one round trip (a simple query of two statements: no
 * parameters). Each statement of it takes its own snapshot at READ COMMITTED, so the head is read
 * after the lock is granted and sees the last holder's commit.
 */
const LOCK_AND_HEAD = `SELECT pg_advisory_xact_lock(${PG_LOCKS.audit}); ${HEAD}`

interface Head { audit_id: number, integrity_hash: string }

/**
 * The audit log on PostgreSQL: the chain of {@link SqliteAuditLog} (the same rows, hashes, keys,
 * checkpoints, verdicts and messages; see `src/storage/audit.ts`), ONE chain for every instance
 * and worker on the database. Appends take turns on a transaction-scoped advisory lock
 * (`PG_LOCKS.audit`), held from the moment the head is read until the append's transaction
 * commits, so the chain never forks; `audit_id` being the primary key, an append that read a stale
 * head would fail rather than fork.
 *
 * Checkpoints: each instance appends the checkpoints of {@link PgAuditLog.checkpoint} to its own
 * `DATA_DIR/audit-checkpoints.jsonl` (`appendCheckpoint`), never to the database, which whoever
 * could cut rows could rewrite too. Every instance's checkpoints are of the same chain, so any of
 * them catches rows cut from the end: `agent-host audit verify` (with `DATABASE_URL`) reads the
 * file of its own DATA_DIR, the other instances' files given with `--checkpoint-file`, and copies
 * a monitor kept (`--checkpoint`).
 *
 * Make one with {@link PgAuditLog.open}.
 */
export class PgAuditLog implements AuditStore {
  readonly #pool: pg.Pool
  readonly #keyring: AuditKeyring
  readonly #readOnly: boolean

  private constructor (pool: pg.Pool, keyring: AuditKeyring, readOnly: boolean) {
    this.#pool = pool
    this.#keyring = keyring
    this.#readOnly = readOnly
  }

  /**
   * The audit log of `pool`'s database (migrated: {@link openPostgres}).
   * @param options `readOnly`: to verify and list only (`agent-host audit verify`)
   * @throws AH_ERR_AUDIT_KEY_MISSING when the log's rows are signed and this process has no audit key:
   *   its plain rows would break the chain (a rotated key is fine: the next row is signed with the
   *   new one). Each append checks it again, under the lock: another instance may sign the log later.
   */
  static async open (pool: pg.Pool, keyring: AuditKeyring = new AuditKeyring(''), options: { readOnly?: boolean } = {}): Promise<PgAuditLog> {
    const readOnly = options.readOnly === true
    if (!readOnly && keyring.current === undefined) {
      const { rows } = await pool.query<{ key_id: string | null }>('SELECT key_id FROM audit_log ORDER BY audit_id DESC LIMIT 1')
      const keyId = rows[0]?.key_id
      if (keyId != null) throw new AH_ERR_AUDIT_KEY_MISSING(keyId)
    }
    return new PgAuditLog(pool, keyring, readOnly)
  }

  /** Whether new rows are signed with an audit key. */
  get keyed (): boolean {
    return this.#keyring.keyed
  }

  /** Append one row in a transaction of its own and return it. */
  async append (input: AuditInput): Promise<AuditRow> {
    return await inTransaction(this.#pool, async (client) => await this.appendIn(client, input))
  }

  /**
   * Append one row inside the caller's transaction (`client` has run BEGIN, at the default READ
   * COMMITTED level) and return it; it is in the log once the caller commits, and gone, the chain
   * untouched, if it rolls back. The chain's lock is held until then, so every other append of the
   * cluster waits for this transaction: call it last, just before COMMIT.
   * @throws AH_ERR_AUDIT_KEY_MISSING when the last row is signed and this process has no audit key
   */
  async appendIn (client: pg.ClientBase, input: AuditInput): Promise<AuditRow> {
    return (await this.appendManyIn(client, [input]))[0] as AuditRow
  }

  /**
   * {@link appendIn} for many rows, chained in this order: one lock, one read of the head and one
   * insert however many rows a turn brings.
   */
  async appendManyIn (client: pg.ClientBase, inputs: readonly AuditInput[]): Promise<AuditRow[]> {
    if (this.#readOnly) throw new Error('this audit log was opened to be read')
    if (inputs.length === 0) return []
    // appends of every instance take turns: one chain, never forked
    const results = await client.query(LOCK_AND_HEAD) as unknown as Array<pg.QueryResult<{ audit_id: number | null, integrity_hash: string | null, key_id: string | null, isolation: string }>>
    const head = results[1]?.rows[0] as { audit_id: number | null, integrity_hash: string | null, key_id: string | null, isolation: string }
    if (head.isolation !== 'read committed') throw new Error(`an audit row is appended at the READ COMMITTED level, not ${head.isolation}: its transaction's snapshot would not see the previous append`)
    if (head.key_id !== null && this.#keyring.current === undefined) throw new AH_ERR_AUDIT_KEY_MISSING(head.key_id)
    const rows: AuditRow[] = []
    let previous = head.audit_id === null ? undefined : head as Head
    for (const input of inputs) {
      const row = chainAuditRow(input, previous, this.#keyring)
      rows.push(row)
      previous = row
    }
    const stored = rows.map(storedAuditRow)
    await client.query({ name: 'ah_audit_append_many', text: INSERT, values: COLUMNS.map((c) => stored.map((row) => row[c])) })
    return rows
  }

  /** Rows matching `query`, oldest first. */
  async list (query: AuditQuery = {}): Promise<AuditRow[]> {
    const values: unknown[] = [query.after ?? 0]
    const where: string[] = ['audit_id > $1']
    for (const key of ['actor', 'action', 'resource', 'request_id'] as const) {
      if (query[key] === undefined) continue
      values.push(query[key])
      where.push(`${key} = $${values.length}`)
    }
    if (query.since !== undefined) {
      values.push(query.since)
      // byte order, as SQLite compares text
      where.push(`timestamp >= $${values.length} COLLATE "C"`)
    }
    if (query.viewer !== undefined) where.push(viewerSql(query.viewer, 'actor', (value) => `$${values.push(value)}`))
    values.push(query.limit ?? 100)
    const { rows } = await this.#pool.query<AuditRawRow>(`SELECT * FROM audit_log WHERE ${where.join(' AND ')} ORDER BY audit_id LIMIT $${values.length}`, values)
    return rows.map(auditRowFromRaw)
  }

  /** Rows in the log. */
  async count (): Promise<number> {
    const { rows } = await this.#pool.query<{ n: number }>('SELECT count(*) AS n FROM audit_log')
    return (rows[0] as { n: number }).n
  }

  /** The log's size and head now, signed with the current audit key (unsigned without one). */
  async checkpoint (): Promise<AuditCheckpoint> {
    const { rows } = await this.#pool.query<Head>('SELECT audit_id, integrity_hash FROM audit_head WHERE id = 1')
    return signAuditCheckpoint(rows[0], this.#keyring)
  }

  /**
   * See {@link AuditStore.verify}. The rows and the head are read in one snapshot (a read-only
   * REPEATABLE READ transaction, through a cursor): instances appending meanwhile are not seen half.
   * @throws the database's error when it fails for another reason than the log's tables (the
   *   server went away): that says nothing about the log
   */
  async verify (checkpoints: readonly FoundCheckpoint[] = [], options: AuditVerifyOptions = {}): Promise<AuditVerification> {
    const walk = new AuditWalk(this.#keyring, checkpoints, options)
    const client = await this.#pool.connect()
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')
      return await this.#walk(client, walk, options.onProgress !== undefined)
    } finally {
      await client.query('ROLLBACK').then(() => { client.release() }, (err: Error) => { client.release(err) })
    }
  }

  async #walk (client: pg.PoolClient, walk: AuditWalk, counted: boolean): Promise<AuditVerification> {
    try {
      if (counted) walk.total = (await client.query<{ n: number | null }>('SELECT max(audit_id) AS n FROM audit_log')).rows[0]?.n ?? 0
      await client.query('DECLARE audit_rows NO SCROLL CURSOR FOR SELECT * FROM audit_log ORDER BY audit_id')
    } catch (err) {
      return unreadable(walk, 'audit_log', err)
    }
    for (;;) {
      const { rows } = await client.query<AuditRawRow>(`FETCH ${VERIFY_PAGE_ROWS} FROM audit_rows`)
      if (rows.length === 0) break
      for (const raw of rows) walk.row(raw)
    }
    walk.rowsEnd()
    let head: Head | undefined
    try {
      head = (await client.query<Head>('SELECT audit_id, integrity_hash FROM audit_head WHERE id = 1')).rows[0]
    } catch (err) {
      return unreadable(walk, 'audit_head', err)
    }
    return walk.head(head)
  }
}

/** A table the verdict names when the query failed on it (class 42: it is gone, renamed, its columns changed, or not ours to read); other failures are rethrown. */
function unreadable (walk: AuditWalk, table: 'audit_log' | 'audit_head', err: unknown): AuditVerification {
  if (err instanceof loadedPg().DatabaseError && err.code?.startsWith('42') === true) return walk.unreadable(table, err)
  throw err
}

/** `url` without its user, password or parameters: for messages. */
export function databaseName (url: string): string {
  const u = new URL(url)
  return `${u.protocol}//${u.host}${u.pathname}`
}

/**
 * A pool on `url` for `agent-host audit verify`, opened as it opens SQLite: read-only sessions,
 * never migrated (a wrong URL must not be given a schema). Close it with `end()`.
 * @returns undefined when the database holds no agent-host schema (after closing the pool)
 * @throws the connection's error when the server cannot be reached
 */
export async function openAuditReader (url: string): Promise<pg.Pool | undefined> {
  const { Pool } = await loadPg()
  const pool = new Pool({ connectionString: url, max: 1, application_name: 'agent-host audit verify', options: '-c default_transaction_read_only=on', types: PG_TYPES })
  // an idle connection the server drops is replaced at the next query, which reports its own failure
  pool.on('error', () => {})
  try {
    const { rows } = await pool.query<{ found: boolean }>("SELECT to_regclass('schema_migrations') IS NOT NULL AS found")
    if (rows[0]?.found === true) return pool
  } catch (err) {
    await pool.end()
    throw err
  }
  await pool.end()
  return undefined
}
