import type { InteractionRecord } from '../protocol/session.js'
import type { Awaitable } from './awaitable.js'
import type { AuditInput } from './audit.js'
import type { EventInput } from './events.js'
import type { JournalRow, MarkFilter, NewRun, Renewal, RunCursor, RunFilter, RunRecord } from './runs.js'
import type { Viewer } from './tenants.js'

/** Reading runs and their journals: the engine, the A2A binding and the push sender. */
export interface RunReader {
  get(requestId: string): Awaitable<RunRecord | undefined>
  /** Journal rows after `ord` (0: all), in order; at most `limit` of them (-1: all). */
  rows(requestId: string, afterOrd?: number, limit?: number): Awaitable<JournalRow[]>
  /** The `ord` of the wire packet `streamId`/`seq`, if journaled. */
  ordOf(requestId: string, streamId: string, seq: number): Awaitable<number | undefined>
  /** An agent's runs, newest first, and how many match (A2A `ListTasks`). */
  list(filter: RunFilter, page: { limit: number, before?: { startedAt: number, runId: number } }): Awaitable<{ runs: RunRecord[], total: number }>
  /**
   * One principal's runs of some agents whose envelope's `payload.metadata` carries a binding's
   * mark (MCP's tasks: `tasks/list`), newest first: at most `limit`, after the `before` cursor (the
   * last page's last run).
   */
  marked(filter: MarkFilter, page: { limit: number, before?: RunCursor }): Awaitable<RunRecord[]>
  /** The newest run of an agent whose envelope carries this request id, whoever sent it, or among the runs `viewer` sees. */
  byWireId(agentId: string, wireId: string, viewer?: Viewer): Awaitable<RunRecord | undefined>
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
   * End a run: the queued journal rows, its answer, the session's interaction and the audit row (none
   * when `audit` is undefined: AUDIT_RUNS=failed and the run succeeded), in one transaction fenced by its lease.
   * @returns whether it was ended (false: the lease was lost), and the other runs whose rows were dropped
   */
  finish(end: RunEnd, interaction: InteractionRecord, audit: AuditInput | undefined): Promise<{ ended: boolean, lost: string[] }>
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
