import { createHash } from 'node:crypto'
import type { Db } from './database.js'
import { canonicalJson } from './canonical-json.js'

/** The `previous_hash` of the first row. */
export const AUDIT_GENESIS = '0'.repeat(64)

/** What a caller records. */
export interface AuditInput {
  actor: string
  action: string
  resource: string
  success: boolean
  request_id?: string | null
  root_request_id?: string | null
  trace_id?: string | null
  details?: Record<string, unknown> | null
}

/** A stored row: the input, its place in the chain and its hashes. */
export interface AuditRow {
  audit_id: number
  timestamp: string
  actor: string
  action: string
  resource: string
  success: boolean
  request_id: string | null
  root_request_id: string | null
  trace_id: string | null
  details: Record<string, unknown> | null
  previous_hash: string
  integrity_hash: string
}

/** The outcome of {@link AuditLog.verify}. */
export interface AuditVerification {
  ok: boolean
  rows: number
  /** The audit_id where the chain first breaks (a missing id is reported as that id). */
  first_bad_row?: number
  reason?: string
}

export interface AuditQuery {
  actor?: string
  action?: string
  resource?: string
  request_id?: string
  since?: string
  /** Rows after this audit_id (pagination cursor). */
  after?: number
  limit?: number
}

/** SHA-256 over the canonical JSON (RFC 8785, sorted keys) of the row without its own hash. */
export function hashAuditRow (row: Omit<AuditRow, 'integrity_hash'>): string {
  return createHash('sha256').update(canonicalJson(row)).digest('hex')
}

interface RawRow extends Omit<AuditRow, 'success' | 'details'> { success: number, details: string | null }

function fromRaw (raw: RawRow): AuditRow {
  return { ...raw, success: raw.success === 1, details: raw.details === null ? null : JSON.parse(raw.details) as Record<string, unknown> }
}

/**
 * The tamper-evident audit log: append-only rows, each chained to the previous one by hash, and
 * a head row naming the last one, so an edited, deleted, reordered or truncated row is detected.
 * Appends run in an immediate transaction: processes sharing the file take turns and the chain
 * never forks.
 */
export class AuditLog {
  readonly #db: Db
  readonly #append: (input: AuditInput) => AuditRow

  constructor (db: Db) {
    this.#db = db
    const head = db.prepare('SELECT audit_id, integrity_hash FROM audit_head WHERE id = 1')
    const insert = db.prepare(`INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, request_id,
      root_request_id, trace_id, details, previous_hash, integrity_hash)
      VALUES (@audit_id, @timestamp, @actor, @action, @resource, @success, @request_id, @root_request_id, @trace_id, @details, @previous_hash, @integrity_hash)`)
    const moveHead = db.prepare(`INSERT INTO audit_head (id, audit_id, integrity_hash) VALUES (1, @audit_id, @integrity_hash)
      ON CONFLICT (id) DO UPDATE SET audit_id = excluded.audit_id, integrity_hash = excluded.integrity_hash`)
    const append = db.transaction((input: AuditInput): AuditRow => {
      const last = head.get() as { audit_id: number, integrity_hash: string } | undefined
      const unhashed: Omit<AuditRow, 'integrity_hash'> = {
        audit_id: (last?.audit_id ?? 0) + 1,
        timestamp: new Date().toISOString(),
        actor: input.actor,
        action: input.action,
        resource: input.resource,
        success: input.success,
        request_id: input.request_id ?? null,
        root_request_id: input.root_request_id ?? null,
        trace_id: input.trace_id ?? null,
        details: input.details ?? null,
        previous_hash: last?.integrity_hash ?? AUDIT_GENESIS
      }
      const row: AuditRow = { ...unhashed, integrity_hash: hashAuditRow(unhashed) }
      insert.run({ ...row, success: row.success ? 1 : 0, details: row.details === null ? null : JSON.stringify(row.details) })
      moveHead.run(row)
      return row
    })
    this.#append = (input) => append.immediate(input)
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
    const sql = `SELECT * FROM audit_log WHERE ${where.join(' AND ')} ORDER BY audit_id LIMIT @limit`
    const rows = this.#db.prepare(sql).all({ ...query, after: query.after ?? 0, limit: query.limit ?? 100 }) as RawRow[]
    return rows.map(fromRaw)
  }

  /** Rows in the log. */
  count (): number {
    return (this.#db.prepare('SELECT count(*) AS n FROM audit_log').get() as { n: number }).n
  }

  /** Walk the whole chain and check every link, then the head. */
  verify (): AuditVerification {
    let previous = AUDIT_GENESIS
    let expected = 1
    for (const raw of this.#db.prepare('SELECT * FROM audit_log ORDER BY audit_id').iterate() as Iterable<RawRow>) {
      let row: AuditRow
      try {
        row = fromRaw(raw)
      } catch {
        return { ok: false, rows: expected - 1, first_bad_row: raw.audit_id, reason: 'details are not JSON' }
      }
      if (row.audit_id !== expected) return { ok: false, rows: expected - 1, first_bad_row: expected, reason: `row ${expected} is missing` }
      if (row.previous_hash !== previous) return { ok: false, rows: expected - 1, first_bad_row: row.audit_id, reason: 'previous_hash does not match the row before' }
      const { integrity_hash: stored, ...unhashed } = row
      if (hashAuditRow(unhashed) !== stored) return { ok: false, rows: expected - 1, first_bad_row: row.audit_id, reason: 'integrity_hash does not match the row' }
      previous = stored
      expected++
    }
    const rows = expected - 1
    const head = this.#db.prepare('SELECT audit_id, integrity_hash FROM audit_head WHERE id = 1').get() as { audit_id: number, integrity_hash: string } | undefined
    if ((head?.audit_id ?? 0) !== rows || (head !== undefined && head.integrity_hash !== previous)) {
      const truncated = (head?.audit_id ?? 0) !== rows
      return {
        ok: false,
        rows,
        first_bad_row: truncated ? rows + 1 : rows,
        reason: truncated ? 'the head names a row that is gone (rows were removed from the end)' : 'the head does not match the last row'
      }
    }
    return { ok: true, rows }
  }
}
