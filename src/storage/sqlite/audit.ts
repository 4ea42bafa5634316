import { AH_ERR_AUDIT_KEY_MISSING } from '../../errors.js'
import type { AuditCheckpoint, FoundCheckpoint } from '../audit-checkpoints.js'
import { AuditKeyring } from '../audit-key.js'
import type { Db } from './database.js'
import { type AuditInput, type AuditQuery, type AuditRawRow, type AuditRow, type AuditStore, type AuditVerification, type AuditVerifyOptions, AuditWalk, auditRowFromRaw, chainAuditRow, signAuditCheckpoint, storedAuditRow } from '../audit.js'
import { namedViewerSql } from '../tenants.js'

/**
 * The tamper-evident audit log on SQLite: append-only rows, each chained to the previous one by its
 * hash, and a head row naming the last one. With an audit key (`AUDIT_KEY`) each link is an HMAC,
 * so a row cannot be rewritten, inserted or removed, and the chain recomputed, by anyone without
 * the key; checkpoints (`checkpoint()`, kept outside the database) catch rows removed from the end.
 * Appends run in an immediate transaction: processes sharing the file take turns and the chain
 * never forks. Every call answers at once, so an append composes inside the group commit.
 */
export class SqliteAuditLog implements AuditStore {
  readonly #db: Db
  readonly #keyring: AuditKeyring
  readonly #append: (input: AuditInput) => AuditRow

  /**
   * @param options `readOnly`: to verify and list only (`agent-host audit verify` opens the database read-only)
   * @throws AH_ERR_AUDIT_KEY_MISSING when the log's rows are signed and this process has no audit key:
   *   its plain rows would break the chain (a rotated key is fine: the next row is signed with the new one)
   */
  constructor (db: Db, keyring: AuditKeyring = new AuditKeyring(''), options: { readOnly?: boolean } = {}) {
    this.#db = db
    this.#keyring = keyring
    if (options.readOnly === true) {
      this.#append = () => { throw new Error('this audit log was opened to be read') }
      return
    }
    const head = db.prepare('SELECT audit_id, integrity_hash FROM audit_head WHERE id = 1')
    const last = db.prepare('SELECT key_id FROM audit_log ORDER BY audit_id DESC LIMIT 1').get() as { key_id: string | null } | undefined
    if (last?.key_id != null && keyring.current === undefined) throw new AH_ERR_AUDIT_KEY_MISSING(last.key_id)
    const insert = db.prepare(`INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, claimed_user, request_id,
      root_request_id, trace_id, details, key_id, previous_hash, integrity_hash)
      VALUES (@audit_id, @timestamp, @actor, @action, @resource, @success, @claimed_user, @request_id, @root_request_id, @trace_id, @details, @key_id, @previous_hash, @integrity_hash)`)
    const moveHead = db.prepare(`INSERT INTO audit_head (id, audit_id, integrity_hash) VALUES (1, @audit_id, @integrity_hash)
      ON CONFLICT (id) DO UPDATE SET audit_id = excluded.audit_id, integrity_hash = excluded.integrity_hash`)
    const chain = (input: AuditInput): AuditRow => {
      const row = chainAuditRow(input, head.get() as { audit_id: number, integrity_hash: string } | undefined, keyring)
      insert.run(storedAuditRow(row))
      moveHead.run(row)
      return row
    }
    const append = db.transaction(chain).immediate
    // inside a caller's transaction (the group commit's, which holds the write lock) a savepoint of
    // its own adds nothing: the caller's rolls the row and the head back together
    this.#append = (input) => db.inTransaction ? chain(input) : append(input)
  }

  /** Whether new rows are signed with an audit key. */
  get keyed (): boolean {
    return this.#keyring.keyed
  }

  /** Append one row and return it. */
  append (input: AuditInput): AuditRow {
    return this.#append(input)
  }

  /** Rows matching `query`, oldest first. */
  list (query: AuditQuery = {}): AuditRow[] {
    const where: string[] = ['audit_id > @after']
    for (const key of ['actor', 'action', 'resource', 'request_id'] as const) if (query[key] !== undefined) where.push(`${key} = @${key}`)
    if (query.since !== undefined) where.push('timestamp >= @since')
    const { viewer, ...filters } = query
    const seen = namedViewerSql(viewer ?? { all: true }, 'actor')
    where.push(seen.sql)
    const sql = `SELECT * FROM audit_log WHERE ${where.join(' AND ')} ORDER BY audit_id LIMIT @limit`
    const rows = this.#db.prepare(sql).all({ ...filters, ...seen.params, after: query.after ?? 0, limit: query.limit ?? 100 }) as AuditRawRow[]
    return rows.map(auditRowFromRaw)
  }

  /** Rows in the log. */
  count (): number {
    return (this.#db.prepare('SELECT count(*) AS n FROM audit_log').get() as { n: number }).n
  }

  /** The log's size and head now, signed with the current audit key (unsigned without one). */
  checkpoint (): AuditCheckpoint {
    return signAuditCheckpoint(this.#db.prepare('SELECT audit_id, integrity_hash FROM audit_head WHERE id = 1').get() as { audit_id: number, integrity_hash: string } | undefined, this.#keyring)
  }

  /** See {@link AuditStore.verify}. */
  verify (checkpoints: readonly FoundCheckpoint[] = [], options: AuditVerifyOptions = {}): AuditVerification {
    const walk = new AuditWalk(this.#keyring, checkpoints, options)
    let iterator: Iterable<AuditRawRow>
    try {
      if (options.onProgress !== undefined) walk.total = (this.#db.prepare('SELECT max(audit_id) AS n FROM audit_log').get() as { n: number | null }).n ?? 0
      iterator = this.#db.prepare('SELECT * FROM audit_log ORDER BY audit_id').iterate() as Iterable<AuditRawRow>
    } catch (err) {
      return walk.unreadable('audit_log', err as Error)
    }
    for (const raw of iterator) walk.row(raw)
    walk.rowsEnd()
    let head: { audit_id: number, integrity_hash: string } | undefined
    try {
      head = this.#db.prepare('SELECT audit_id, integrity_hash FROM audit_head WHERE id = 1').get() as typeof head
    } catch (err) {
      return walk.unreadable('audit_head', err as Error)
    }
    return walk.head(head)
  }
}
