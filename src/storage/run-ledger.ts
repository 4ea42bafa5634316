import type { InteractionRecord } from '../protocol/session.js'
import type { Awaitable } from './awaitable.js'
import type { AuditInput, AuditLog } from './audit.js'
import type { EventInput, EventStore } from './events.js'
import type { GroupWriter } from './sqlite/group-writer.js'
import type { JournalRow, NewRun, Renewal, RunFilter, RunRecord, RunStore } from './runs.js'
import type { SqliteSessionStore } from './sessions.js'

/** Reading runs and their journals: the engine, the A2A binding and the push sender. */
export interface RunReader {
  get(requestId: string): Awaitable<RunRecord | undefined>
  /** Journal rows after `ord` (0: all), in order; at most `limit` of them (-1: all). */
  rows(requestId: string, afterOrd?: number, limit?: number): Awaitable<JournalRow[]>
  /** The `ord` of the wire packet `streamId`/`seq`, if journaled. */
  ordOf(requestId: string, streamId: string, seq: number): Awaitable<number | undefined>
  /** An agent's runs, newest first, and how many match (A2A `ListTasks`). */
  list(filter: RunFilter, page: { limit: number, before?: { startedAt: number, runId: number } }): Awaitable<{ runs: RunRecord[], total: number }>
  /** The newest run of an agent whose envelope carries this request id, whoever sent it. */
  byWireId(agentId: string, wireId: string): Awaitable<RunRecord | undefined>
  /** The running runs whose envelope carries this request id (one per principal that sent it). */
  runningByRequestId(wireId: string): Awaitable<RunRecord[]>
  /** Running runs whose lease lapsed before `now`: orphans, whoever owned them. */
  expired(now: number): Awaitable<RunRecord[]>
}

/** What recovering an orphan writes, worked out from the run and its journal (`assist/recover.ts`). */
export interface Recovery {
  /** Journal rows that close what the run left open. */
  added: JournalRow[]
  status: number
  response: unknown
  interaction: InteractionRecord
  audit: AuditInput
}

/** How a run ended, as stored. */
export interface RunEnd {
  requestId: string
  /** The lease token the run is held under: a run recovered elsewhere is not ended again. */
  token: string
  reason: string
  status: number
  response: unknown
}

/**
 * Everything the run engine writes, each call one transaction that is committed before it settles
 * (and, on SQLite, shares its commit with every other write of the turn: `group-writer.ts`). Writes
 * of a running run are fenced by its lease token. Two implementations: {@link SqliteRunLedger}, and
 * the PostgreSQL one in `postgres/run-ledger.ts`.
 */
export interface RunLedger extends RunReader {
  /** Who a session belongs to: its key id, null for a session made before keys, undefined when unknown. */
  sessionKey(sessionId: string): Awaitable<string | null | undefined>
  /**
   * Store a new run; with `claim`, first claim its session for that key (or find it the key's).
   * `taken`: the request id is known (a concurrent start elsewhere: join it); `not-yours`: the
   * session is another key's (nothing is stored).
   */
  start(run: NewRun, claim?: { sessionId: string, userId: string, keyId: string }): Promise<'started' | 'taken' | 'not-yours'>
  /** Queue one journal row of a run held under `token`, for the next {@link flush}. */
  append(requestId: string, token: string, row: JournalRow): void
  /**
   * Make every queued journal row durable, in one transaction. Rows of a run whose lease is no longer
   * held by their token are dropped. Settles once the rows of `requestId` (when given) are committed,
   * whichever call's transaction took them.
   * @returns the request ids whose rows were dropped (their lease was lost)
   */
  flush(requestId?: string): Promise<string[]>
  /**
   * Commit what is queued now rather than at the end of the turn; false when that cannot be done
   * at once (the rows wait for {@link flush}).
   */
  commitNow(): boolean
  /**
   * End a run: the queued journal rows, its answer, the session's interaction and the audit row, in
   * one transaction fenced by its lease.
   * @returns whether it was ended (false: the lease was lost), and the other runs whose rows were dropped
   */
  finish(end: RunEnd, interaction: InteractionRecord, audit: AuditInput): Promise<{ ended: boolean, lost: string[] }>
  /** Extend the leases of runs held under the given tokens until `expiresAt`. */
  renew(held: ReadonlyArray<[requestId: string, token: string]>, expiresAt: number): Promise<Renewal>
  /** Ask the owner of a running run, wherever it is, to cancel it, auditing the request. False when it is not running. */
  requestCancel(requestId: string, audit: AuditInput): Promise<boolean>
  /** Append an audit row. */
  audit(input: AuditInput): Promise<void>
  /** Append an event the run's agent emitted. */
  event(input: EventInput): Promise<void>
  /** Append an event the host wrote about a run (a tool call, a call to another agent) and its audit row, in one transaction. */
  record(event: EventInput, audit: AuditInput): Promise<void>
  /**
   * Recover an orphan exactly once across every process: in one transaction, check that the run is
   * still running and its lease lapsed before `now`, then write what `plan` works out.
   * @returns the run as it is now, and whether this call recovered it
   */
  recover(requestId: string, now: number, plan: (record: RunRecord, rows: JournalRow[]) => Recovery): Promise<{ record: RunRecord | undefined, recovered: boolean }>
  /**
   * Wait until the journal of `requestId` may have grown, or `timeoutMs` passed, or `signal` fired
   * (a follower of a run another process owns; SQLite: the timeout, a poll). Never rejects.
   */
  journalGrew(run: Pick<RunRecord, 'run_id' | 'request_id'>, timeoutMs: number, signal?: AbortSignal): Promise<void>
  /**
   * Be told at once when another process asks to cancel a run (PostgreSQL: a notification; SQLite:
   * never, the owner's heartbeat finds the request instead).
   */
  onCancelRequested(listener: (requestId: string) => void): void
  /** Delete ended runs (and their journals) that ended before `before` (ms since epoch). */
  prune(before: number): Awaitable<number>
  /**
   * Erase a session in one transaction: its ended runs and their journals, its events, the session
   * (history, values, search index), and an audit row made from what was erased.
   */
  eraseSession(sessionId: string, audit: (erased: { runs: number, events: number }) => AuditInput): Promise<{ runs: number, events: number, session: boolean }>
}

/** The SQLite stores a {@link SqliteRunLedger} writes, all on one database. */
export interface SqliteLedgerStores {
  store: RunStore
  sessions: SqliteSessionStore
  audit: AuditLog
  events: EventStore
  /** Group commit: every write but recovery goes through it. */
  writer: GroupWriter
}

/**
 * The run ledger on SQLite: the run store, sessions, audit log and event log of one database, every
 * write through the group writer. A follower of a run another process owns polls its journal.
 */
export class SqliteRunLedger implements RunLedger {
  readonly #o: SqliteLedgerStores

  constructor (options: SqliteLedgerStores) {
    this.#o = options
  }

  get (requestId: string): RunRecord | undefined { return this.#o.store.get(requestId) }
  rows (requestId: string, afterOrd?: number, limit?: number): JournalRow[] { return this.#o.store.rows(requestId, afterOrd, limit) }
  ordOf (requestId: string, streamId: string, seq: number): number | undefined { return this.#o.store.ordOf(requestId, streamId, seq) }
  list (filter: RunFilter, page: { limit: number, before?: { startedAt: number, runId: number } }): { runs: RunRecord[], total: number } { return this.#o.store.list(filter, page) }
  byWireId (agentId: string, wireId: string): RunRecord | undefined { return this.#o.store.byWireId(agentId, wireId) }
  runningByRequestId (wireId: string): RunRecord[] { return this.#o.store.runningByRequestId(wireId) }
  expired (now: number): RunRecord[] { return this.#o.store.expired(now) }
  sessionKey (sessionId: string): string | null | undefined { return this.#o.sessions.keyOf(sessionId) }
  prune (before: number): number { return this.#o.store.prune(before) }

  async start (run: NewRun, claim?: { sessionId: string, userId: string, keyId: string }): Promise<'started' | 'taken' | 'not-yours'> {
    const { store, sessions } = this.#o
    return await this.#o.writer.write(() => {
      if (claim !== undefined && sessions.claim(claim.sessionId, claim.userId, claim.keyId) !== claim.keyId) return 'not-yours'
      return store.start(run) ? 'started' : 'taken'
    })
  }

  append (requestId: string, token: string, row: JournalRow): void {
    this.#o.store.append(requestId, token, row)
  }

  async flush (): Promise<string[]> {
    return await this.#o.writer.write(() => this.#o.store.flush())
  }

  commitNow (): boolean {
    return this.#o.writer.commitNow()
  }

  async finish (end: RunEnd, interaction: InteractionRecord, audit: AuditInput): Promise<{ ended: boolean, lost: string[] }> {
    const { store, sessions } = this.#o
    return await this.#o.writer.write(() => {
      const lost = store.flush()
      if (!store.finish(end.requestId, end.token, end.reason, end.status, end.response)) return { ended: false, lost }
      sessions.recordNow(interaction)
      this.#o.audit.append(audit)
      return { ended: true, lost }
    })
  }

  async renew (held: ReadonlyArray<[requestId: string, token: string]>, expiresAt: number): Promise<Renewal> {
    return this.#o.store.renew(held, expiresAt)
  }

  async requestCancel (requestId: string, audit: AuditInput): Promise<boolean> {
    return await this.#o.writer.write(() => {
      const asked = this.#o.store.requestCancel(requestId)
      if (asked) this.#o.audit.append(audit)
      return asked
    })
  }

  async audit (input: AuditInput): Promise<void> {
    await this.#o.writer.write(() => { this.#o.audit.append(input) })
  }

  async event (input: EventInput): Promise<void> {
    await this.#o.writer.write(() => { this.#o.events.append(input) })
  }

  async eraseSession (sessionId: string, audit: (erased: { runs: number, events: number }) => AuditInput): Promise<{ runs: number, events: number, session: boolean }> {
    return await this.#o.writer.write(() => {
      const erased = { runs: this.#o.store.eraseSession(sessionId), events: this.#o.events.eraseSession(sessionId) }
      const session = this.#o.sessions.erase(sessionId)
      this.#o.audit.append(audit(erased))
      return { ...erased, session }
    })
  }

  async record (event: EventInput, audit: AuditInput): Promise<void> {
    await this.#o.writer.write(() => {
      this.#o.events.append(event, 'host')
      this.#o.audit.append(audit)
    })
  }

  async recover (requestId: string, now: number, plan: (record: RunRecord, rows: JournalRow[]) => Recovery): Promise<{ record: RunRecord | undefined, recovered: boolean }> {
    const { store, sessions, audit } = this.#o
    // its own immediate transaction, not the group commit: the look and the write must not be split by another process's write
    return store.immediate(() => {
      const record = store.get(requestId)
      if (record === undefined || record.state !== 'running' || (record.lease_expires_at !== null && record.lease_expires_at >= now)) {
        return { record, recovered: false }
      }
      const recovery = plan(record, store.rows(requestId))
      store.appendNow(requestId, recovery.added)
      store.finishOrphan(record, recovery.status, recovery.response)
      sessions.recordNow(recovery.interaction)
      audit.append(recovery.audit)
      return { record: store.get(requestId), recovered: true }
    })
  }

  onCancelRequested (): void {}

  async journalGrew (_run: Pick<RunRecord, 'run_id' | 'request_id'>, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted === true) return
    await new Promise<void>((resolve) => {
      const done = (): void => { clearTimeout(timer); signal?.removeEventListener('abort', done); resolve() }
      const timer = setTimeout(done, timeoutMs)
      signal?.addEventListener('abort', done, { once: true })
    })
  }
}
