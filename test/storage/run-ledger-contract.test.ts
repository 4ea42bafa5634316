import t, { type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import type { InteractionRecord } from '../../src/protocol/session.js'
import { SqliteAuditLog } from '../../src/storage/sqlite/audit.js'
import { type AuditInput, type AuditStore } from '../../src/storage/audit.js'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteEventStore } from '../../src/storage/sqlite/events.js'
import { type EventInput, type EventLog } from '../../src/storage/events.js'
import { SqliteGroupWriter } from '../../src/storage/sqlite/group-writer.js'
import { SqliteRunLedger } from '../../src/storage/sqlite/run-ledger.js'
import { type Recovery, type RunLedger } from '../../src/storage/run-ledger.js'
import { SqliteRunStore } from '../../src/storage/sqlite/runs.js'
import { type JournalRow, type NewRun, type RunRecord } from '../../src/storage/runs.js'
import { SqliteSessionStore } from '../../src/storage/sqlite/sessions.js'
import { type HostSessionStore } from '../../src/storage/sessions.js'
import { PgAuditLog } from '../../src/storage/postgres/audit.js'
import { openPostgres } from '../../src/storage/postgres/database.js'
import { PgEventStore } from '../../src/storage/postgres/events.js'
import { PgGroupWriter } from '../../src/storage/postgres/group-writer.js'
import { CHANNELS, PgNotifications } from '../../src/storage/postgres/notifications.js'
import { PgRunLedger } from '../../src/storage/postgres/run-ledger.js'
import { PgSessionStore } from '../../src/storage/postgres/sessions.js'
import { AGENTS, envelope, tempDataDir } from '../helper.js'
import { until } from '../socket.js'
import { pgDatabase } from '../pg.js'

const MAIN = 'a0000000-0000-4000-8000-00000000000a'
const SUB = 'a0000000-0000-4000-8000-00000000000b'
const AGENT = AGENTS.echo
const OTHER_AGENT = AGENTS.echoStream

/** One ledger and the stores it writes, on one database. */
interface Instance {
  ledger: RunLedger
  sessions: HostSessionStore
  audit: AuditStore
  events: EventLog
  /** PostgreSQL: this instance's listening connection. */
  notifications?: PgNotifications
}

/** A database with one instance on it, and a way to start another on the same database. */
interface Subject extends Instance {
  /** Another instance on the same database, through connections of its own (a second process). */
  another: () => Promise<Instance>
}

const quiet = { warn: () => {} }

const stores: Record<string, (t: Test) => Promise<Subject | undefined>> = {
  sqlite: async (t) => {
    const dir = tempDataDir(t)
    const open = (): Instance => {
      const db = openDatabase(dir)
      const writer = new SqliteGroupWriter(db, { budgetMs: 5000 })
      t.teardown(() => { writer.close(); db.close() })
      const sessions = new SqliteSessionStore(db, writer)
      const audit = new SqliteAuditLog(db)
      const events = new SqliteEventStore(db)
      return { ledger: new SqliteRunLedger({ store: new SqliteRunStore(db), sessions, audit, events, writer }), sessions, audit, events }
    }
    return { ...open(), another: async () => open() }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const open = async (): Promise<Instance> => {
      const pool = await openPostgres(url)
      const notifications = new PgNotifications({ connectionString: url }, quiet)
      await notifications.start()
      const writer = new PgGroupWriter(pool)
      t.teardown(async () => {
        await notifications.close()
        await writer.drain()
        await pool.end()
      })
      const audit = await PgAuditLog.open(pool)
      const sessions = new PgSessionStore(pool)
      const events = new PgEventStore(pool)
      return { ledger: new PgRunLedger({ pool, writer, notifications, sessions, audit, events }), sessions, audit, events, notifications }
    }
    return { ...await open(), another: open }
  }
}

/** A new run of `agentId` in `sessionId` sent by `ownerKey`, held under `token`; its wire id is the envelope's request id. */
function newRun (options: { wireId?: string, sessionId?: string, agentId?: string, ownerKey?: string | null, token?: string, leaseExpiresAt?: number | null } = {}): NewRun {
  const wireId = options.wireId ?? randomUUID()
  const ownerKey = options.ownerKey === undefined ? 'k1' : options.ownerKey
  const agentId = options.agentId ?? AGENT
  const body = envelope(agentId, { query: 'q' }, { requestId: wireId, sessionId: options.sessionId ?? 'session-1' })
  return {
    // the run key is scoped to its sender (assist/run-key.ts): never the wire id itself here, so that lookups by wire id are tested as such
    request_id: `${ownerKey ?? 'anonymous'}/${wireId}`,
    envelope_hash: `hash-${wireId}`,
    envelope: JSON.stringify(body),
    session_id: body.context.session_id,
    agent_id: agentId,
    main_stream_id: MAIN,
    owner_instance: 'instance-a',
    owner_pid: 4242,
    owner_key: ownerKey,
    lease_token: options.token ?? 'tok',
    lease_expires_at: options.leaseExpiresAt === undefined ? Date.now() + 60_000 : options.leaseExpiresAt
  }
}

const frame = (streamId: string, seq: number | null, p: unknown): string =>
  seq === null ? JSON.stringify({ stream_id: streamId, op: 'EVENT', t: 'now', p }) : JSON.stringify({ stream_id: streamId, seq, op: 'DELTA', t: 'now', p })

const row = (ord: number, streamId: string, seq: number | null, p: unknown = `packet ${ord}`): JournalRow => ({ ord, stream_id: streamId, seq, frame: frame(streamId, seq, p) })

function interaction (run: NewRun, status = 'done'): InteractionRecord {
  const wireId = (JSON.parse(run.envelope) as { request_id: string }).request_id
  return { request_id: wireId, session_id: run.session_id, user_id: 'user-1', agent_id: run.agent_id, agent_request_id: wireId, root_request_id: wireId, timestamp: new Date().toISOString(), status, input: { query: 'q' }, output: { text: `answer of ${wireId}` } }
}

const assistAudit = (run: NewRun): AuditInput => ({ actor: run.owner_key ?? 'anonymous', action: 'assist', resource: run.agent_id, success: true, request_id: run.request_id })

function anEvent (sessionId: string, requestId: string, event: Record<string, unknown> = { note: 'hello' }): EventInput {
  return { kind: 'cloudevent', id: randomUUID(), type: 'test.note', source: 'test', time: new Date().toISOString(), session_id: sessionId, request_id: requestId, event }
}

/** End a running run as its owner does. */
async function finish (ledger: RunLedger, run: NewRun, reason = 'done'): Promise<{ ended: boolean, lost: string[] }> {
  return await ledger.finish({ requestId: run.request_id, token: run.lease_token as string, reason, status: 200, response: { output: reason } }, interaction(run, reason), assistAudit(run))
}

/** A plan that closes the main stream and counts its calls. */
function planner (): { plan: (record: RunRecord, rows: JournalRow[]) => Recovery, calls: Array<{ record: RunRecord, rows: JournalRow[] }> } {
  const calls: Array<{ record: RunRecord, rows: JournalRow[] }> = []
  return {
    calls,
    plan: (record, rows) => {
      calls.push({ record, rows })
      const ord = rows.at(-1)?.ord ?? 0
      const wireId = (JSON.parse(record.envelope) as { request_id: string }).request_id
      return {
        added: [row(ord + 1, record.main_stream_id, 90, 'run_interrupted'), row(ord + 2, record.main_stream_id, 91, 'aborted')],
        status: 200,
        response: { recovered: record.request_id },
        interaction: { request_id: wireId, session_id: record.session_id, user_id: 'user-1', agent_id: record.agent_id, agent_request_id: wireId, root_request_id: wireId, timestamp: new Date().toISOString(), status: 'interrupted', input: {}, output: { text: 'interrupted' } },
        audit: { actor: 'agent-host', action: 'assist.interrupted', resource: record.agent_id, success: false, request_id: record.request_id }
      }
    }
  }
}

/** Whether `p` settles within `ms`: generous bounds, only a lost wake-up takes that long. */
async function settlesWithin (p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const timedOut = new Promise<false>((resolve) => { timer = setTimeout(() => { resolve(false) }, ms) })
  try {
    return await Promise.race([p.then(() => true), timedOut])
  } finally {
    clearTimeout(timer)
  }
}

/** Wait until the clock has moved past `ms` (so that later timestamps are strictly greater). */
async function clockPast (ms: number): Promise<void> {
  await until('the clock to move on', () => Date.now() > ms, 5000, 1)
}

const ids = (runs: RunRecord[]): string[] => runs.map((r) => r.request_id)

for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} ledger: the RunLedger contract`, async (t) => {
    t.test('start stores a new run; the same request id again is taken and changes nothing', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const run = newRun()
      t.equal(await s.ledger.start(run), 'started')
      const { request_id: requestId, envelope_hash: envelopeHash, envelope: body, lease_expires_at: leaseExpiresAt } = run
      t.match(await s.ledger.get(requestId), { request_id: requestId, envelope_hash: envelopeHash, envelope: body, session_id: 'session-1', agent_id: AGENT, main_stream_id: MAIN })
      t.match(await s.ledger.get(requestId), { state: 'running', end_reason: null, owner_instance: 'instance-a', owner_pid: 4242, owner_key: 'k1', lease_token: 'tok', lease_expires_at: leaseExpiresAt })
      t.match(await s.ledger.get(requestId), { cancel_requested: 0, ended_at: null, response_status: null, response: null, run_id: Number, started_at: Number })
      t.equal(await s.ledger.start({ ...run, envelope_hash: 'another', lease_token: 'another' }), 'taken')
      t.match(await s.ledger.get(run.request_id), { envelope_hash: run.envelope_hash, lease_token: 'tok' }, 'the first start stands')
      t.equal(await s.ledger.get('nope'), undefined)
    })

    t.test('start with a claim makes the session the key\'s, joins it for that key, and refuses another key without storing anything', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      t.equal(await s.ledger.sessionKey('claimed'), undefined, 'an unknown session')
      const first = newRun({ sessionId: 'claimed' })
      t.equal(await s.ledger.start(first, { sessionId: 'claimed', userId: 'user-1', keyId: 'k1' }), 'started')
      t.equal(await s.ledger.sessionKey('claimed'), 'k1')
      const again = newRun({ sessionId: 'claimed' })
      t.equal(await s.ledger.start(again, { sessionId: 'claimed', userId: 'user-1', keyId: 'k1' }), 'started', 'the key\'s own session')
      t.equal(await s.ledger.start(first, { sessionId: 'claimed', userId: 'user-1', keyId: 'k1' }), 'taken')
      const theirs = newRun({ sessionId: 'claimed', ownerKey: 'k2' })
      t.equal(await s.ledger.start(theirs, { sessionId: 'claimed', userId: 'user-2', keyId: 'k2' }), 'not-yours')
      t.equal(await s.ledger.get(theirs.request_id), undefined, 'nothing stored')
      t.equal(await s.ledger.sessionKey('claimed'), 'k1', 'the session is still the first key\'s')
      const admin = newRun({ sessionId: 'claimed', ownerKey: 'admin-key' })
      t.equal(await s.ledger.start(admin), 'started', 'an admin starts in anyone\'s session without a claim')
      t.equal(await s.ledger.sessionKey('claimed'), 'k1')
    })

    t.test('sessionKey is null for a session made without a key (its first interaction recorded by an unclaimed run)', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const run = newRun({ sessionId: 'keyless', ownerKey: null })
      t.equal(await s.ledger.start(run), 'started')
      t.equal(await s.ledger.sessionKey('keyless'), undefined)
      t.match(await finish(s.ledger, run), { ended: true })
      t.equal(await s.ledger.sessionKey('keyless'), null)
    })

    t.test('append + flush: a flush is one stored batch; rows() gives its packets one by one, from any cursor, up to any limit; ordOf finds wire packets', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const run = newRun()
      await s.ledger.start(run)
      const id = run.request_id
      const written: JournalRow[] = []
      const add = (streamId: string, seq: number | null, p: unknown): void => {
        const r = row(written.length + 1, streamId, seq, p)
        written.push(r)
        s.ledger.append(id, 'tok', r)
      }
      t.same(await s.ledger.flush(id), [], 'nothing queued')
      t.same(await s.ledger.flush(), [], 'nothing queued at all')
      add(MAIN, 1, { stream_id: SUB, seq: 2, note: 'a nested object that looks like the head of a later frame' })
      add(SUB, 1, 'line one\nline two')
      add(MAIN, null, { hidden: true })
      t.same(await s.ledger.flush(id), [])
      add(MAIN, 2, 'a')
      add(SUB, 2, 'b')
      t.same(await s.ledger.flush(), [])
      t.same(await s.ledger.rows(id), written)
      t.same(await s.ledger.rows(id, 2), written.slice(2), 'a cursor inside a stored batch')
      t.same(await s.ledger.rows(id, 1, 2), written.slice(1, 3), 'a limit inside a stored batch')
      t.same(await s.ledger.rows(id, 2, 2), written.slice(2, 4), 'a page across two stored batches (frames split across them)')
      t.same(await s.ledger.rows(id, 0, 0), [])
      t.same(await s.ledger.rows(id, 5), [])
      t.same(await s.ledger.rows('nope'), [])
      t.equal(await s.ledger.ordOf(id, SUB, 1), 2)
      t.equal(await s.ledger.ordOf(id, SUB, 2), 5, 'found by its own head, not by an earlier payload that looks like one')
      t.equal(await s.ledger.ordOf(id, MAIN, 2), 4)
      t.equal(await s.ledger.ordOf(id, MAIN, 3), undefined)
      t.equal(await s.ledger.ordOf('nope', MAIN, 1), undefined)
    })

    t.test('flush(requestId) settles once that run\'s rows are committed, whichever flush took them', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const [a, b] = [newRun(), newRun()]
      await s.ledger.start(a)
      await s.ledger.start(b)
      s.ledger.append(a.request_id, 'tok', row(1, MAIN, 1))
      s.ledger.append(b.request_id, 'tok', row(1, MAIN, 1))
      const all = s.ledger.flush()
      const mine = s.ledger.flush(a.request_id)
      t.same(await mine, [])
      t.same(await s.ledger.rows(a.request_id), [row(1, MAIN, 1)], 'committed when its flush settled')
      t.same(await all, [])
      t.same(await s.ledger.rows(b.request_id), [row(1, MAIN, 1)])
    })

    t.test('flush drops the rows of a run whose lease token no longer holds it, and names it; the others of its batch are written', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const [held, taken, ended] = [newRun(), newRun(), newRun()]
      for (const run of [held, taken, ended]) await s.ledger.start(run)
      await finish(s.ledger, ended)
      s.ledger.append(held.request_id, 'tok', row(1, MAIN, 1))
      s.ledger.append(taken.request_id, 'stale', row(1, MAIN, 1))
      s.ledger.append(ended.request_id, 'tok', row(1, MAIN, 1))
      t.same((await s.ledger.flush(taken.request_id)).sort(), [taken.request_id, ended.request_id].sort())
      t.same(await s.ledger.rows(held.request_id), [row(1, MAIN, 1)])
      t.same(await s.ledger.rows(taken.request_id), [])
      t.same(await s.ledger.rows(ended.request_id), [])
    })

    t.test('commitNow: true means what is queued is committed now; false means the rows wait for flush', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const run = newRun()
      await s.ledger.start(run)
      s.ledger.append(run.request_id, 'tok', row(1, MAIN, 1))
      const flushed = s.ledger.flush(run.request_id)
      const now = s.ledger.commitNow()
      t.equal(now, kind === 'sqlite', 'SQLite commits the turn at once; PostgreSQL\'s transaction is already on its way')
      if (now) t.same(s.ledger.rows(run.request_id), [row(1, MAIN, 1)], 'readable before the flush settles')
      t.same(await flushed, [])
      t.same(await s.ledger.rows(run.request_id), [row(1, MAIN, 1)])
    })

    t.test('finish is fenced by the lease token: a wrong token records nothing; the right one writes the rows, the answer, the interaction and the audit row', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const run = newRun({ sessionId: 'finishing' })
      const other = newRun()
      await s.ledger.start(run)
      await s.ledger.start(other)
      s.ledger.append(run.request_id, 'tok', row(1, MAIN, 1))
      const end = { requestId: run.request_id, reason: 'done', status: 200, response: { output: { text: 'hi' } } }
      t.same(await s.ledger.finish({ ...end, token: 'stale' }, interaction(run), assistAudit(run)), { ended: false, lost: [] })
      t.match(await s.ledger.get(run.request_id), { state: 'running', response: null })
      t.same(await s.sessions.history('finishing'), [])
      t.same(await s.audit.list({ action: 'assist' }), [])
      t.same(await s.ledger.rows(run.request_id), [row(1, MAIN, 1)], 'its queued rows were flushed: the lease still holds')
      s.ledger.append(run.request_id, 'tok', row(2, MAIN, 2))
      s.ledger.append(other.request_id, 'stale', row(1, MAIN, 1))
      t.same(await s.ledger.finish({ ...end, token: 'tok' }, interaction(run), assistAudit(run)), { ended: true, lost: [other.request_id] }, 'the other run\'s rows were dropped in its flush')
      const ended = await s.ledger.get(run.request_id)
      t.match(ended, { state: 'ended', end_reason: 'done', response_status: 200, ended_at: Number })
      t.same(JSON.parse(ended?.response as string), end.response)
      t.same(await s.ledger.rows(run.request_id), [row(1, MAIN, 1), row(2, MAIN, 2)])
      t.match(await s.sessions.history('finishing'), [{ request_id: interaction(run).request_id, status: 'done', output: { text: String } }])
      t.match(await s.audit.list({ action: 'assist' }), [{ actor: 'k1', request_id: run.request_id, success: true }])
      t.same(await finish(s.ledger, run), { ended: false, lost: [] }, 'an ended run is not ended twice')
      t.equal((await s.audit.list({ action: 'assist' })).length, 1)
    })

    t.test('renew extends held leases, names lost ones (another token, an ended run) and cancelled ones', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const [held, taken, ended, cancelled] = [newRun(), newRun(), newRun(), newRun()]
      for (const run of [held, taken, ended, cancelled]) await s.ledger.start(run)
      await finish(s.ledger, ended)
      t.equal(await s.ledger.requestCancel(cancelled.request_id, { actor: 'k2', action: 'assist.cancel', resource: AGENT, success: true }), true)
      const until = Date.now() + 120_000
      const renewal = await s.ledger.renew([[held.request_id, 'tok'], [taken.request_id, 'stale'], [ended.request_id, 'tok'], [cancelled.request_id, 'tok']], until)
      t.same(renewal, { lost: [taken.request_id, ended.request_id], cancelled: [cancelled.request_id] })
      t.equal((await s.ledger.get(held.request_id))?.lease_expires_at, until)
      t.equal((await s.ledger.get(cancelled.request_id))?.lease_expires_at, until, 'a cancelled run is still held until its owner stops it')
      t.equal((await s.ledger.get(taken.request_id))?.lease_expires_at, taken.lease_expires_at, 'a lost one is not extended')
      t.same(await s.ledger.renew([], until), { lost: [], cancelled: [] })
    })

    t.test('requestCancel marks a running run and audits the request; false (and no audit row) for an ended or unknown run', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const [running, ended] = [newRun(), newRun()]
      await s.ledger.start(running)
      await s.ledger.start(ended)
      await finish(s.ledger, ended)
      const audit = (run: NewRun): AuditInput => ({ actor: 'k1', action: 'assist.cancel', resource: AGENT, success: true, request_id: run.request_id })
      t.equal(await s.ledger.requestCancel(running.request_id, audit(running)), true)
      t.match(await s.ledger.get(running.request_id), { state: 'running', cancel_requested: 1 })
      t.equal(await s.ledger.requestCancel(ended.request_id, audit(ended)), false)
      t.equal(await s.ledger.requestCancel('nope', audit(ended)), false)
      t.match(await s.audit.list({ action: 'assist.cancel' }), [{ request_id: running.request_id }])
      t.equal((await s.audit.list({ action: 'assist.cancel' })).length, 1)
    })

    t.test('onCancelRequested: PostgreSQL tells another instance at once; SQLite never calls it (the owner\'s heartbeat finds the request)', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const owner = await s.another()
      const heard: string[] = []
      owner.ledger.onCancelRequested((id) => { heard.push(id) })
      const run = newRun()
      await owner.ledger.start(run)
      t.equal(await s.ledger.requestCancel(run.request_id, { actor: 'k1', action: 'assist.cancel', resource: AGENT, success: true }), true)
      if (kind === 'postgres') {
        await until('the owner to hear the cancel', () => heard.length > 0, 10_000)
        t.same(heard, [run.request_id])
      } else {
        await new Promise((resolve) => setImmediate(resolve))
        t.same(heard, [])
      }
      t.same((await owner.ledger.renew([[run.request_id, 'tok']], Date.now() + 60_000)).cancelled, [run.request_id], 'the heartbeat finds it on both')
    })

    t.test('list: every filter, newest first, paged with before, and how many match in all', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const r1 = newRun({ ownerKey: 'k1', sessionId: 's1' })
      const r2 = newRun({ ownerKey: 'tenant:acme/k2', sessionId: 's1' })
      const r3 = newRun({ ownerKey: 'k1', sessionId: 's2' })
      const r4 = newRun({ ownerKey: 'k1', sessionId: 's2' })
      const elsewhere = newRun({ ownerKey: 'k1', sessionId: 's1', agentId: OTHER_AGENT })
      await s.ledger.start(r1)
      await s.ledger.start(r2)
      const mark = Math.max(...await Promise.all([r1, r2].map(async (r) => (await s.ledger.get(r.request_id) as RunRecord).started_at)))
      await clockPast(mark)
      await s.ledger.start(r3)
      await s.ledger.start(r4)
      await s.ledger.start(elsewhere)
      await finish(s.ledger, r2, 'done')
      await finish(s.ledger, r3, 'cancelled')
      await finish(s.ledger, r4, 'interrupted')
      const page = { limit: 10 }
      const list = async (filter: Omit<Parameters<RunLedger['list']>[0], 'agentId'>, p: Parameters<RunLedger['list']>[1] = page): Promise<{ ids: string[], total: number }> => {
        const { runs, total } = await s.ledger.list({ agentId: AGENT, ...filter }, p)
        return { ids: ids(runs), total }
      }
      const [i1, i2, i3, i4] = [r1, r2, r3, r4].map((r) => r.request_id)
      t.same(await list({}), { ids: [i4, i3, i2, i1], total: 4 }, 'one agent\'s runs, newest first')
      t.same(await list({ viewer: { owner: 'k1' } }), { ids: [i4, i3, i1], total: 3 })
      t.same(await list({ viewer: { owner: 'nobody' } }), { ids: [], total: 0 })
      t.same(await list({ viewer: { tenant: 'acme' } }), { ids: [i2], total: 1 }, 'a tenant\'s admin: its tenant\'s runs')
      t.same(await list({ viewer: { tenant: 'default' } }), { ids: [i4, i3, i1], total: 3 })
      t.same(await list({ sessionId: 's2' }), { ids: [i4, i3], total: 2 })
      t.same(await list({ states: [{ state: 'running' }] }), { ids: [i1], total: 1 })
      t.same(await list({ states: [{ state: 'ended', endReason: ['done', 'cancelled'] }] }), { ids: [i3, i2], total: 2 })
      t.same(await list({ states: [{ state: 'running' }, { state: 'ended', endReason: ['interrupted'] }] }), { ids: [i4, i1], total: 2 })
      t.same(await list({ states: [{ state: 'ended' }] }), { ids: [i4, i3, i2], total: 3 })
      t.same(await list({ states: [] }), { ids: [], total: 0 }, 'no state asked for: none')
      t.same(await list({ changedAfter: mark }), { ids: [i4, i3, i2], total: 3 }, 'started or ended after the mark')
      t.same(await list({ viewer: { owner: 'k1' }, sessionId: 's2', states: [{ state: 'ended', endReason: ['cancelled'] }] }), { ids: [i3], total: 1 }, 'filters together')
      const first = await s.ledger.list({ agentId: AGENT }, { limit: 3 })
      t.same({ ids: ids(first.runs), total: first.total }, { ids: [i4, i3, i2], total: 4 })
      const last = first.runs.at(-1) as RunRecord
      t.same(await list({}, { limit: 3, before: { startedAt: last.started_at, runId: last.run_id } }), { ids: [i1], total: 4 }, 'the next page; the total counts every page')
      const third = first.runs[1] as RunRecord
      t.same(await list({}, { limit: 10, before: { startedAt: third.started_at, runId: third.run_id } }), { ids: [i2, i1], total: 4 }, 'a cursor in the middle (runs started in one millisecond are told apart by run id)')
      t.same(await s.ledger.list({ agentId: 'nobody' }, page), { runs: [], total: 0 })
    })

    t.test('marked: one principal\'s runs of the given agents whose envelope\'s metadata carries the mark, newest first, paged with before; the mark\'s text elsewhere in an envelope is no mark', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const MARK = 'mcp_task'
      /** `run` with its envelope's payload changed by `change`. */
      const edited = (run: NewRun, change: (payload: Record<string, unknown>) => void): NewRun => {
        const body = JSON.parse(run.envelope) as { payload: Record<string, unknown> }
        change(body.payload)
        return { ...run, envelope: JSON.stringify(body) }
      }
      const marked = (options: Parameters<typeof newRun>[0] = {}): NewRun => edited(newRun(options), (p) => { p.metadata = { capability: 'c', [MARK]: { ttl: 5 } } })
      const m1 = marked()
      const m2 = marked({ agentId: OTHER_AGENT })
      const decoy = edited(newRun(), (p) => { p.payload = { [MARK]: { ttl: 5 }, note: `"${MARK}":` } })
      const m3 = marked()
      // a key JSON escapes (\u0000), which PostgreSQL's jsonb cannot hold: found all the same
      const escaped = edited(marked(), (p) => { p.payload = { '\u0000odd': 'x\u0000' } })
      const unmarked = newRun()
      const theirs = marked({ ownerKey: 'k2' })
      const thirdAgent = marked({ agentId: 'a-third-agent' })
      for (const run of [m1, m2, decoy, m3, escaped, unmarked, theirs, thirdAgent]) t.equal(await s.ledger.start(run), 'started')
      await finish(s.ledger, m1, 'done')
      const filter = { ownerKey: 'k1', agentIds: [AGENT, OTHER_AGENT], mark: MARK }
      t.same(ids(await s.ledger.marked(filter, { limit: 10 })), [escaped, m3, m2, m1].map((r) => r.request_id), 'newest first (one millisecond told apart by run id), running or ended; not the decoy, another key\'s or another agent\'s')
      const first = await s.ledger.marked(filter, { limit: 2 })
      t.same(ids(first), [escaped, m3].map((r) => r.request_id))
      const cursor = (run: RunRecord): { startedAt: number, runId: number } => ({ startedAt: run.started_at, runId: run.run_id })
      t.same(ids(await s.ledger.marked(filter, { limit: 2, before: cursor(first.at(-1) as RunRecord) })), [m2, m1].map((r) => r.request_id), 'the next page')
      t.same(ids(await s.ledger.marked(filter, { limit: 1, before: cursor(first.at(-1) as RunRecord) })), [m2.request_id], 'a page of one goes past the decoy between')
      t.same(ids(await s.ledger.marked({ ...filter, agentIds: [OTHER_AGENT] }, { limit: 10 })), [m2.request_id], 'only the agents given')
      t.same(ids(await s.ledger.marked({ ...filter, agentIds: [] }, { limit: 10 })), [], 'no agent: none')
      t.same(ids(await s.ledger.marked({ ...filter, mark: 'other_mark' }, { limit: 10 })), [])
      await t.rejects(async () => await s.ledger.marked({ ...filter, mark: 'a"b' }, { limit: 10 }), /a run mark is/, 'a mark is a plain key')
    })

    t.test('byWireId finds an agent\'s newest run by the envelope\'s request id; runningByRequestId finds the running ones of every sender', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const wireId = randomUUID()
      const mine = newRun({ wireId, ownerKey: 'k1' })
      const theirs = newRun({ wireId, ownerKey: 'tenant:acme/k2' })
      const otherAgent = newRun({ wireId, ownerKey: 'k3', agentId: OTHER_AGENT })
      await s.ledger.start(mine)
      await clockPast((await s.ledger.get(mine.request_id) as RunRecord).started_at)
      await s.ledger.start(theirs)
      await clockPast((await s.ledger.get(theirs.request_id) as RunRecord).started_at)
      await s.ledger.start(otherAgent)
      t.equal((await s.ledger.byWireId(AGENT, wireId))?.request_id, theirs.request_id, 'the newest of the agent\'s')
      t.equal((await s.ledger.byWireId(OTHER_AGENT, wireId))?.request_id, otherAgent.request_id)
      t.equal(await s.ledger.byWireId(AGENT, 'nope'), undefined)
      t.equal((await s.ledger.byWireId(AGENT, wireId, { tenant: 'default' }))?.request_id, mine.request_id, 'the newest a viewer sees')
      t.equal((await s.ledger.byWireId(AGENT, wireId, { tenant: 'acme' }))?.request_id, theirs.request_id)
      t.equal(await s.ledger.byWireId(AGENT, wireId, { owner: 'k9' }), undefined)
      t.equal(await s.ledger.byWireId('nobody', wireId), undefined)
      t.same(ids(await s.ledger.runningByRequestId(wireId)).sort(), [mine.request_id, theirs.request_id, otherAgent.request_id].sort())
      await finish(s.ledger, theirs)
      t.same(ids(await s.ledger.runningByRequestId(wireId)).sort(), [mine.request_id, otherAgent.request_id].sort(), 'ended ones are not running')
      t.equal((await s.ledger.byWireId(AGENT, wireId))?.request_id, theirs.request_id, 'ended or not')
      t.same(await s.ledger.runningByRequestId('nope'), [])
    })

    t.test('expired lists running runs whose lease lapsed before now (or that have none), whoever owns them', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const now = Date.now()
      const lapsed = newRun({ leaseExpiresAt: now - 1 })
      const leaseless = newRun({ leaseExpiresAt: null })
      const atNow = newRun({ leaseExpiresAt: now })
      const live = newRun({ leaseExpiresAt: now + 60_000 })
      const endedLapsed = newRun({ leaseExpiresAt: now - 1 })
      for (const run of [lapsed, leaseless, atNow, live, endedLapsed]) await s.ledger.start(run)
      await finish(s.ledger, endedLapsed)
      t.same(ids(await s.ledger.expired(now)).sort(), [lapsed.request_id, leaseless.request_id].sort())
      t.same(ids(await s.ledger.expired(now + 1)).sort(), [lapsed.request_id, leaseless.request_id, atNow.request_id].sort())
    })

    t.test('recover: not before the lease lapses; then the plan\'s rows, answer, interaction and audit row in one go, once; the old owner is fenced out', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const run = newRun({ sessionId: 'orphaned' })
      await s.ledger.start(run)
      const id = run.request_id
      s.ledger.append(id, 'tok', row(1, MAIN, 1))
      s.ledger.append(id, 'tok', row(2, SUB, 1))
      await s.ledger.flush(id)
      const lease = run.lease_expires_at as number
      const { plan, calls } = planner()
      t.match(await s.ledger.recover(id, lease, plan), { record: { state: 'running' }, recovered: false }, 'a lease that has not lapsed yet (it holds at its last millisecond)')
      t.equal(calls.length, 0)
      const done = await s.ledger.recover(id, lease + 1, plan)
      t.equal(done.recovered, true)
      t.match(done.record, { request_id: id, state: 'ended', end_reason: 'interrupted', response_status: 200, ended_at: Number })
      t.same(JSON.parse(done.record?.response as string), { recovered: id })
      t.equal(calls.length, 1)
      t.same(calls[0]?.rows, [row(1, MAIN, 1), row(2, SUB, 1)], 'the plan is given the journal')
      t.match(calls[0]?.record, { request_id: id, state: 'running' })
      t.same(await s.ledger.rows(id), [row(1, MAIN, 1), row(2, SUB, 1), row(3, MAIN, 90, 'run_interrupted'), row(4, MAIN, 91, 'aborted')])
      t.match(await s.sessions.history('orphaned'), [{ status: 'interrupted' }])
      t.match(await s.audit.list({ action: 'assist.interrupted' }), [{ request_id: id, success: false }])
      t.match(await s.ledger.recover(id, lease + 1, plan), { record: { state: 'ended' }, recovered: false }, 'not twice')
      t.equal(calls.length, 1)
      t.same(await s.ledger.recover('nope', lease + 1, plan), { record: undefined, recovered: false })
      s.ledger.append(id, 'tok', row(5, MAIN, 92))
      t.same(await s.ledger.flush(id), [id], 'the old owner\'s late rows are dropped')
      t.same(await finish(s.ledger, run), { ended: false, lost: [] }, 'and its finish refused')
      t.equal((await s.ledger.rows(id)).length, 4)
      t.equal((await s.sessions.history('orphaned')).length, 1)
    })

    t.test('recover with a plan that adds no rows (the run had closed its streams) still ends it', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const run = newRun({ leaseExpiresAt: null })
      await s.ledger.start(run)
      const { plan } = planner()
      const quiet = (record: RunRecord, rows: JournalRow[]): Recovery => ({ ...plan(record, rows), added: [] })
      t.match(await s.ledger.recover(run.request_id, Date.now(), quiet), { record: { state: 'ended' }, recovered: true }, 'a run without a lease is an orphan')
      t.same(await s.ledger.rows(run.request_id), [])
    })

    t.test('two instances racing for the same orphans recover each exactly once', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const other = await s.another()
      const orphans = Array.from({ length: 5 }, (_, i) => newRun({ sessionId: `race-${i}`, leaseExpiresAt: Date.now() - 1 }))
      for (const run of orphans) await s.ledger.start(run)
      const a = planner()
      const b = planner()
      const now = Date.now()
      const results = await Promise.all(orphans.flatMap((run) => [s.ledger.recover(run.request_id, now, a.plan), other.ledger.recover(run.request_id, now, b.plan)]))
      for (const [i, run] of orphans.entries()) {
        const mine = [results[2 * i], results[2 * i + 1]]
        t.equal(mine.filter((r) => r?.recovered === true).length, 1, `${run.session_id}: recovered once`)
        t.match(await s.ledger.get(run.request_id), { state: 'ended', end_reason: 'interrupted' })
        t.equal((await s.ledger.rows(run.request_id)).length, 2, `${run.session_id}: the plan's rows once`)
        t.equal((await other.sessions.history(run.session_id)).length, 1, `${run.session_id}: one interaction`)
      }
      t.equal(a.calls.length + b.calls.length, orphans.length, 'each plan worked out once')
      t.equal((await s.audit.list({ action: 'assist.interrupted' })).length, orphans.length)
      t.match(await s.audit.verify(), { ok: true }, 'one audit chain')
    })

    t.test('journalGrew returns once its timeout passes, and at once for an aborted signal, never rejecting', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const run = newRun()
      await s.ledger.start(run)
      const record = await s.ledger.get(run.request_id) as RunRecord
      await s.ledger.journalGrew(record, 5)
      const controller = new AbortController()
      const waiting = s.ledger.journalGrew(record, 120_000, controller.signal)
      controller.abort()
      t.equal(await settlesWithin(waiting, 10_000), true, 'aborted while waiting')
      t.pass('settled without rejecting')
    })

    t.test('journalGrew wakes a follower when another instance flushes or ends the run (PostgreSQL), and polls (SQLite)', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const follower = await s.another()
      const run = newRun()
      await s.ledger.start(run)
      const record = await follower.ledger.get(run.request_id) as RunRecord
      const controller = new AbortController()
      t.teardown(() => { controller.abort() })
      const timeoutMs = kind === 'postgres' ? 120_000 : 5
      const grew = follower.ledger.journalGrew(record, timeoutMs, controller.signal)
      s.ledger.append(run.request_id, 'tok', row(1, MAIN, 1))
      await s.ledger.flush(run.request_id)
      t.equal(await settlesWithin(grew, 10_000), true, 'woken')
      t.same(await follower.ledger.rows(run.request_id), [row(1, MAIN, 1)], 'and the rows are there')
      const ended = follower.ledger.journalGrew(record, timeoutMs, controller.signal)
      await finish(s.ledger, run)
      t.equal(await settlesWithin(ended, 10_000), true, 'woken by the end')
      t.match(await follower.ledger.get(run.request_id), { state: 'ended' })
    })

    t.test('prune deletes ended runs (and their journals) that ended before the cutoff, nothing else', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const [old, running] = [newRun(), newRun()]
      await s.ledger.start(old)
      await s.ledger.start(running)
      s.ledger.append(old.request_id, 'tok', row(1, MAIN, 1))
      await finish(s.ledger, old)
      const endedAt = (await s.ledger.get(old.request_id) as RunRecord).ended_at as number
      t.equal(await s.ledger.prune(endedAt), 0, 'not one that ended at the cutoff')
      t.equal(await s.ledger.prune(endedAt + 1), 1)
      t.equal(await s.ledger.get(old.request_id), undefined)
      t.same(await s.ledger.rows(old.request_id), [])
      t.match(await s.ledger.get(running.request_id), { state: 'running' }, 'a running run is never pruned')
      t.equal(await s.ledger.prune(Date.now() + 60_000), 0)
    })

    t.test('eraseSession: its ended runs, its events, the session and an audit row of what was erased, in one go', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const gone = newRun({ sessionId: 'erased' })
      const running = newRun({ sessionId: 'erased' })
      const kept = newRun({ sessionId: 'kept' })
      for (const run of [gone, running, kept]) await s.ledger.start(run, { sessionId: run.session_id, userId: 'user-1', keyId: 'k1' })
      s.ledger.append(gone.request_id, 'tok', row(1, MAIN, 1))
      await finish(s.ledger, gone)
      await finish(s.ledger, kept)
      await s.ledger.event(anEvent('erased', gone.request_id))
      await s.ledger.event(anEvent('erased', gone.request_id))
      await s.ledger.event(anEvent('kept', kept.request_id))
      const audit = (erased: { runs: number, events: number }): AuditInput => ({ actor: 'k1', action: 'session.erase', resource: 'erased', success: true, details: erased })
      t.same(await s.ledger.eraseSession('erased', audit), { runs: 1, events: 2, session: true })
      t.equal(await s.ledger.get(gone.request_id), undefined)
      t.same(await s.ledger.rows(gone.request_id), [])
      t.match(await s.ledger.get(running.request_id), { state: 'running' }, 'a running run stays: its owner still writes it')
      t.same(await s.events.list({ session_id: 'erased' }), [])
      t.same(await s.sessions.history('erased'), [])
      t.equal(await s.ledger.sessionKey('erased'), undefined)
      t.match(await s.audit.list({ action: 'session.erase' }), [{ resource: 'erased', details: { runs: 1, events: 2 } }])
      t.equal((await s.events.list({ session_id: 'kept' })).length, 1, 'another session\'s events stay')
      t.equal((await s.sessions.history('kept')).length, 1)
      t.match(await s.ledger.get(kept.request_id), { state: 'ended' })
      t.same(await s.ledger.eraseSession('erased', audit), { runs: 0, events: 0, session: false }, 'erasing it again finds nothing')
      t.equal((await s.audit.list({ action: 'session.erase' })).length, 2, 'and says so')
    })

    t.test('event appends an agent\'s event and tells this process\'s followers; a refused event stores nothing', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const input = anEvent('s-ev', 'r-ev', { note: 'from the agent' })
      const told = once(s.events.appended, 'event')
      await s.ledger.event(input)
      t.match((await told)[0], { type: 'test.note', session_id: 's-ev', event: { note: 'from the agent' } })
      t.match(await s.events.list({ request_id: 'r-ev' }), [{ kind: 'cloudevent', type: 'test.note', session_id: 's-ev', request_id: 'r-ev', event: { note: 'from the agent' } }])
      await t.rejects(s.ledger.event(anEvent('s-ev', 'r-ev', { render_to_user: true })), { code: 'AH_ERR_POLICY_VIOLATION' })
      t.equal((await s.events.list({ request_id: 'r-ev' })).length, 1)
    })

    t.test('record appends the host\'s event and its audit row in one transaction: both or neither', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const audit: AuditInput = { actor: 'k1', action: 'tool.call', resource: 'search', success: true, request_id: 'r-rec' }
      await s.ledger.record(anEvent('s-rec', 'r-rec', { tool: 'search' }), audit)
      t.match(await s.events.list({ request_id: 'r-rec' }), [{ type: 'test.note', event: { tool: 'search' } }])
      t.match(await s.audit.list({ action: 'tool.call' }), [{ resource: 'search', request_id: 'r-rec' }])
      await t.rejects(s.ledger.record(anEvent('s-rec', 'r-rec', { nested: { render_to_user: 1 } }), audit), { code: 'AH_ERR_POLICY_VIOLATION' })
      t.equal((await s.events.list({ request_id: 'r-rec' })).length, 1)
      t.equal((await s.audit.list({ action: 'tool.call' })).length, 1, 'no audit row for an event that was refused')
    })

    t.test('audit appends one row to the chain', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      await s.ledger.audit({ actor: 'k1', action: 'agent.audit', resource: AGENT, success: true, details: { by: 'agent:echo' } })
      t.match(await s.audit.list({ action: 'agent.audit' }), [{ actor: 'k1', details: { by: 'agent:echo' } }])
      t.match(await s.audit.verify(), { ok: true })
    })
  })
}

t.test('postgres ledger: how a follower is woken', async (t) => {
  const s = await stores.postgres?.(t)
  if (s === undefined) return
  const follower = await s.another()
  const notifications = follower.notifications as PgNotifications

  t.test('a notification that came while the follower was reading makes its next wait return at once', async (t) => {
    const run = newRun()
    await s.ledger.start(run)
    const record = await s.ledger.get(run.request_id) as RunRecord
    // the follower has looked at the run once (its watch exists) and is reading, not waiting
    const controller = new AbortController()
    controller.abort()
    await follower.ledger.journalGrew(record, 120_000, controller.signal)
    const heard: string[] = []
    // registered after the ledger's own listener, so by the time this hears it the ledger has too
    const stop = notifications.on(CHANNELS.journal, (id) => { heard.push(id) })
    t.teardown(stop)
    s.ledger.append(run.request_id, 'tok', row(1, MAIN, 1))
    await s.ledger.flush(run.request_id)
    await until('the follower to hear the flush', () => heard.includes(String(record.run_id)), 10_000)
    const live = new AbortController()
    t.teardown(() => { live.abort() })
    t.equal(await settlesWithin(follower.ledger.journalGrew(record, 120_000, live.signal), 10_000), true, 'returned at once: the dirty mark')
    t.equal(await settlesWithin(follower.ledger.journalGrew(record, 120_000, live.signal), 200), false, 'and the mark is used up')
  })

  t.test('a follower of a run nobody flushes is woken by its timeout', async (t) => {
    const run = newRun()
    await s.ledger.start(run)
    const record = await s.ledger.get(run.request_id) as RunRecord
    // with the listener up, a short timeout is stretched to a one-second safety net; it still returns
    await follower.ledger.journalGrew(record, 5)
    t.pass('returned')
  })

  t.test('with the listening connection down, a follower polls at its own timeout', async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return
    const pool = await openPostgres(url)
    const writer = new PgGroupWriter(pool)
    const down = new PgNotifications({ connectionString: url }, quiet)
    t.teardown(async () => { await writer.drain(); await pool.end() })
    t.equal(down.connected, false, 'never started')
    const ledger = new PgRunLedger({ pool, writer, notifications: down, sessions: new PgSessionStore(pool), audit: await PgAuditLog.open(pool), events: new PgEventStore(pool) })
    const run = newRun()
    await ledger.start(run)
    const record = await ledger.get(run.request_id) as RunRecord
    // its own timeout (no one-second safety net: nothing would wake it sooner)
    await ledger.journalGrew(record, 5)
    t.equal(down.connected, false)
  })

  t.test('forgetting idle runs (past 10 000 watched) keeps the ones a follower is waiting on', async (t) => {
    const run = newRun()
    await s.ledger.start(run)
    const record = await s.ledger.get(run.request_id) as RunRecord
    const realNow = Date.now
    const aborted = AbortSignal.abort()
    const controller = new AbortController()
    t.teardown(() => { controller.abort() })
    let grew: Promise<void>
    try {
      // watched over a minute ago: idle ones are forgotten, this one is waited on
      const past = realNow() - 120_000
      Date.now = () => past
      grew = follower.ledger.journalGrew(record, 120_000, controller.signal)
      for (let i = 0; i < 10_000; i++) follower.ledger.journalGrew({ run_id: 1_000_000 + i, request_id: `idle-${i}` }, 120_000, aborted).catch(() => {})
    } finally {
      Date.now = realNow
    }
    // the 10 001st run watched makes room
    await follower.ledger.journalGrew({ run_id: 2_000_000, request_id: 'new' }, 120_000, aborted)
    s.ledger.append(run.request_id, 'tok', row(1, MAIN, 1))
    await s.ledger.flush(run.request_id)
    t.equal(await settlesWithin(grew, 10_000), true, 'the waiting follower is still woken')
  })
})
