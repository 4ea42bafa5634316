import type { InteractionRecord } from '../../protocol/session.js'
import type { AuditInput } from '../audit.js'
import type { EventInput } from '../events.js'
import type { SqliteRunStore } from './runs.js'
import { markedRuns, type JournalRow, type MarkFilter, type NewRun, type Renewal, type RunCursor, type RunFilter, type RunRecord } from '../runs.js'
import type { SqliteAuditLog } from './audit.js'
import type { SqliteEventStore } from './events.js'
import type { SqliteSessionStore } from './sessions.js'
import type { SqliteGroupWriter } from './group-writer.js'
import { type Recovery, type RunEnd, type RunLedger } from '../run-ledger.js'
import type { Viewer } from '../tenants.js'

/** The SQLite stores a {@link SqliteRunLedger} writes, all on one database. */
export interface SqliteLedgerStores {
  store: SqliteRunStore
  sessions: SqliteSessionStore
  audit: SqliteAuditLog
  events: SqliteEventStore
  /** Group commit: every write but recovery goes through it. */
  writer: SqliteGroupWriter
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
  async marked (filter: MarkFilter, page: { limit: number, before?: RunCursor }): Promise<RunRecord[]> {
    return await markedRuns(filter.mark, page, (before, limit) => this.#o.store.markCandidates(filter, before, limit))
  }

  byWireId (agentId: string, wireId: string, viewer?: Viewer): RunRecord | undefined { return this.#o.store.byWireId(agentId, wireId, viewer) }
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

  async finish (end: RunEnd, interaction: InteractionRecord, audit: AuditInput | undefined): Promise<{ ended: boolean, lost: string[] }> {
    const { store, sessions } = this.#o
    return await this.#o.writer.write(() => {
      const lost = store.flush()
      if (!store.finish(end.requestId, end.token, end.reason, end.status, end.response)) return { ended: false, lost }
      sessions.recordNow(interaction)
      if (audit !== undefined) this.#o.audit.append(audit)
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
