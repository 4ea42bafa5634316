import type pg from 'pg'
import type { InteractionRecord } from '../../protocol/session.js'
import type { Awaitable } from '../awaitable.js'
import type { AuditInput } from '../audit.js'
import type { AppendedEvent, EventAuthor, EventInput } from '../events.js'
import type { Recovery, RunEnd, RunLedger } from '../run-ledger.js'
import { batchOf, frameHead, journalRows, ordIn, type JournalRow, type NewRun, type Renewal, type RunFilter, type RunRecord, type StoredBatch } from '../runs.js'
import { WRITE_RANK, type PgGroupWriter } from './group-writer.js'
import { CHANNELS, notifyIn, type Notifications } from './notifications.js'

/** The columns of a {@link RunRecord} (the table has more: `wire_id`). */
const RUN = 'run_id, request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, end_reason, owner_instance, owner_pid, owner_key, lease_token, lease_expires_at, cancel_requested, started_at, ended_at, response_status, response'

/** What the ledger composes into the runs' transactions: the other PostgreSQL stores' writes on a client. */
export interface PgLedgerParts {
  pool: pg.Pool
  /** Group commit: the runs' writes of one turn in one transaction. */
  writer: PgGroupWriter
  notifications: Notifications
  sessions: {
    /** Claim a session for `keyId` (or find it someone's): its key id now. */
    claimIn: (client: pg.ClientBase, sessionId: string, userId: string, keyId: string) => Promise<string | null>
    recordIn: (client: pg.ClientBase, record: InteractionRecord) => Promise<unknown>
    keyOf: (sessionId: string) => Awaitable<string | null | undefined>
    eraseIn: (client: pg.ClientBase, sessionId: string) => Promise<boolean>
  }
  audit: { appendIn: (client: pg.ClientBase, input: AuditInput) => Promise<unknown> }
  events: {
    appendIn: (client: pg.ClientBase, input: EventInput, author?: EventAuthor) => Promise<AppendedEvent>
    /** Tell this process's followers of an event, once committed. */
    announce: (appended: AppendedEvent) => void
    eraseSessionIn: (client: pg.ClientBase, sessionId: string) => Promise<number>
  }
}

/** A follower's interest in one run's journal. */
interface Watch { dirty: boolean, wake: Set<() => void>, seen: number }

/**
 * The run ledger on PostgreSQL, shared by every instance on the database. Writes go through the
 * group writer (one transaction per turn); a run's journal rows and its end are fenced by its lease
 * token under a row lock, so a recovery elsewhere (which locks the run `FOR UPDATE`) and a late write
 * of a paused owner never interleave. Each transaction that grows a journal or ends a run notifies
 * the run ids on `agent_host_journal`, and a cancel request the request id on `agent_host_cancel`:
 * followers and the owner elsewhere are woken at once, and poll when the listener is down.
 */
export class PgRunLedger implements RunLedger {
  readonly #o: PgLedgerParts
  /** Rows waiting for the next flush: request id → its lease token and rows. */
  #pending = new Map<string, { token: string, rows: JournalRow[] }>()
  /** Each run's last flush in flight: a flush of that run settles only after it. */
  readonly #writes = new Map<string, Promise<string[]>>()
  readonly #watches = new Map<number, Watch>()

  constructor (parts: PgLedgerParts) {
    this.#o = parts
    parts.notifications.on(CHANNELS.journal, (id) => {
      const watch = this.#watches.get(Number(id))
      if (watch === undefined) return
      if (watch.wake.size === 0) { watch.dirty = true; return }
      for (const wake of watch.wake) wake()
      watch.wake.clear()
    })
  }

  async get (requestId: string): Promise<RunRecord | undefined> {
    return (await this.#o.pool.query<RunRecord>(`SELECT ${RUN} FROM runs WHERE request_id = $1`, [requestId])).rows[0]
  }

  async rows (requestId: string, afterOrd = 0, limit = -1): Promise<JournalRow[]> {
    const { rows } = await this.#o.pool.query<StoredBatch>(
      'SELECT ord, count, frames FROM journal WHERE run_id = (SELECT run_id FROM runs WHERE request_id = $1) AND ord > $2 ORDER BY ord LIMIT $3',
      [requestId, afterOrd, limit < 0 ? null : limit])
    return journalRows(rows, afterOrd, limit)
  }

  async ordOf (requestId: string, streamId: string, seq: number): Promise<number | undefined> {
    const head = frameHead(streamId, seq)
    const { rows } = await this.#o.pool.query<StoredBatch>(
      'SELECT ord, count, frames FROM journal WHERE run_id = (SELECT run_id FROM runs WHERE request_id = $1) AND strpos(chr(10) || frames, $2) > 0 ORDER BY ord LIMIT 1',
      [requestId, `\n${head}`])
    return ordIn(rows[0], head)
  }

  async list (filter: RunFilter, page: { limit: number, before?: { startedAt: number, runId: number } }): Promise<{ runs: RunRecord[], total: number }> {
    const params: unknown[] = [filter.agentId]
    const where = ['agent_id = $1']
    const param = (value: unknown): string => { params.push(value); return `$${params.length}` }
    if (filter.ownerKey !== undefined) where.push(`owner_key = ${param(filter.ownerKey)}`)
    if (filter.sessionId !== undefined) where.push(`session_id = ${param(filter.sessionId)}`)
    if (filter.states !== undefined) {
      const states = filter.states.map((state) => state.endReason === undefined
        ? `state = ${param(state.state)}`
        : `(state = ${param(state.state)} AND end_reason = ANY(${param(state.endReason)}::text[]))`)
      where.push(states.length === 0 ? 'false' : `(${states.join(' OR ')})`)
    }
    if (filter.changedAfter !== undefined) where.push(`COALESCE(ended_at, started_at) > ${param(filter.changedAfter)}`)
    const total = (await this.#o.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM runs WHERE ${where.join(' AND ')}`, params)).rows[0]?.n ?? 0
    if (page.before !== undefined) {
      const startedAt = param(page.before.startedAt)
      where.push(`(started_at < ${startedAt} OR (started_at = ${startedAt} AND run_id < ${param(page.before.runId)}))`)
    }
    const runs = (await this.#o.pool.query<RunRecord>(`SELECT ${RUN} FROM runs WHERE ${where.join(' AND ')} ORDER BY started_at DESC, run_id DESC LIMIT ${param(page.limit)}`, params)).rows
    return { runs, total }
  }

  async byWireId (agentId: string, wireId: string): Promise<RunRecord | undefined> {
    return (await this.#o.pool.query<RunRecord>(`SELECT ${RUN} FROM runs WHERE agent_id = $1 AND wire_id = $2 ORDER BY started_at DESC LIMIT 1`, [agentId, wireId])).rows[0]
  }

  async runningByRequestId (wireId: string): Promise<RunRecord[]> {
    return (await this.#o.pool.query<RunRecord>(`SELECT ${RUN} FROM runs WHERE state = 'running' AND wire_id = $1`, [wireId])).rows
  }

  async expired (now: number): Promise<RunRecord[]> {
    return (await this.#o.pool.query<RunRecord>(`SELECT ${RUN} FROM runs WHERE state = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < $1)`, [now])).rows
  }

  sessionKey (sessionId: string): Awaitable<string | null | undefined> {
    return this.#o.sessions.keyOf(sessionId)
  }

  async prune (before: number): Promise<number> {
    return (await this.#o.pool.query("DELETE FROM runs WHERE state = 'ended' AND ended_at < $1", [before])).rowCount ?? 0
  }

  async start (run: NewRun, claim?: { sessionId: string, userId: string, keyId: string }): Promise<'started' | 'taken' | 'not-yours'> {
    return await this.#o.writer.write(async (client) => {
      if (claim !== undefined && await this.#o.sessions.claimIn(client, claim.sessionId, claim.userId, claim.keyId) !== claim.keyId) return 'not-yours'
      // a concurrent insert of the same key waits for the other transaction, then does nothing: a join
      const { rowCount } = await client.query(`INSERT INTO runs (request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, owner_key, lease_token, lease_expires_at, started_at)
        VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, $9, $10, $11, $12) ON CONFLICT (request_id) DO NOTHING`,
      [run.request_id, run.envelope_hash, run.envelope, run.session_id, run.agent_id, run.main_stream_id, run.owner_instance, run.owner_pid, run.owner_key, run.lease_token, run.lease_expires_at, Date.now()])
      return rowCount === 1 ? 'started' : 'taken'
    })
  }

  append (requestId: string, token: string, row: JournalRow): void {
    const entry = this.#pending.get(requestId)
    if (entry === undefined) this.#pending.set(requestId, { token, rows: [row] })
    else entry.rows.push(row)
  }

  /**
   * Flush every queued row (one transaction with this turn's other writes), and settle once the
   * rows of `requestId` are committed: a run whose rows another run's flush took waits for that one.
   */
  async flush (requestId?: string): Promise<string[]> {
    if (this.#pending.size > 0) {
      const taken = this.#pending
      this.#pending = new Map()
      const write = this.#o.writer.write(async (client) => await this.#flushIn(client, taken))
      for (const id of taken.keys()) this.#writes.set(id, write)
      write.catch(() => {}).finally(() => { for (const id of taken.keys()) if (this.#writes.get(id) === write) this.#writes.delete(id) }).catch(() => {})
      if (requestId === undefined) return await write
    }
    return requestId === undefined ? [] : await (this.#writes.get(requestId) ?? [])
  }

  /** Write the rows of the runs still held under their tokens (locked `FOR SHARE`: a recovery waits); returns the others. */
  async #flushIn (client: pg.ClientBase, taken: Map<string, { token: string, rows: JournalRow[] }>): Promise<string[]> {
    const ids = [...taken.keys()]
    const { rows: held } = await client.query<{ request_id: string, run_id: number }>(
      `SELECT r.request_id, r.run_id FROM runs r JOIN unnest($1::text[], $2::text[]) AS h(request_id, token)
         ON r.request_id = h.request_id AND r.lease_token = h.token AND r.state = 'running' FOR SHARE OF r`,
      [ids, ids.map((id) => (taken.get(id) as { token: string }).token)])
    const runIds = new Map(held.map((r) => [r.request_id, r.run_id]))
    const columns: [number[], number[], number[], string[]] = [[], [], [], []]
    for (const [id, { rows }] of taken) {
      const runId = runIds.get(id)
      if (runId === undefined) continue
      const batch = batchOf(rows)
      columns[0].push(runId); columns[1].push(batch.ord); columns[2].push(batch.count); columns[3].push(batch.frames)
    }
    if (columns[0].length > 0) {
      await client.query('INSERT INTO journal (run_id, ord, count, frames) SELECT * FROM unnest($1::bigint[], $2::int[], $3::int[], $4::text[])', columns)
      await notifyIn(client, CHANNELS.journal, columns[0])
    }
    return ids.filter((id) => !runIds.has(id))
  }

  commitNow (): boolean {
    return false
  }

  async finish (end: RunEnd, interaction: InteractionRecord, audit: AuditInput): Promise<{ ended: boolean, lost: string[] }> {
    const lost = await this.flush(end.requestId)
    return await this.#o.writer.write(async (client) => {
      const { rows } = await client.query<{ run_id: number }>(`UPDATE runs SET state = 'ended', end_reason = $1, ended_at = $2, response_status = $3, response = $4
        WHERE request_id = $5 AND state = 'running' AND lease_token = $6 RETURNING run_id`,
      [end.reason, Date.now(), end.status, JSON.stringify(end.response), end.requestId, end.token])
      const ended = rows[0]
      if (ended === undefined) return { ended: false, lost }
      await this.#o.sessions.recordIn(client, interaction)
      await notifyIn(client, CHANNELS.journal, [ended.run_id])
      // last: the audit chain's lock is held until the commit
      await this.#o.audit.appendIn(client, audit)
      return { ended: true, lost }
    }, WRITE_RANK.audit)
  }

  async renew (held: ReadonlyArray<[requestId: string, token: string]>, expiresAt: number): Promise<Renewal> {
    const { rows } = await this.#o.pool.query<{ request_id: string, cancel_requested: number }>(
      `UPDATE runs r SET lease_expires_at = $1 FROM unnest($2::text[], $3::text[]) AS h(request_id, token)
        WHERE r.request_id = h.request_id AND r.lease_token = h.token AND r.state = 'running' RETURNING r.request_id, r.cancel_requested`,
      [expiresAt, held.map(([id]) => id), held.map(([, token]) => token)])
    const renewed = new Map(rows.map((r) => [r.request_id, r.cancel_requested]))
    return {
      lost: held.filter(([id]) => !renewed.has(id)).map(([id]) => id),
      cancelled: rows.filter((r) => r.cancel_requested !== 0).map((r) => r.request_id)
    }
  }

  async requestCancel (requestId: string, audit: AuditInput): Promise<boolean> {
    return await this.#o.writer.write(async (client) => {
      const { rowCount } = await client.query("UPDATE runs SET cancel_requested = 1 WHERE request_id = $1 AND state = 'running'", [requestId])
      if (rowCount !== 1) return false
      await notifyIn(client, CHANNELS.cancel, [requestId])
      await this.#o.audit.appendIn(client, audit)
      return true
    }, WRITE_RANK.audit)
  }

  onCancelRequested (listener: (requestId: string) => void): void {
    this.#o.notifications.on(CHANNELS.cancel, listener)
  }

  async audit (input: AuditInput): Promise<void> {
    await this.#o.writer.write(async (client) => { await this.#o.audit.appendIn(client, input) }, WRITE_RANK.audit)
  }

  async event (input: EventInput): Promise<void> {
    this.#o.events.announce(await this.#o.writer.write(async (client) => await this.#o.events.appendIn(client, input), WRITE_RANK.events))
  }

  async eraseSession (sessionId: string, audit: (erased: { runs: number, events: number }) => AuditInput): Promise<{ runs: number, events: number, session: boolean }> {
    return await this.#o.writer.write(async (client) => {
      const runs = (await client.query("DELETE FROM runs WHERE session_id = $1 AND state = 'ended'", [sessionId])).rowCount ?? 0
      const session = await this.#o.sessions.eraseIn(client, sessionId)
      const events = await this.#o.events.eraseSessionIn(client, sessionId)
      await this.#o.audit.appendIn(client, audit({ runs, events }))
      return { runs, events, session }
    }, WRITE_RANK.audit)
  }

  async record (event: EventInput, audit: AuditInput): Promise<void> {
    this.#o.events.announce(await this.#o.writer.write(async (client) => {
      const appended = await this.#o.events.appendIn(client, event, 'host')
      await this.#o.audit.appendIn(client, audit)
      return appended
    }, WRITE_RANK.audit))
  }

  async recover (requestId: string, now: number, plan: (record: RunRecord, rows: JournalRow[]) => Recovery): Promise<{ record: RunRecord | undefined, recovered: boolean }> {
    return await this.#o.writer.write(async (client) => {
      // the row lock orders this after any flush or finish of the owner in flight, and before any later one
      const record = (await client.query<RunRecord>(`SELECT ${RUN} FROM runs WHERE request_id = $1 FOR UPDATE`, [requestId])).rows[0]
      if (record === undefined || record.state !== 'running' || (record.lease_expires_at !== null && record.lease_expires_at >= now)) {
        return { record, recovered: false }
      }
      const stored = await client.query<StoredBatch>('SELECT ord, count, frames FROM journal WHERE run_id = $1 ORDER BY ord', [record.run_id])
      const recovery = plan(record, journalRows(stored.rows, 0, -1))
      if (recovery.added.length > 0) {
        const batch = batchOf(recovery.added)
        await client.query('INSERT INTO journal (run_id, ord, count, frames) VALUES ($1, $2, $3, $4)', [record.run_id, batch.ord, batch.count, batch.frames])
      }
      const { rows } = await client.query<RunRecord>(`UPDATE runs SET state = 'ended', end_reason = 'interrupted', ended_at = $1, response_status = $2, response = $3
        WHERE run_id = $4 RETURNING ${RUN}`, [Date.now(), recovery.status, JSON.stringify(recovery.response), record.run_id])
      await this.#o.sessions.recordIn(client, recovery.interaction)
      await notifyIn(client, CHANNELS.journal, [record.run_id])
      await this.#o.audit.appendIn(client, recovery.audit)
      return { record: rows[0], recovered: true }
    }, WRITE_RANK.audit)
  }

  async journalGrew (run: Pick<RunRecord, 'run_id' | 'request_id'>, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    let watch = this.#watches.get(run.run_id)
    if (watch === undefined) {
      if (this.#watches.size >= 10_000) this.#forgetIdle()
      this.#watches.set(run.run_id, watch = { dirty: false, wake: new Set(), seen: Date.now() })
    }
    watch.seen = Date.now()
    // a notification that came while the follower was reading: read again at once
    if (watch.dirty) { watch.dirty = false; return }
    if (signal?.aborted === true) return
    // with the listener up, the poll is only a safety net
    const wait = this.#o.notifications.connected ? Math.max(timeoutMs, 1000) : timeoutMs
    const w = watch
    await new Promise<void>((resolve) => {
      const done = (): void => { clearTimeout(timer); signal?.removeEventListener('abort', done); w.wake.delete(done); resolve() }
      const timer = setTimeout(done, wait)
      signal?.addEventListener('abort', done, { once: true })
      w.wake.add(done)
    })
  }

  /** Forget the runs nobody has followed for a minute. */
  #forgetIdle (): void {
    const before = Date.now() - 60_000
    for (const [id, watch] of this.#watches) if (watch.seen < before && watch.wake.size === 0) this.#watches.delete(id)
  }
}
