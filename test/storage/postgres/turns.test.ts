/**
 * The PostgreSQL ledger and session store gather a turn's writes of one kind into one statement
 * (issue 19's speed): many runs' starts, rows and ends are one write of the group writer, each
 * caller still gets its own outcome, and a write at fault fails alone.
 */
import t, { type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import type { InteractionRecord } from '../../../src/protocol/session.js'
import type { AuditInput } from '../../../src/storage/audit.js'
import { PgAuditLog } from '../../../src/storage/postgres/audit.js'
import { openPostgres } from '../../../src/storage/postgres/database.js'
import { PgEventStore } from '../../../src/storage/postgres/events.js'
import { PgGroupWriter } from '../../../src/storage/postgres/group-writer.js'
import { PgNotifications } from '../../../src/storage/postgres/notifications.js'
import { PgRunLedger } from '../../../src/storage/postgres/run-ledger.js'
import { PgSessionStore } from '../../../src/storage/postgres/sessions.js'
import type { NewRun } from '../../../src/storage/runs.js'
import { AGENTS, envelope } from '../../helper.js'
import { pgDatabase } from '../../pg.js'

interface Setup {
  ledger: PgRunLedger
  sessions: PgSessionStore
  audit: PgAuditLog
  pool: Awaited<ReturnType<typeof openPostgres>>
  /** What the group writer told of each transaction: its writes and how many failed. */
  commits: Array<{ writes: number, failed: number }>
}

async function setup (t: Test): Promise<Setup | undefined> {
  const url = await pgDatabase(t)
  if (url === undefined) return undefined
  const pool = await openPostgres(url)
  const notifications = new PgNotifications({ connectionString: url }, { warn: () => {} })
  await notifications.start()
  const commits: Setup['commits'] = []
  const writer = new PgGroupWriter(pool, { onCommit: (stats) => { commits.push(stats) } })
  t.teardown(async () => {
    await notifications.close()
    await writer.drain()
    await pool.end()
  })
  const audit = await PgAuditLog.open(pool)
  const sessions = new PgSessionStore(pool, writer)
  const ledger = new PgRunLedger({ pool, writer, notifications, sessions, audit, events: new PgEventStore(pool) })
  return { ledger, sessions, audit, pool, commits }
}

function newRun (options: { wireId?: string, sessionId?: string, ownerKey?: string, token?: string } = {}): NewRun {
  const wireId = options.wireId ?? randomUUID()
  const ownerKey = options.ownerKey ?? 'k1'
  const body = envelope(AGENTS.echo, { query: 'q' }, { requestId: wireId, sessionId: options.sessionId ?? `session-${wireId}` })
  return {
    request_id: `${ownerKey}/${wireId}`,
    envelope_hash: `hash-${wireId}`,
    envelope: JSON.stringify(body),
    session_id: body.context.session_id,
    agent_id: AGENTS.echo,
    main_stream_id: 'a0000000-0000-4000-8000-00000000000a',
    owner_instance: 'instance-a',
    owner_pid: 4242,
    owner_key: ownerKey,
    lease_token: options.token ?? randomUUID(),
    lease_expires_at: Date.now() + 60_000
  }
}

const claimOf = (run: NewRun, keyId = run.owner_key as string): { sessionId: string, userId: string, keyId: string } => ({ sessionId: run.session_id, userId: 'user-1', keyId })

function interaction (run: NewRun, n: number): InteractionRecord {
  const wireId = (JSON.parse(run.envelope) as { request_id: string }).request_id
  return { request_id: wireId, session_id: run.session_id, user_id: 'user-1', agent_id: run.agent_id, agent_request_id: wireId, root_request_id: wireId, timestamp: new Date().toISOString(), status: 'done', input: { query: `question ${n}` }, output: { text: `answer ${n}` } }
}

const auditOf = (run: NewRun): AuditInput => ({ actor: run.owner_key ?? 'anonymous', action: 'assist', resource: run.agent_id, success: true, request_id: run.request_id })

const frame = (seq: number): string => JSON.stringify({ stream_id: 'a0000000-0000-4000-8000-00000000000a', seq, op: 'DELTA', t: 'now', p: `packet ${seq}` })

t.test('twenty starts in one turn are one write of the group writer, each with its own outcome', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const runs = Array.from({ length: 20 }, () => newRun())
  const outcomes = await Promise.all(runs.map(async (run) => await s.ledger.start(run, claimOf(run))))
  t.same(outcomes, runs.map(() => 'started'))
  t.same(s.commits, [{ writes: 1, failed: 0 }], 'one transaction, one write (one statement) for all of them')
  for (const run of runs) t.equal((await s.ledger.get(run.request_id))?.lease_token, run.lease_token)
})

t.test('within one turn: the same request id twice starts once and joins once; two keys claiming one new session: the first gets it', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const wireId = randomUUID()
  const first = newRun({ wireId })
  const again = newRun({ wireId })
  const mine = newRun({ sessionId: 'shared', ownerKey: 'k1' })
  const theirs = newRun({ sessionId: 'shared', ownerKey: 'k2' })
  const outcomes = await Promise.all([first, again, mine, theirs].map(async (run) => await s.ledger.start(run, claimOf(run))))
  t.same(outcomes, ['started', 'taken', 'started', 'not-yours'])
  t.equal((await s.ledger.get(first.request_id))?.lease_token, first.lease_token, 'the run stored is the first one\'s')
  t.equal(await s.sessions.keyOf('shared'), 'k1')
  t.equal(await s.ledger.get(theirs.request_id), undefined, 'a refused run is not stored')
  t.equal(await s.ledger.start(newRun({ sessionId: 'shared', ownerKey: 'k2' }), { sessionId: 'shared', userId: 'u', keyId: 'k2' }), 'not-yours', 'and later turns see the session k1\'s')
})

t.test('a start at fault fails alone: the rest of its turn start', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const good = [newRun(), newRun()]
  // a pid past PostgreSQL's integer: this start's statement fails
  const bad = { ...newRun(), owner_pid: 2 ** 40 }
  const results = await Promise.allSettled([s.ledger.start(good[0] as NewRun), s.ledger.start(bad), s.ledger.start(good[1] as NewRun)])
  t.match(results, [{ status: 'fulfilled', value: 'started' }, { status: 'rejected', reason: { code: '22003' } }, { status: 'fulfilled', value: 'started' }])
  for (const run of good) t.ok(await s.ledger.get(run.request_id), 'stored')
  t.equal(await s.ledger.get(bad.request_id), undefined)
})

t.test('rows and ends of many runs in one turn: the rows written, the runs ended, interactions and audit rows in the order of the calls', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const runs = Array.from({ length: 8 }, () => newRun({ sessionId: 'together' }))
  // and one whose lease another took meanwhile: its rows and its end are refused, not written
  const stolen = newRun({ sessionId: 'together' })
  await Promise.all([...runs, stolen].map(async (run) => await s.ledger.start(run)))
  await s.pool.query('UPDATE runs SET lease_token = $1 WHERE request_id = $2', ['someone-else', stolen.request_id])
  const before = s.commits.length
  const ends = runs.map(async (run, i) => {
    s.ledger.append(run.request_id, run.lease_token as string, { ord: 1, stream_id: 'a0000000-0000-4000-8000-00000000000a', seq: 1, frame: frame(1) })
    s.ledger.append(run.request_id, run.lease_token as string, { ord: 2, stream_id: 'a0000000-0000-4000-8000-00000000000a', seq: 2, frame: frame(2) })
    return await s.ledger.finish({ requestId: run.request_id, token: run.lease_token as string, reason: 'done', status: 200, response: { n: i } }, interaction(run, i), auditOf(run))
  })
  s.ledger.append(stolen.request_id, stolen.lease_token as string, { ord: 1, stream_id: 'a0000000-0000-4000-8000-00000000000a', seq: 1, frame: frame(1) })
  const stolenEnd = s.ledger.finish({ requestId: stolen.request_id, token: stolen.lease_token as string, reason: 'done', status: 200, response: {} }, interaction(stolen, 99), auditOf(stolen))
  const results = await Promise.all([...ends, stolenEnd])
  for (const result of results.slice(0, 8)) t.match(result, { ended: true })
  t.match(results[8], { ended: false, lost: [stolen.request_id] })
  t.same(s.commits.slice(before), [{ writes: 1, failed: 0 }], 'the rows and ends of nine runs: one write')
  for (const [i, run] of runs.entries()) {
    t.same((await s.ledger.rows(run.request_id)).map((r) => r.ord), [1, 2])
    t.match(await s.ledger.get(run.request_id), { state: 'ended', end_reason: 'done', response_status: 200, response: JSON.stringify({ n: i }) })
  }
  t.same(await s.ledger.rows(stolen.request_id), [])
  t.same((await s.sessions.history('together', 20)).map((h) => h.input), runs.map((_, i) => ({ query: `question ${i}` })), 'history in the order of the calls')
  const audit = await s.audit.list({ action: 'assist' })
  t.same(audit.map((row) => row.request_id), runs.map((run) => run.request_id), 'audit rows in the order of the calls')
  t.match(await s.audit.verify(), { ok: true }, 'one chain')
})

t.test('values stored in one turn: one statement; the last of one key wins, and recall ranks equal hits the stored last first', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const handle = s.sessions.open('values', { user_id: 'user-1', tier: 'free', locale: 'en-GB' })
  await Promise.all([
    handle.store('colour', 'red'),
    handle.store('a-note', 'banana'),
    handle.store('colour', 'blue'),
    handle.store('b-note', 'banana')
  ])
  t.same(s.commits, [{ writes: 1, failed: 0 }])
  t.equal(await handle.get('colour'), 'blue', 'the last store of a key wins')
  const hits = await handle.recall('banana', 5)
  t.same(hits.map((h) => h.ref), ['b-note', 'a-note'], 'of equal hits, the value stored last first (as stored, not by key)')
})

t.test('a turn\'s lookups of runs and of session values are one query each', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const runs = Array.from({ length: 6 }, () => newRun())
  await Promise.all(runs.map(async (run) => await s.ledger.start(run)))
  const handle = s.sessions.open('values', { user_id: 'user-1', tier: 'free', locale: 'en-GB' })
  await Promise.all([handle.store('a', 1), handle.store('b', 2)])
  const queries: string[] = []
  const query = s.pool.query.bind(s.pool)
  s.pool.query = ((config: unknown, values?: unknown) => {
    queries.push(typeof config === 'string' ? config : (config as { text: string }).text)
    return query(config as string, values as unknown[])
  }) as typeof s.pool.query
  const [found, missing, a, b, none] = await Promise.all([
    Promise.all(runs.map(async (run) => await s.ledger.get(run.request_id))),
    s.ledger.get('nobody/none'),
    handle.get('a'),
    handle.get('b'),
    handle.get('none', 'fallback')
  ])
  t.same(found.map((r) => r?.lease_token), runs.map((r) => r.lease_token))
  t.equal(missing, undefined)
  t.same([a, b, none], [1, 2, 'fallback'])
  t.equal(queries.length, 2, `two queries: ${queries.map((q) => q.slice(0, 40)).join(' | ')}`)
})

t.test('rows and ends at fault fail alone: the rest of their turn is written', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const [clash, good, broken] = [newRun(), newRun(), newRun()] as [NewRun, NewRun, NewRun]
  await Promise.all([clash, good, broken].map(async (run) => await s.ledger.start(run)))
  const row = (ord: number): { ord: number, stream_id: string, seq: number, frame: string } => ({ ord, stream_id: 'a0000000-0000-4000-8000-00000000000a', seq: ord, frame: frame(ord) })
  s.ledger.append(clash.request_id, clash.lease_token as string, row(1))
  await s.ledger.flush(clash.request_id)
  // the same ord again: its journal row collides with the stored one
  s.ledger.append(clash.request_id, clash.lease_token as string, row(1))
  s.ledger.append(good.request_id, good.lease_token as string, row(1))
  s.ledger.append(broken.request_id, broken.lease_token as string, row(1))
  const flushes = [s.ledger.flush(clash.request_id), s.ledger.flush(good.request_id)]
  const goodEnd = s.ledger.finish({ requestId: good.request_id, token: good.lease_token as string, reason: 'done', status: 200, response: {} }, interaction(good, 1), auditOf(good))
  // an interaction without a session breaks its end's statement
  const brokenEnd = s.ledger.finish({ requestId: broken.request_id, token: broken.lease_token as string, reason: 'done', status: 200, response: {} }, { ...interaction(broken, 2), session_id: null as unknown as string }, auditOf(broken))
  const results = await Promise.allSettled([...flushes, goodEnd, brokenEnd])
  t.match(results, [
    { status: 'rejected', reason: { code: '23505' } },
    { status: 'fulfilled', value: [] },
    { status: 'fulfilled', value: { ended: true } },
    { status: 'rejected', reason: { code: '23502' } }
  ])
  t.same((await s.ledger.rows(good.request_id)).map((r) => r.ord), [1], 'the good run\'s rows written')
  t.match(await s.ledger.get(good.request_id), { state: 'ended' })
  t.same((await s.ledger.rows(broken.request_id)).map((r) => r.ord), [1], 'the broken end\'s rows were written on their own')
  t.match(await s.ledger.get(broken.request_id), { state: 'running' }, 'its end was not')
  t.same((await s.ledger.rows(clash.request_id)).map((r) => r.ord), [1], 'the clashing rows left the stored one alone')
  t.match(await s.audit.verify(), { ok: true })
})

t.test('values stored at fault fail alone: the rest of their batch are stored', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const handle = s.sessions.open('values', { user_id: 'user-1', tier: 'free', locale: 'en-GB' })
  // a session without its owner breaks its batch's statement
  const orphan = s.sessions.open('orphan', { user_id: null as unknown as string, tier: 'free', locale: 'en-GB' })
  const results = await Promise.allSettled([handle.store('a', 1), orphan.store('b', 2), handle.store('c', 3)])
  t.match(results, [{ status: 'fulfilled' }, { status: 'rejected', reason: { code: '23502' } }, { status: 'fulfilled' }])
  t.same([await handle.get('a'), await handle.get('c'), await orphan.get('b')], [1, 3, undefined])
})

t.test('an envelope holding a \\u0000 escape (valid JSON, which jsonb refuses) is stored and found by its wire id; so are an answer, an interaction and a value holding one', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const wireId = randomUUID()
  const run = newRun({ wireId })
  const body = JSON.parse(run.envelope) as Record<string, unknown>
  const withNul = { ...run, envelope: JSON.stringify({ ...body, payload: { text: 'a\u0000b' } }) }
  t.equal(await s.ledger.start(withNul), 'started')
  t.equal((await s.ledger.byWireId(AGENTS.echo, wireId))?.request_id, run.request_id)
  t.equal((await s.ledger.get(run.request_id))?.envelope, withNul.envelope, 'stored as given')
  const ended = await s.ledger.finish({ requestId: run.request_id, token: run.lease_token as string, reason: 'done', status: 200, response: { text: 'c\u0000d' } },
    { ...interaction(run, 1), output: { text: 'e\u0000f' } }, auditOf(run))
  t.match(ended, { ended: true }, 'an answer and an interaction holding one are stored')
  t.same(JSON.parse((await s.ledger.get(run.request_id))?.response as string), { text: 'c\u0000d' })
  t.same((await s.sessions.history(run.session_id)).map((h) => h.output), [{ text: 'e\u0000f' }])
  const handle = s.sessions.open(run.session_id, { user_id: 'user-1', tier: 'free', locale: 'en-GB' })
  await handle.store('nul', 'g\u0000h')
  t.equal(await handle.get('nul'), 'g\u0000h', 'and a session value')
})
