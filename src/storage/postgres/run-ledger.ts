import type pg from 'pg'
import type { InteractionRecord } from '../../protocol/session.js'
import type { Awaitable } from '../awaitable.js'
import type { AuditInput } from '../audit.js'
import type { AppendedEvent, EventAuthor, EventInput } from '../events.js'
import type { Recovery, RunEnd, RunLedger } from '../run-ledger.js'
import { batchOf, frameHead, journalRows, markedRuns, markNeedle, ordIn, type JournalRow, type MarkFilter, type NewRun, type Renewal, type RunCursor, type RunFilter, type RunRecord, type StoredBatch } from '../runs.js'
import { isUnavailable } from '../busy.js'
import { WRITE_RANK, type PgGroupWriter } from './group-writer.js'
import { CHANNELS, notifyIn, type PgNotifications } from './notifications.js'
import { PgReadBatch } from './read-batch.js'
import { claimingCte, INTERACTION_ARRAYS, interactionArrays, recordingCtes } from './sessions.js'
import { viewerSql, type Viewer } from '../tenants.js'

/** The columns of a {@link RunRecord} (the table has more: `wire_id`). */
const RUN = 'run_id, request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, end_reason, owner_instance, owner_pid, owner_key, lease_token, lease_expires_at, cancel_requested, started_at, ended_at, response_status, response'

/** What the ledger composes into the runs' transactions: the other PostgreSQL stores' writes on a client. */
export interface PgLedgerParts {
  pool: pg.Pool
  /** Group commit: the runs' writes of one turn in one transaction. */
  writer: PgGroupWriter
  notifications: PgNotifications
  sessions: {
    recordIn: (client: pg.ClientBase, record: InteractionRecord) => Promise<unknown>
    keyOf: (sessionId: string) => Awaitable<string | null | undefined>
    eraseIn: (client: pg.ClientBase, sessionId: string) => Promise<boolean>
    /** Whether an interaction recorded gets a search vector (SESSION_SEARCH). */
    readonly searchInteractions: boolean
  }
  audit: {
    appendIn: (client: pg.ClientBase, input: AuditInput) => Promise<unknown>
    /** Chain a turn's rows, in this order: one lock, one head, one insert. */
    appendManyIn: (client: pg.ClientBase, inputs: readonly AuditInput[]) => Promise<unknown>
  }
  events: {
    appendIn: (client: pg.ClientBase, input: EventInput, author?: EventAuthor) => Promise<AppendedEvent>
    /** Tell this process's followers of an event, once committed. */
    announce: (appended: AppendedEvent) => void
    eraseSessionIn: (client: pg.ClientBase, sessionId: string) => Promise<number>
  }
}

type Claim = { sessionId: string, userId: string, keyId: string }
type StartOutcome = 'started' | 'taken' | 'not-yours'
interface Start { run: NewRun, claim: Claim | undefined }
interface Finish { end: RunEnd, interaction: InteractionRecord, audit: AuditInput | undefined }
interface JournalEntry { token: string, rows: JournalRow[] }

/** What one turn writes. */
interface TurnWrites { starts: Start[], journal: Map<string, JournalEntry>, finishes: Finish[] }

/** What one turn did: each start's outcome, the runs whose rows were not written (their lease lost), whether each finish ended its run. */
interface TurnResult { starts: StartOutcome[], lost: string[], ended: boolean[] }

/** A turn in the making or in flight; `alone` is the same writes each in a transaction of its own, once the turn failed. */
interface Turn extends TurnWrites {
  done: Promise<TurnResult>
  alone?: { journal: Map<string, Promise<TurnResult>>, starts: Array<Promise<TurnResult>>, finishes: Array<Promise<TurnResult>> }
}

/*
 * A turn's new runs in one statement: the sessions of those with a claim claimed (claimingCte: of
 * two claims of a new session in one turn, the first's key gets it), then the runs whose claim
 * holds inserted. A request id
 * inserted meanwhile by another transaction is waited for, then left: that run is `taken` (joined).
 * A run is `started` only if the row inserted is its own (its lease token), so two starts of one
 * request id in one turn give one start and one join.
 */
const START_MANY = `WITH batch AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::text[], $10::text[], $11::bigint[], $12::text[], $13::text[], $16::text[])
    WITH ORDINALITY AS b(request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, owner_instance, owner_pid, owner_key, lease_token, lease_expires_at, claim_user, claim_key, wire_id, n)
), ${claimingCte('batch', '$14')}, added AS (
  INSERT INTO runs (request_id, envelope_hash, envelope, wire_id, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, owner_key, lease_token, lease_expires_at, started_at)
  SELECT b.request_id, b.envelope_hash, b.envelope, b.wire_id, b.session_id, b.agent_id, b.main_stream_id, 'running', b.owner_instance, b.owner_pid, b.owner_key, b.lease_token, b.lease_expires_at, $15
    FROM batch b LEFT JOIN claimed c ON c.session_id = b.session_id
   WHERE b.claim_key IS NULL OR c.key_id = b.claim_key ORDER BY b.n
  ON CONFLICT (request_id) DO NOTHING
  RETURNING request_id, lease_token
)
SELECT b.n, b.claim_key IS NOT NULL AND c.key_id IS DISTINCT FROM b.claim_key AS refused, a.request_id IS NOT NULL AS started
  FROM batch b LEFT JOIN claimed c ON c.session_id = b.session_id LEFT JOIN added a ON a.request_id = b.request_id AND a.lease_token = b.lease_token
 ORDER BY b.n`

/*
 * A turn's journal rows in one statement: those of the runs still held under their tokens (locked
 * FOR SHARE: a recovery, which locks the run FOR UPDATE, waits for this commit) are written, and the
 * runs held are returned.
 */
const JOURNAL_MANY = `WITH batch AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::text[]) AS b(request_id, token, ord, count, frames)
), held AS (
  SELECT r.request_id, r.run_id FROM runs r JOIN batch b ON r.request_id = b.request_id AND r.lease_token = b.token AND r.state = 'running' FOR SHARE OF r
), added AS (
  INSERT INTO journal (run_id, ord, count, frames) SELECT h.run_id, b.ord, b.count, b.frames FROM batch b JOIN held h ON h.request_id = b.request_id
)
SELECT request_id, run_id FROM held`

/**
 * A turn's ends in one statement: each run ended if still held under its lease token, and the
 * interactions of those ended recorded (their sessions touched, the rows in the order of the calls).
 */
const FINISH_MANY = `WITH f AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], ${INTERACTION_ARRAYS.types.split(', ').map((type, i) => `$${i + 6}::${type}`).join(', ')})
    WITH ORDINALITY AS f(run_key, token, reason, response_status, response, ${INTERACTION_ARRAYS.names}, n)
), ended AS (
  UPDATE runs r SET state = 'ended', end_reason = f.reason, ended_at = $17, response_status = f.response_status, response = f.response
    FROM f WHERE r.request_id = f.run_key AND r.state = 'running' AND r.lease_token = f.token
  RETURNING r.request_id, r.run_id
), done AS (
  SELECT f.* FROM f JOIN ended e ON e.request_id = f.run_key
), ${recordingCtes('done', '$18', '$19')}
SELECT request_id, run_id FROM ended`

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
  #pending = new Map<string, JournalEntry>()
  /** The turn new writes join: queued with the group writer, not yet running. */
  #turn: Turn | undefined
  /** Each run's last turn with rows of it: a flush of that run settles only after it. */
  readonly #writes = new Map<string, Turn>()
  readonly #watches = new Map<number, Watch>()
  /** Runs looked up by request id: one query for a turn's lookups. */
  readonly #runs: PgReadBatch<string, RunRecord>

  constructor (parts: PgLedgerParts) {
    this.#o = parts
    this.#runs = new PgReadBatch(async (ids) => {
      const { rows } = await parts.pool.query<RunRecord>({ name: 'ah_runs_get_many', text: `SELECT ${RUN} FROM runs WHERE request_id = ANY($1::text[])`, values: [ids] })
      return new Map(rows.map((r) => [r.request_id, r]))
    })
    parts.notifications.on(CHANNELS.journal, (id) => {
      const watch = this.#watches.get(Number(id))
      if (watch === undefined) return
      if (watch.wake.size === 0) { watch.dirty = true; return }
      for (const wake of watch.wake) wake()
      watch.wake.clear()
    })
  }

  async get (requestId: string): Promise<RunRecord | undefined> {
    return await this.#runs.load(requestId)
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
    if (filter.viewer !== undefined) where.push(viewerSql(filter.viewer, 'owner_key', param))
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

  async marked (filter: MarkFilter, page: { limit: number, before?: RunCursor }): Promise<RunRecord[]> {
    const needle = markNeedle(filter.mark)
    // strpos, not a JSON operator: an envelope jsonb cannot hold (a \u0000) would fail the whole query
    return await markedRuns(filter.mark, page, async (before, limit) => (await this.#o.pool.query<RunRecord>(
      `SELECT ${RUN} FROM runs WHERE agent_id = ANY($1::text[]) AND owner_key = $2 AND strpos(envelope, $3) > 0
        ${before === undefined ? '' : 'AND (started_at < $5 OR (started_at = $5 AND run_id < $6))'} ORDER BY started_at DESC, run_id DESC LIMIT $4`,
      [[...filter.agentIds], filter.ownerKey, needle, limit, ...(before === undefined ? [] : [before.startedAt, before.runId])])).rows)
  }

  async byWireId (agentId: string, wireId: string, viewer: Viewer = { all: true }): Promise<RunRecord | undefined> {
    const values: unknown[] = [agentId, wireId]
    const seen = viewerSql(viewer, 'owner_key', (value) => `$${values.push(value)}`)
    return (await this.#o.pool.query<RunRecord>(`SELECT ${RUN} FROM runs WHERE agent_id = $1 AND wire_id = $2 AND ${seen} ORDER BY started_at DESC LIMIT 1`, values)).rows[0]
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

  async start (run: NewRun, claim?: Claim): Promise<StartOutcome> {
    const turn = this.#open()
    const i = turn.starts.push({ run, claim }) - 1
    return await this.#outcome(turn, (result, at) => result.starts[at] as StartOutcome, i, (alone) => alone.starts[i])
  }

  append (requestId: string, token: string, row: JournalRow): void {
    const entry = this.#pending.get(requestId)
    if (entry === undefined) this.#pending.set(requestId, { token, rows: [row] })
    else entry.rows.push(row)
  }

  /**
   * Flush every queued row (in this turn's transaction, with the other runs' starts and ends), and
   * settle once the rows of `requestId` are committed: a run whose rows another run's flush took
   * waits for that one.
   */
  async flush (requestId?: string): Promise<string[]> {
    const turn = this.#takePending()
    if (requestId === undefined) {
      return turn === undefined ? [] : await this.#outcome(turn, (result) => result.lost, 0, undefined)
    }
    const written = this.#writes.get(requestId)
    if (written === undefined) return []
    return await this.#outcome(written, (result) => result.lost, 0, (alone) => alone.journal.get(requestId))
  }

  commitNow (): boolean {
    return false
  }

  /** End the run with its answer, its interaction and its audit row, with its last rows, in this turn's transaction. */
  async finish (end: RunEnd, interaction: InteractionRecord, audit: AuditInput | undefined): Promise<{ ended: boolean, lost: string[] }> {
    const turn = this.#takePending() ?? this.#open()
    const i = turn.finishes.push({ end, interaction, audit }) - 1
    return await this.#outcome(turn, (result, at) => ({ ended: result.ended[at] === true, lost: result.lost }), i, (alone) => alone.finishes[i])
  }

  /** Move the queued rows into the open turn; returns it, or undefined when no row was queued. */
  #takePending (): Turn | undefined {
    if (this.#pending.size === 0) return undefined
    const turn = this.#open()
    for (const [id, entry] of this.#pending) {
      const joined = turn.journal.get(id)
      if (joined === undefined) turn.journal.set(id, entry)
      else joined.rows.push(...entry.rows)
      this.#writes.set(id, turn)
    }
    this.#pending = new Map()
    return turn
  }

  /**
   * The turn writes join until the group writer runs it: starts, rows and ends of many runs as a
   * few statements, however many runs there are (one transaction, one commit, one WAL flush).
   */
  #open (): Turn {
    if (this.#turn !== undefined) return this.#turn
    const turn: Turn = { starts: [], journal: new Map(), finishes: [], done: undefined as unknown as Promise<TurnResult> }
    this.#turn = turn
    turn.done = this.#submit(turn, () => { if (this.#turn === turn) this.#turn = undefined })
    turn.done.catch(() => {}).finally(() => {
      for (const [id, written] of this.#writes) if (written === turn) this.#writes.delete(id)
    }).catch(() => {})
    return turn
  }

  async #submit (writes: TurnWrites, running?: () => void): Promise<TurnResult> {
    return await this.#o.writer.write(async (client) => {
      running?.()
      return await this.#turnIn(client, writes)
    }, WRITE_RANK.audit)
  }

  /**
   * What the turn did for one caller. When a turn of several writes fails for a reason other than a
   * lost database (it was rolled back), each of its writes is run again in a transaction of its
   * own, so the one at fault fails alone.
   * @param pick the caller's part of a result: of the turn's at `at`, of its own write's at 0
   * @param own the caller's write run alone, if it has one
   */
  async #outcome<T>(turn: Turn, pick: (result: TurnResult, at: number) => T, at: number, own: ((alone: NonNullable<Turn['alone']>) => Promise<TurnResult> | undefined) | undefined): Promise<T> {
    try {
      return pick(await turn.done, at)
    } catch (err) {
      const size = turn.starts.length + turn.journal.size + turn.finishes.length
      if (size <= 1 || own === undefined || isUnavailable(err)) throw err
      const alone = own(this.#alone(turn))
      if (alone === undefined) throw err
      return pick(await alone, 0)
    }
  }

  /** The turn's writes each on its own, submitted once (together: the group writer's own rerun isolates the one at fault). */
  #alone (turn: Turn): NonNullable<Turn['alone']> {
    const none = (): TurnWrites => ({ starts: [], journal: new Map(), finishes: [] })
    turn.alone ??= {
      journal: new Map([...turn.journal].map(([id, entry]) => [id, this.#submit({ ...none(), journal: new Map([[id, entry]]) })])),
      starts: turn.starts.map((start) => this.#submit({ ...none(), starts: [start] })),
      finishes: turn.finishes.map((finish) => this.#submit({ ...none(), finishes: [finish] }))
    }
    for (const written of [...turn.alone.journal.values(), ...turn.alone.starts, ...turn.alone.finishes]) written.catch(() => {})
    return turn.alone
  }

  /** One turn's writes on `client`: starts, then rows, then ends with their interactions, one notification, and the audit rows last (the chain's lock is held until the commit). */
  async #turnIn (client: pg.ClientBase, writes: TurnWrites): Promise<TurnResult> {
    const result: TurnResult = { starts: [], lost: [], ended: [] }
    const grew: number[] = []
    if (writes.starts.length > 0) result.starts = await this.#startIn(client, writes.starts)
    if (writes.journal.size > 0) {
      const entries = [...writes.journal]
      const batches = entries.map(([, entry]) => batchOf(entry.rows))
      const { rows: held } = await client.query<{ request_id: string, run_id: number }>({
        name: 'ah_journal_many',
        text: JOURNAL_MANY,
        values: [entries.map(([id]) => id), entries.map(([, entry]) => entry.token), batches.map((b) => b.ord), batches.map((b) => b.count), batches.map((b) => b.frames)]
      })
      const heldIds = new Set(held.map((r) => r.request_id))
      for (const r of held) grew.push(r.run_id)
      result.lost = entries.map(([id]) => id).filter((id) => !heldIds.has(id))
    }
    const done: Finish[] = []
    if (writes.finishes.length > 0) {
      const { finishes } = writes
      const now = Date.now()
      const { rows } = await client.query<{ request_id: string, run_id: number }>({
        name: 'ah_finish_many',
        text: FINISH_MANY,
        values: [
          finishes.map((f) => f.end.requestId), finishes.map((f) => f.end.token), finishes.map((f) => f.end.reason), finishes.map((f) => f.end.status),
          finishes.map((f) => JSON.stringify(f.end.response)), ...interactionArrays(finishes.map((f) => f.interaction)), now, new Date(now).toISOString(), this.#o.sessions.searchInteractions
        ]
      })
      const ended = new Set(rows.map((r) => r.request_id))
      for (const r of rows) grew.push(r.run_id)
      result.ended = finishes.map((f) => ended.has(f.end.requestId))
      done.push(...finishes.filter((f) => ended.has(f.end.requestId)))
    }
    if (grew.length > 0) await notifyIn(client, CHANNELS.journal, grew)
    const audited = done.flatMap((f) => f.audit === undefined ? [] : [f.audit])
    if (audited.length > 0) await this.#o.audit.appendManyIn(client, audited)
    return result
  }

  async #startIn (client: pg.ClientBase, starts: readonly Start[]): Promise<StartOutcome[]> {
    const column = <T>(pick: (run: NewRun, claim: Claim | undefined) => T): T[] => starts.map((s) => pick(s.run, s.claim))
    const { rows } = await client.query<{ refused: boolean, started: boolean }>({
      name: 'ah_start_many',
      text: START_MANY,
      values: [
        column((r) => r.request_id), column((r) => r.envelope_hash), column((r) => r.envelope), column((r) => r.session_id), column((r) => r.agent_id),
        column((r) => r.main_stream_id), column((r) => r.owner_instance), column((r) => r.owner_pid), column((r) => r.owner_key), column((r) => r.lease_token),
        column((r) => r.lease_expires_at), column((_, c) => c?.userId ?? null), column((_, c) => c?.keyId ?? null), new Date().toISOString(), Date.now(),
        // the envelope's own request id (request_id is scoped to the caller)
        column((r) => (JSON.parse(r.envelope) as { request_id?: unknown }).request_id)
      ]
    })
    return rows.map((r) => r.refused ? 'not-yours' : r.started ? 'started' : 'taken')
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
      // a run waiting for an answer holds the session's first request: it goes with it
      await client.query('DELETE FROM waiting_runs WHERE session_id = $1', [sessionId])
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
