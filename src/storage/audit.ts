import { createHash } from 'node:crypto'
import type { AuditCheckpoint, FoundCheckpoint } from './audit-checkpoints.js'
import { AuditKeyring } from './audit-key.js'
import type { Awaitable } from './awaitable.js'
import { canonicalJson } from './canonical-json.js'
import type { Viewer } from './tenants.js'
import { auditDetails, auditText, cutText } from './audit-text.js'

/** The `previous_hash` of the first row. */
export const AUDIT_GENESIS = '0'.repeat(64)

/**
 * What a caller records. Every string in it (`details` too, keys included) is stored and hashed as
 * `auditText` makes it: a lone surrogate or NUL becomes U+FFFD.
 */
export interface AuditInput {
  /** Who acted: the authenticated principal (a key id, `jwt:<sub>`), `anonymous` with auth off, or the host. */
  actor: string
  action: string
  resource: string
  success: boolean
  /** Who the request says it is for (the envelope's `context.user.user_id`): a claim, not an identity. Cut to 256 characters (a surrogate pair is never cut in half). */
  claimed_user?: string | null
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
  claimed_user: string | null
  request_id: string | null
  root_request_id: string | null
  trace_id: string | null
  details: Record<string, unknown> | null
  /** The audit key that signed it (`AuditKeyring`); null: a plain SHA-256 link (no AUDIT_KEY). */
  key_id: string | null
  previous_hash: string
  integrity_hash: string
}

/** How many rows {@link AuditStore.verify} checks between two calls of its `onProgress`. */
export const AUDIT_PROGRESS_ROWS = 1000

/** The most faults a verification lists; it counts them all ({@link AuditVerification.fault_count}). */
export const AUDIT_MAX_FAULTS = 100

/** One thing wrong with the log. */
export interface AuditFault {
  /** The audit_id where it is seen (none for a fault of the whole log). */
  row?: number
  /** Rows that should be there and are not. */
  missing?: { from: number, to: number }
  reason: string
}

/** The outcome of {@link AuditStore.verify}. */
export interface AuditVerification {
  ok: boolean
  /** Rows from the first up to the first fault, all found good (every row when `ok`). */
  rows: number
  /** Of them, rows signed with an audit key. */
  keyed_rows: number
  /** Rows read, good or bad. */
  rows_read: number
  /** The audit_id where the log first goes wrong (the first fault's row). */
  first_bad_row?: number
  /** The first fault's missing rows: rows that should be there and are not (a checkpoint counted them, or ids jump). */
  missing?: { from: number, to: number }
  /** The first fault. */
  reason?: string
  /** Every fault found, in the order found (at most {@link AUDIT_MAX_FAULTS}); absent when `ok`. */
  faults?: AuditFault[]
  /** How many faults were found (`faults` lists the first of them); absent when `ok`. */
  fault_count?: number
  /** Checkpoints the log was held against. */
  checkpoints_checked: number
  seconds: number
  rows_per_second: number
}

export interface AuditQuery {
  actor?: string
  /**
   * Only rows whose actor this viewer sees (by principal: `storage/tenants.ts`). Exact for one owner
   * and for a tenant other than the default; for the default tenant the rows of the host's own
   * actors remain, which `seesActor` removes.
   */
  viewer?: Viewer
  action?: string
  resource?: string
  request_id?: string
  since?: string
  /** Rows after this audit_id (pagination cursor). */
  after?: number
  limit?: number
}

/** What {@link AuditStore.verify} may be told besides the checkpoints. */
export interface AuditVerifyOptions {
  /**
   * Called every {@link AUDIT_PROGRESS_ROWS} rows checked, `total` being the last row's id (what a
   * whole log holds).
   */
  onProgress?: (rows: number, total: number) => void
  /**
   * The DATA_DIR checkpoint file the checkpoints were read from (besides any given by hand): a
   * server with an audit key writes a signed checkpoint there as soon as it has signed its boot
   * row, so with a key, a log that holds such a row while no checkpoint signed with a key this
   * verifier holds was given has lost that file. Unset (a caller that holds no file): not checked.
   */
  checkpointFile?: string
  /** Faults found before the walk (lines of a checkpoint file that are not checkpoints): reported first. */
  problems?: readonly string[]
}

/** The actor and action of the row a server appends at boot (then it writes a checkpoint). */
export const AUDIT_BOOT = { actor: 'agent-host', action: 'boot' } as const

/**
 * The audit log, whichever database holds it: {@link SqliteAuditLog} (SQLite, answers at once, composable
 * inside the group commit) and `PgAuditLog` (PostgreSQL, `src/storage/postgres/audit.ts`) keep the
 * same chain, with the same hashes, verdicts and messages. Callers `await` every call.
 */
export interface AuditStore {
  /** Whether new rows are signed with an audit key. */
  readonly keyed: boolean
  /** Append one row at the end of the chain and return it. */
  append (input: AuditInput): Awaitable<AuditRow>
  /** Rows matching `query`, oldest first (100 unless `query.limit` says otherwise). */
  list (query?: AuditQuery): Awaitable<AuditRow[]>
  /** Rows in the log. */
  count (): Awaitable<number>
  /** The log's size and head now, signed with the current audit key (unsigned without one). */
  checkpoint (): Awaitable<AuditCheckpoint>
  /**
   * Walk the whole log, one row at a time (constant memory), and hold it against the checkpoints:
   * every row well formed (`details` in the one form the host writes them) and in sequence, every
   * link and hash (HMAC with the key the row names), no plain row after a keyed one, the head, and
   * each checkpoint's row count and head hash (a signed checkpoint must carry a good signature).
   * With an audit key, the log must hold signed rows, and a log that records a keyed boot needs a
   * signed checkpoint (see {@link AuditVerifyOptions.checkpointFile}). The walk goes on past a
   * fault: every fault is reported, the first one as `first_bad_row`, `missing` and `reason`.
   */
  verify (checkpoints?: readonly FoundCheckpoint[], options?: AuditVerifyOptions): Awaitable<AuditVerification>
}

/** The longest claimed user kept in a row. */
const MAX_CLAIMED_USER = 256

/** What is hashed: the canonical JSON (RFC 8785) of the row without its own hash, and without the columns a row from before them lacks. */
function canonicalForm (row: Omit<AuditRow, 'integrity_hash'>): string {
  const { key_id: keyId, claimed_user: claimed, ...rest } = row
  return canonicalJson({ ...rest, ...(keyId !== null ? { key_id: keyId } : {}), ...(claimed !== null ? { claimed_user: claimed } : {}) })
}

/**
 * A row's integrity hash: HMAC-SHA256 with its audit key when it names one, else SHA-256, over its
 * canonical form (which holds the previous row's hash: the chain).
 * @returns undefined when the row names a key the keyring does not hold
 */
export function hashAuditRow (row: Omit<AuditRow, 'integrity_hash'>, keyring?: AuditKeyring): string | undefined {
  const text = canonicalForm(row)
  if (row.key_id === null) return createHash('sha256').update(text).digest('hex')
  return keyring?.sign(row.key_id, text)
}

const text = (value: string | null | undefined): string | null => value == null ? null : auditText(value)

/**
 * The next row of the chain: `input` after the row `previous` (undefined: the first row), stamped
 * now, signed with the keyring's current key (a plain SHA-256 link without one). Every store makes
 * its rows here, while it holds the chain's lock: every string as `auditText` makes it, so the row
 * hashed is the row stored.
 */
export function chainAuditRow (input: AuditInput, previous: { audit_id: number, integrity_hash: string } | undefined, keyring: AuditKeyring): AuditRow {
  const unhashed: Omit<AuditRow, 'integrity_hash'> = {
    audit_id: (previous?.audit_id ?? 0) + 1,
    timestamp: new Date().toISOString(),
    actor: auditText(input.actor),
    action: auditText(input.action),
    resource: auditText(input.resource),
    success: input.success,
    claimed_user: input.claimed_user == null ? null : cutText(auditText(input.claimed_user), MAX_CLAIMED_USER),
    request_id: text(input.request_id),
    root_request_id: text(input.root_request_id),
    trace_id: text(input.trace_id),
    details: input.details == null ? null : auditDetails(input.details),
    key_id: keyring.current?.id ?? null,
    previous_hash: previous?.integrity_hash ?? AUDIT_GENESIS
  }
  return { ...unhashed, integrity_hash: hashAuditRow(unhashed, keyring) as string }
}

/** A row as the audit_log table stores it (both databases): `success` 0 or 1, `details` as JSON text. */
export type AuditRawRow = Omit<AuditRow, 'success' | 'details'> & { success: number, details: string | null }

/** A row as it is stored. */
export function storedAuditRow (row: AuditRow): AuditRawRow {
  return { ...row, success: row.success ? 1 : 0, details: row.details === null ? null : JSON.stringify(row.details) }
}

/** A stored row as callers see it. */
export function auditRowFromRaw (raw: AuditRawRow): AuditRow {
  // a database from before migration 12 has neither column
  return { ...raw, claimed_user: raw.claimed_user ?? null, key_id: raw.key_id ?? null, success: raw.success === 1, details: raw.details === null ? null : JSON.parse(raw.details) as Record<string, unknown> }
}

/** The canonical text a checkpoint's signature covers. */
const checkpointText = (c: Pick<AuditCheckpoint, 'rows' | 'head' | 'at' | 'key_id'>): string => canonicalJson({ rows: c.rows, head: c.head, at: c.at, key_id: c.key_id })

/** A checkpoint of the log whose head row is `head` (undefined: an empty log), stamped now and signed with the keyring's current key. */
export function signAuditCheckpoint (head: { audit_id: number, integrity_hash: string } | undefined, keyring: AuditKeyring): AuditCheckpoint {
  const body = { rows: head?.audit_id ?? 0, head: head?.integrity_hash ?? AUDIT_GENESIS, at: new Date().toISOString(), key_id: keyring.current?.id ?? null }
  return { ...body, signature: body.key_id === null ? null : keyring.sign(body.key_id, checkpointText(body)) as string }
}

/**
 * The row of a raw row, or why it is not a well-formed one (the database does not check types: a
 * hash over a re-read value must not hide a change). `details` must be a JSON object in the one
 * form the host writes (`JSON.stringify` of what it parses to): the hash covers the parsed value,
 * so any other text of the same value (a key repeated, which `json_extract` would read otherwise,
 * spacing, escapes) would be an edit the hash cannot see.
 */
function parseRaw (raw: AuditRawRow): AuditRow | string {
  if (raw.success !== 0 && raw.success !== 1) return `success is ${JSON.stringify(raw.success)}, not 0 or 1`
  for (const column of ['timestamp', 'actor', 'action', 'resource', 'previous_hash', 'integrity_hash'] as const) {
    if (typeof raw[column] !== 'string') return `${column} is not text`
  }
  for (const column of ['claimed_user', 'request_id', 'root_request_id', 'trace_id', 'details', 'key_id'] as const) {
    if (raw[column] !== null && raw[column] !== undefined && typeof raw[column] !== 'string') return `${column} is not text`
  }
  let details: Record<string, unknown> | null = null
  if (raw.details !== null) {
    try { details = JSON.parse(raw.details) as Record<string, unknown> } catch { return 'details are not JSON' }
    if (typeof details !== 'object' || details === null || Array.isArray(details) || JSON.stringify(details) !== raw.details) {
      return 'details are not a JSON object in the form the host writes them (a key repeated, spacing or escapes changed): they were edited'
    }
  }
  return { ...raw, claimed_user: raw.claimed_user ?? null, key_id: raw.key_id ?? null, success: raw.success === 1, details }
}

/**
 * One verification of the chain (see {@link AuditStore.verify}), fed by a store: every row in
 * audit_id order ({@link AuditWalk.row}), then {@link AuditWalk.rowsEnd} and the head
 * ({@link AuditWalk.head}), which gives the verdict. It reads nothing itself, so every store gives
 * the same verdicts and messages for the same rows. A fault is noted and the walk goes on: a bad
 * row, found by accident or by design, hides nothing after it.
 */
export class AuditWalk {
  /** The last row's id, told to `onProgress` (a store that has a listener reads it before the rows). */
  total = 0
  readonly #started = process.hrtime.bigint()
  readonly #keyring: AuditKeyring
  readonly #options: AuditVerifyOptions
  readonly #anchors: FoundCheckpoint[] = []
  readonly #byRow = new Map<number, FoundCheckpoint[]>()
  readonly #faults: AuditFault[] = []
  #faultCount = 0
  /** Rows good before the first bad one, and of them the signed ones. */
  #broken = false
  #rows = 0
  #keyedRows = 0
  #read = 0
  #lastId = 0
  #previous = AUDIT_GENESIS
  #seenKeyed = false
  /** Rows whose signature this verifier checked good, and the first of them that is a server's boot. */
  #signed = 0
  #keyedBoot: number | undefined

  constructor (keyring: AuditKeyring, checkpoints: readonly FoundCheckpoint[], options: AuditVerifyOptions = {}) {
    this.#keyring = keyring
    this.#options = options
    for (const problem of options.problems ?? []) this.#fault({ reason: problem })
    for (const c of checkpoints) {
      if (c.signature !== null && c.key_id !== null && !keyring.verify(c.key_id, checkpointText(c), c.signature)) {
        this.#fault({ reason: keyring.key(c.key_id) === undefined ? `the checkpoint ${c.source} is signed by key ${c.key_id}, which this verifier does not hold (set AUDIT_KEY, and AUDIT_KEYS_RETIRED for older keys)` : `the checkpoint ${c.source} has a bad signature: it was edited` })
        continue
      }
      this.#anchors.push(c)
    }
    for (const c of this.#anchors) this.#byRow.set(c.rows, [...(this.#byRow.get(c.rows) ?? []), c])
  }

  #fault (fault: AuditFault): void {
    if (this.#faultCount++ < AUDIT_MAX_FAULTS) this.#faults.push(fault)
  }

  #done (): AuditVerification {
    const seconds = Number(process.hrtime.bigint() - this.#started) / 1e9
    const [first] = this.#faults
    const fault = first === undefined
      ? { ok: true }
      : { ok: false, ...(first.row !== undefined ? { first_bad_row: first.row } : {}), ...(first.missing !== undefined ? { missing: first.missing } : {}), reason: first.reason, faults: this.#faults, fault_count: this.#faultCount }
    return { ...fault, rows: this.#rows, keyed_rows: this.#keyedRows, rows_read: this.#read, checkpoints_checked: this.#anchors.length, seconds: Math.round(seconds * 1000) / 1000, rows_per_second: seconds === 0 ? this.#read : Math.round(this.#read / seconds) }
  }

  /** The verdict when a table of the log cannot be read (dropped, renamed, its columns changed). */
  unreadable (table: 'audit_log' | 'audit_head', err: Error): AuditVerification {
    this.#fault({ reason: `the ${table} table cannot be read: ${err.message}` })
    return this.#done()
  }

  /** Check the next row, noting what is wrong with it. */
  row (raw: AuditRawRow): void {
    this.#read++
    this.#check(raw)
    if (this.#read % AUDIT_PROGRESS_ROWS === 0) this.#options.onProgress?.(this.#read, this.total)
  }

  #check (raw: AuditRawRow): void {
    const expected = this.#lastId + 1
    if (raw.audit_id < expected) {
      this.#fault({ row: raw.audit_id, reason: `row ${raw.audit_id} is out of sequence` })
      this.#broken = true
      return
    }
    const id = raw.audit_id
    const faults = this.#faultCount
    // after a gap the link cannot be checked: the row it names is gone
    const linked = id === expected
    if (!linked) this.#fault({ row: expected, missing: { from: expected, to: id - 1 }, reason: `rows ${expected}..${id - 1} are missing` })
    const row = parseRaw(raw)
    this.#lastId = id
    if (typeof row === 'string') {
      this.#fault({ row: id, reason: `row ${id}: ${row}` })
      this.#broken = true
      this.#previous = String(raw.integrity_hash)
      return
    }
    const { integrity_hash: stored, ...unhashed } = row
    const reason = this.#rowFault(unhashed, stored, linked)
    if (reason !== undefined) this.#fault({ row: id, reason })
    for (const c of this.#byRow.get(id) ?? []) {
      if (c.head !== stored) this.#fault({ row: id, reason: `row ${id} is not the row the checkpoint ${c.source} (${c.at}) ends with: rows up to ${id} were rewritten` })
    }
    this.#previous = stored
    if (this.#faultCount > faults) this.#broken = true
    if (!this.#broken) {
      this.#rows = id
      if (unhashed.key_id !== null) this.#keyedRows++
    }
  }

  /** What is wrong with a well-formed row's link, key or hash, or undefined. */
  #rowFault (unhashed: Omit<AuditRow, 'integrity_hash'>, stored: string, linked: boolean): string | undefined {
    const id = unhashed.audit_id
    if (linked && unhashed.previous_hash !== this.#previous) return `row ${id}: previous_hash does not match the row before`
    if (unhashed.key_id === null && this.#seenKeyed) return `row ${id} is not signed, after signed rows: written without the audit key`
    if (unhashed.key_id !== null) {
      this.#seenKeyed = true
      if (this.#keyring.key(unhashed.key_id) === undefined) return `row ${id} is signed by key ${unhashed.key_id}, which this verifier does not hold (set AUDIT_KEY, and AUDIT_KEYS_RETIRED for older keys)`
    }
    if (hashAuditRow(unhashed, this.#keyring) !== stored) return `row ${id}: integrity_hash does not match the row${unhashed.key_id !== null ? ' (it was changed by someone without the audit key)' : ''}`
    if (unhashed.key_id !== null) {
      this.#signed++
      if (this.#keyedBoot === undefined && unhashed.actor === AUDIT_BOOT.actor && unhashed.action === AUDIT_BOOT.action) this.#keyedBoot = id
    }
    return undefined
  }

  /** After the last row: notes a checkpoint that counted rows that are gone, or names an empty log that was not; read the head next. */
  rowsEnd (): void {
    const rows = this.#lastId
    const beyond = this.#anchors.filter((c) => c.rows > rows).sort((a, b) => b.rows - a.rows)[0]
    if (beyond !== undefined) this.#fault({ row: rows + 1, missing: { from: rows + 1, to: beyond.rows }, reason: `rows ${rows + 1}..${beyond.rows} are missing: the checkpoint ${beyond.source} (${beyond.at}) counted ${beyond.rows}` })
    for (const c of this.#byRow.get(0) ?? []) {
      if (c.head !== AUDIT_GENESIS) this.#fault({ reason: `the checkpoint ${c.source} is not of an empty log` })
    }
  }

  /** The verdict, given the head row (undefined: there is none). */
  head (head: { audit_id: number, integrity_hash: string } | undefined): AuditVerification {
    if ((head?.audit_id ?? 0) !== this.#lastId) this.#fault({ row: this.#lastId + 1, reason: 'the head names a row that is gone (rows were removed from the end)' })
    else if (head !== undefined && head.integrity_hash !== this.#previous) this.#fault({ row: this.#lastId, reason: 'the head does not match the last row' })
    if (this.#keyring.keyed && this.#signed === 0) {
      this.#fault({ reason: 'no row is signed with an audit key this verifier holds, and AUDIT_KEY is set: a server with the key signs its boot row, so the log was rewritten without the key (or no process ever wrote to it with this key: then verify without AUDIT_KEY)' })
    }
    const file = this.#options.checkpointFile
    if (file !== undefined && this.#keyedBoot !== undefined && !this.#anchors.some((c) => c.signature !== null)) {
      this.#fault({ row: this.#keyedBoot, reason: `row ${this.#keyedBoot} is a signed boot, after which the server wrote a signed checkpoint to ${file}, but no signed checkpoint was given: the file was removed or emptied (with PostgreSQL, give the other instances' files with --checkpoint-file)` })
    }
    return this.#done()
  }
}
