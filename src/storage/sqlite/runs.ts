import type { Db } from './database.js'
import { type JournalRow, type MarkFilter, type NewRun, type Renewal, type RunCursor, type RunFilter, type RunRecord, type StoredBatch, batchOf, frameHead, journalRows, markNeedle, ordIn } from '../runs.js'
import { namedViewerSql, viewerSql, type Viewer } from '../tenants.js'

/**
 * Runs and their stream journal (CAP.md §5 "Resuming"): every packet a run produces, in order and
 * byte for byte, so a client that re-POSTs the same envelope can be replayed to; and each run's
 * final JSON answer, so a retried JSON request gets the same response.
 *
 * Every write of a running run is fenced by its lease token: a process whose lease was taken (it
 * was paused or cut off past its lease and the run was recovered elsewhere) changes nothing.
 */
export class SqliteRunStore {
  readonly #db: Db
  /** Packets waiting for the next flush: request id → [lease token, rows]. */
  readonly #pending = new Map<string, { token: string, rows: JournalRow[] }>()
  readonly #flushMany: () => string[]
  readonly #get
  readonly #start
  readonly #append
  readonly #owned
  readonly #runId
  readonly #finish
  readonly #rowsAfter
  readonly #ordOf
  readonly #renew
  readonly #expired

  constructor (db: Db) {
    this.#db = db
    this.#get = db.prepare('SELECT * FROM runs WHERE request_id = ?')
    this.#start = db.prepare(`INSERT INTO runs (request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, owner_key, lease_token, lease_expires_at, started_at)
      VALUES (@request_id, @envelope_hash, @envelope, @session_id, @agent_id, @main_stream_id, 'running', @owner_instance, @owner_pid, @owner_key, @lease_token, @lease_expires_at, @started_at)
      ON CONFLICT (request_id) DO NOTHING`)
    this.#append = db.prepare('INSERT INTO journal (run_id, ord, count, frames) VALUES (?, ?, ?, ?)')
    this.#runId = db.prepare('SELECT run_id FROM runs WHERE request_id = ?').pluck()
    this.#owned = db.prepare("SELECT run_id FROM runs WHERE request_id = ? AND state = 'running' AND lease_token = ?").pluck()
    this.#finish = db.prepare(`UPDATE runs SET state = 'ended', end_reason = @end_reason, ended_at = @ended_at, response_status = @response_status, response = @response
      WHERE request_id = @request_id AND state = 'running' AND lease_token = @lease_token`)
    this.#rowsAfter = db.prepare('SELECT ord, count, frames FROM journal WHERE run_id = (SELECT run_id FROM runs WHERE request_id = ?) AND ord > ? ORDER BY ord LIMIT ?')
    // each frame begins a line and with its stream id and seq; a payload's nested object never begins a line
    this.#ordOf = db.prepare('SELECT ord, count, frames FROM journal WHERE run_id = (SELECT run_id FROM runs WHERE request_id = ?) AND instr(char(10) || frames, ?) > 0 ORDER BY ord LIMIT 1')
    this.#renew = db.prepare("UPDATE runs SET lease_expires_at = ? WHERE request_id = ? AND state = 'running' AND lease_token = ? RETURNING cancel_requested")
    this.#expired = db.prepare("SELECT * FROM runs WHERE state = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < ?)")
    this.#flushMany = db.transaction(() => {
      const lost: string[] = []
      for (const [requestId, { token, rows }] of this.#pending) {
        const runId = this.#owned.get(requestId, token) as number | undefined
        if (runId === undefined) { lost.push(requestId); continue }
        this.#insert(runId, rows)
      }
      this.#pending.clear()
      return lost
    })
  }

  get (requestId: string): RunRecord | undefined {
    return this.#get.get(requestId) as RunRecord | undefined
  }

  /** The running runs whose envelope carries this request id (one per principal that sent it). */
  runningByRequestId (wireId: string): RunRecord[] {
    return this.#db.prepare("SELECT * FROM runs WHERE state = 'running' AND json_extract(envelope, '$.request_id') = ?").all(wireId) as RunRecord[]
  }

  /** The newest run of an agent whose envelope carries this request id, whoever sent it, or among the runs `viewer` sees (an admin's lookup). */
  byWireId (agentId: string, wireId: string, viewer: Viewer = { all: true }): RunRecord | undefined {
    const values: string[] = []
    const seen = viewerSql(viewer, 'owner_key', (value) => { values.push(value); return '?' })
    return this.#db.prepare(`SELECT * FROM runs WHERE agent_id = ? AND json_extract(envelope, '$.request_id') = ? AND ${seen} ORDER BY started_at DESC LIMIT 1`).get(agentId, wireId, ...values) as RunRecord | undefined
  }

  /** Record a new run. Returns false (and changes nothing) when the request id is taken. */
  start (run: NewRun): boolean {
    return this.#start.run({ ...run, started_at: Date.now() }).changes === 1
  }

  /** Queue one packet (or one event kept off the wire) of a run held under `token`, for the next {@link flush}. */
  append (requestId: string, token: string, row: JournalRow): void {
    const entry = this.#pending.get(requestId)
    if (entry === undefined) this.#pending.set(requestId, { token, rows: [row] })
    else entry.rows.push(row)
  }

  /** Whether packets are waiting for a flush. */
  get dirty (): boolean { return this.#pending.size > 0 }

  /**
   * Write every queued packet in one transaction. Rows of a run whose lease is no longer held by
   * the token they were queued under are dropped.
   * @returns the request ids whose rows were dropped (their lease was lost)
   * @throws SQLITE_BUSY when another process holds the write lock (nothing is lost: call again)
   */
  flush (): string[] {
    return this.#pending.size === 0 ? [] : this.#flushMany()
  }

  /**
   * The run is over: store how, and its JSON answer. Fenced: returns false (and changes nothing)
   * when `token` no longer holds the run.
   */
  finish (requestId: string, token: string, endReason: string, status: number, response: unknown): boolean {
    return this.#finish.run({ request_id: requestId, lease_token: token, end_reason: endReason, ended_at: Date.now(), response_status: status, response: JSON.stringify(response) }).changes === 1
  }

  /** Journal rows after `ord` (0: all), in order; at most `limit` of them. */
  rows (requestId: string, afterOrd = 0, limit = -1): JournalRow[] {
    // each stored row holds at least one frame: `limit` of them hold at least `limit` frames
    return journalRows(this.#rowsAfter.all(requestId, afterOrd, limit) as StoredBatch[], afterOrd, limit)
  }

  /**
   * An agent's runs, newest first (A2A `ListTasks`): optionally only one owner's, one session's,
   * in some states and end reasons, or changed (started, or ended) after `changedAfter`; `limit` of
   * them after the `before` cursor (the last page's last run), and how many match in all.
   */
  list (filter: RunFilter, page: { limit: number, before?: { startedAt: number, runId: number } }): { runs: RunRecord[], total: number } {
    const where = ['agent_id = @agentId']
    const params: Record<string, unknown> = { agentId: filter.agentId }
    if (filter.viewer !== undefined) {
      const seen = namedViewerSql(filter.viewer, 'owner_key')
      where.push(seen.sql)
      Object.assign(params, seen.params)
    }
    if (filter.sessionId !== undefined) { where.push('session_id = @sessionId'); params.sessionId = filter.sessionId }
    if (filter.states !== undefined) {
      const states = filter.states.map((state, i) => {
        params[`state${i}`] = state.state
        if (state.endReason === undefined) return `state = @state${i}`
        params[`reasons${i}`] = JSON.stringify(state.endReason)
        return `(state = @state${i} AND end_reason IN (SELECT value FROM json_each(@reasons${i})))`
      })
      where.push(states.length === 0 ? '0' : `(${states.join(' OR ')})`)
    }
    if (filter.changedAfter !== undefined) { where.push('COALESCE(ended_at, started_at) > @changedAfter'); params.changedAfter = filter.changedAfter }
    const total = this.#db.prepare(`SELECT count(*) FROM runs WHERE ${where.join(' AND ')}`).pluck().get(params) as number
    if (page.before !== undefined) {
      where.push('(started_at < @startedAt OR (started_at = @startedAt AND run_id < @runId))')
      Object.assign(params, { startedAt: page.before.startedAt, runId: page.before.runId })
    }
    const runs = this.#db.prepare(`SELECT * FROM runs WHERE ${where.join(' AND ')} ORDER BY started_at DESC, run_id DESC LIMIT @limit`)
      .all({ ...params, limit: page.limit }) as RunRecord[]
    return { runs, total }
  }

  /**
   * Candidates of `RunReader.marked`: a principal's runs of these agents whose envelope contains
   * the mark's text (`markNeedle`), newest first, at most `limit` after the cursor (through the
   * index by agent and owner).
   */
  markCandidates (filter: MarkFilter, before: RunCursor | undefined, limit: number): RunRecord[] {
    const cursor = before === undefined ? '' : 'AND (started_at < @startedAt OR (started_at = @startedAt AND run_id < @runId))'
    return this.#db.prepare(`SELECT * FROM runs WHERE agent_id IN (SELECT value FROM json_each(@agents)) AND owner_key = @ownerKey AND instr(envelope, @needle) > 0 ${cursor}
      ORDER BY started_at DESC, run_id DESC LIMIT @limit`)
      .all({ agents: JSON.stringify(filter.agentIds), ownerKey: filter.ownerKey, needle: markNeedle(filter.mark), limit, ...(before !== undefined ? { startedAt: before.startedAt, runId: before.runId } : {}) }) as RunRecord[]
  }

  /** Append rows directly (recovery, inside its own transaction). */
  appendNow (requestId: string, rows: readonly JournalRow[]): void {
    if (rows.length > 0) this.#insert(this.#runId.get(requestId) as number, rows)
  }

  /** The `ord` of the wire packet `streamId`/`seq`, if journaled. */
  ordOf (requestId: string, streamId: string, seq: number): number | undefined {
    const head = frameHead(streamId, seq)
    return ordIn(this.#ordOf.get(requestId, `\n${head}`) as StoredBatch | undefined, head)
  }

  /** One stored row: consecutive frames of a run (ords `ord - count + 1` to `ord`). */
  #insert (runId: number, rows: readonly JournalRow[]): void {
    const batch = batchOf(rows)
    this.#append.run(runId, batch.ord, batch.count, batch.frames)
  }

  /**
   * Run `fn` in one immediate transaction of its own (outside the group commit).
   * @throws SQLITE_BUSY while another process holds the write lock
   */
  immediate<T>(fn: () => T): T {
    return this.#db.transaction(fn).immediate()
  }

  /** Extend the leases of runs held under the given tokens until `expiresAt`, in one transaction. */
  renew (held: ReadonlyArray<[requestId: string, token: string]>, expiresAt: number): Renewal {
    return this.#db.transaction(() => {
      const renewal: Renewal = { lost: [], cancelled: [] }
      for (const [requestId, token] of held) {
        const row = this.#renew.get(expiresAt, requestId, token) as { cancel_requested: number } | undefined
        if (row === undefined) renewal.lost.push(requestId)
        else if (row.cancel_requested !== 0) renewal.cancelled.push(requestId)
      }
      return renewal
    }).immediate()
  }

  /** Ask the owner of a running run, wherever it is, to cancel it. Returns false when the run is not running. */
  requestCancel (requestId: string): boolean {
    return this.#db.prepare("UPDATE runs SET cancel_requested = 1 WHERE request_id = ? AND state = 'running'").run(requestId).changes === 1
  }

  /** Running runs whose lease lapsed before `now` (ms since epoch): orphans, whoever owned them. */
  expired (now: number): RunRecord[] {
    return this.#expired.all(now) as RunRecord[]
  }

  /** End an orphan (recovery, inside its transaction); fenced on the lease token it was found with. */
  finishOrphan (record: RunRecord, status: number, response: unknown): boolean {
    return this.#db.prepare(`UPDATE runs SET state = 'ended', end_reason = 'interrupted', ended_at = ?, response_status = ?, response = ?
      WHERE request_id = ? AND state = 'running' AND lease_token IS ?`).run(Date.now(), status, JSON.stringify(response), record.request_id, record.lease_token).changes === 1
  }

  /** Delete ended runs (and their journals) that ended before `before` (ms since epoch). */
  prune (before: number): number {
    return this.#db.prepare("DELETE FROM runs WHERE state = 'ended' AND ended_at < ?").run(before).changes
  }

  /** Delete a session's ended runs and journals (session erasure). */
  eraseSession (sessionId: string): number {
    // a run waiting for an answer holds the session's first request: it goes with it
    this.#db.prepare('DELETE FROM waiting_runs WHERE session_id = ?').run(sessionId)
    return this.#db.prepare("DELETE FROM runs WHERE session_id = ? AND state = 'ended'").run(sessionId).changes
  }
}
