import t from 'tap'
import { buildApp } from '../../src/app.js'
import { SqliteSessionStore } from '../../src/storage/sqlite/sessions.js'
import { ftsQuery, normaliseRank } from '../../src/storage/sessions.js'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteGroupWriter } from '../../src/storage/sqlite/group-writer.js'
import { AGENTS, envelope, FIXTURE_AGENTS_DIR, sqliteDb, sqliteSessions, tempDataDir, testConfig } from '../helper.js'
import { checkErrorBody } from '../sse.js'
import { until } from '../socket.js'
import { observed } from '../fixtures/agents/scripted/index.js'

// The session store's own contract, on SQLite and on PostgreSQL, is test/storage/sessions-contract.test.ts;
// here: sessions through the app (what runs record, the routes) and the SQLite store's search-index batches.
const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'
const ID = { user_id: 'user-1', tier: 'free', locale: 'en' }

t.test('history and values survive a restart on the same DATA_DIR', async (t) => {
  const config = testConfig(t)
  const sessionId = '5e550000-0000-4000-8000-000000000001'
  const first = await buildApp(config)
  for (const q of ['first question', 'second question']) {
    const res = await first.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo, { query: q }, { sessionId }) })
    t.equal(res.statusCode, 200)
  }
  await first.sessions.open(sessionId, ID).store('profile', { colour: 'teal', tags: ['a', 'b'] })
  await first.close()

  const second = await buildApp(config)
  t.teardown(() => second.close())
  const handle = second.sessions.open(sessionId, ID)
  t.same(await handle.get('profile'), { colour: 'teal', tags: ['a', 'b'] })
  t.equal(await handle.get('calls'), 2)
  const history = await handle.history()
  t.same(history.map((h) => [h.input, h.output, h.status]), [
    [{ query: 'first question' }, { echo: 'first question', calls: 1 }, 'done'],
    [{ query: 'second question' }, { echo: 'second question', calls: 2 }, 'done']
  ])
  t.equal(history[0]?.agent_id, AGENTS.echo)
  t.equal(history[0]?.root_request_id, history[0]?.agent_request_id, 'lineage defaults are recorded')
  const res = await second.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo, { query: 'third' }, { sessionId }) })
  t.equal(res.json().output.calls, 3, 'the counter carried on')
})

t.test('recall finds interactions and values by their words, best first, threshold in 0..1', async (t) => {
  const app = await buildApp(testConfig(t))
  t.teardown(() => app.close())
  const sessionId = '5e550000-0000-4000-8000-000000000002'
  for (const q of ['the quick brown fox', 'a lazy dog sleeps', 'quick quick quick']) {
    await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo, { query: q }, { sessionId }) })
  }
  const handle = app.sessions.open(sessionId, ID)
  await handle.store('pet', 'a fox named Ember')
  const hits = await handle.recall('fox')
  t.same(hits.map((h) => h.kind).sort(), ['interaction', 'value'])
  t.ok(hits.every((h) => h.score > 0 && h.score < 1))
  const quick = await handle.recall('quick', 5)
  t.equal((quick[0]?.content as { input: { query: string } }).input.query, 'quick quick quick', 'BM25 ranks the denser match first')
  t.ok((quick[0]?.score ?? 0) >= (quick[1]?.score ?? 0))
  t.same(await handle.recall('fox', 1).then((h) => h.length), 1)
  t.same(await handle.recall('fox', 5, 0.99), [], 'threshold filters')
  t.same(await handle.recall('zebra'), [])
  t.same(await handle.recall('"); DROP TABLE sessions; --'), [], 'query syntax never reaches FTS5')
  t.same(await handle.recall('   '), [])
  const other = app.sessions.open('5e550000-0000-4000-8000-000000000099', ID)
  t.same(await other.recall('fox'), [], 'only the session\'s own memory')
  t.equal(ftsQuery('Fox, fox & HOUND'), '"fox" OR "hound"')
  t.equal(normaliseRank(0), 0)
  t.ok(normaliseRank(-3) > normaliseRank(-1))
})

t.test('every call is recorded, including failed and cancelled runs', async (t) => {
  const app = await buildApp(testConfig(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR }))
  t.teardown(() => app.close())
  const sessionId = '5e550000-0000-4000-8000-000000000004'
  const post = async (script: unknown[], accept = 'application/json') => await app.inject({
    method: 'POST', url: '/v1/assist', headers: { accept }, payload: envelope(SCRIPTED, { script }, { sessionId })
  })
  await post([{ op: 'markdown', content: 'fine' }])
  await post([{ op: 'throw', message: 'boom' }])
  await post([{ op: 'thought', content: 't' }, { op: 'error', message: 'fatal' }], 'text/event-stream')
  const history = await app.sessions.history(sessionId)
  t.same(history.map((h) => h.status), ['done', 'aborted', 'aborted'])
  t.match(history[1]?.output, { errors: [{ code: 'agent_failed' }] })
  t.match(history[2]?.output, { errors: [{ code: 'agent_error', severity: 'FATAL' }] })
})

t.test('GET /v1/sessions/:id/history pages from the newest, in time order', async (t) => {
  const app = await buildApp(testConfig(t))
  t.teardown(() => app.close())
  const sessionId = '5e550000-0000-4000-8000-000000000005'
  for (let i = 1; i <= 5; i++) await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo, { query: `q${i}` }, { sessionId }) })
  const page = await app.inject({ url: `/v1/sessions/${sessionId}/history?limit=2` })
  t.equal(page.statusCode, 200)
  t.equal(page.json().total, 5)
  t.same(page.json().interactions.map((i: { input: { query: string } }) => i.input.query), ['q4', 'q5'])
  const older = await app.inject({ url: `/v1/sessions/${sessionId}/history?limit=2&offset=2` })
  t.same(older.json().interactions.map((i: { input: { query: string } }) => i.input.query), ['q2', 'q3'])
  const missing = await app.inject({ url: '/v1/sessions/5e550000-0000-4000-8000-0000000000ff/history' })
  t.equal(missing.statusCode, 404)
  t.equal(checkErrorBody(missing.json()).code, 'AH_ERR_SESSION_NOT_FOUND')
  const bad = await app.inject({ url: '/v1/sessions/not-a-uuid/history' })
  t.equal(checkErrorBody(bad.json()).code, 'AH_ERR_VALIDATION')
  const badLimit = await app.inject({ url: `/v1/sessions/${sessionId}/history?limit=0` })
  t.equal(badLimit.statusCode, 400)
})

t.test('DELETE /v1/sessions/:id erases that session only, and is audited', async (t) => {
  const app = await buildApp(testConfig(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR }))
  t.teardown(() => app.close())
  const gone = '5e550000-0000-4000-8000-000000000006'
  const kept = '5e550000-0000-4000-8000-000000000007'
  for (const sessionId of [gone, kept]) {
    const script = [{ op: 'markdown', content: `secret words of ${sessionId}` }, { op: 'emit', event: { specversion: '1.0', id: 'e1', source: '/t', type: 't.e' } }]
    await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(SCRIPTED, { script }, { sessionId }) })
    await app.sessions.open(sessionId, ID).store('v', 'secret value')
  }
  const res = await app.inject({ method: 'DELETE', url: `/v1/sessions/${gone}` })
  t.equal(res.statusCode, 204)
  t.equal(await app.sessions.owner(gone), undefined)
  t.same(await app.sessions.history(gone), [])
  t.equal(await app.sessions.open(gone, ID).get('v'), undefined)
  t.same(await app.sessions.open(gone, ID).recall('secret'), [])
  t.same(await app.events.list({ session_id: gone }), [])
  t.equal((sqliteDb(app).prepare('SELECT count(*) AS n FROM runs WHERE session_id = ?').get(gone) as { n: number }).n, 0)
  t.equal((sqliteDb(app).prepare('SELECT count(*) AS n FROM memory_fts WHERE session_id = ?').get(gone) as { n: number }).n, 0)
  t.equal((await app.sessions.history(kept)).length, 1, 'the other session is intact')
  t.equal((await app.sessions.open(kept, ID).recall('secret')).length, 2)
  t.equal((await app.events.list({ session_id: kept })).length, 1)
  t.match(await app.audit.list({ action: 'session.erase' }), [{ resource: gone, success: true }])
  const again = await app.inject({ method: 'DELETE', url: `/v1/sessions/${gone}` })
  t.equal(checkErrorBody(again.json()).code, 'AH_ERR_SESSION_NOT_FOUND')
})

t.test('erasing a session cancels its running requests first', async (t) => {
  const app = await buildApp(testConfig(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR }))
  t.teardown(() => app.close())
  const sessionId = '5e550000-0000-4000-8000-000000000008'
  await app.sessions.open(sessionId, ID).store('x', 1)
  const running = app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'working' }, { op: 'wait_abort' }] }, { sessionId }) })
  while (!observed.started.includes(sessionId)) await new Promise((resolve) => setTimeout(resolve, 5))
  const res = await app.inject({ method: 'DELETE', url: `/v1/sessions/${sessionId}` })
  t.equal(res.statusCode, 204)
  t.match((await running).json(), { output: { text: 'working' } })
  t.same(await app.sessions.history(sessionId), [], 'nothing of the session is left, not even the cancelled run')
  t.equal(await app.sessions.owner(sessionId), undefined)
})

t.test('interactions join the search index in background batches; a recall finds one recorded a moment ago', async (t) => {
  const app = await buildApp(testConfig(t))
  t.teardown(() => app.close())
  const indexed = (): number => (sqliteDb(app).prepare("SELECT count(*) AS n FROM memory_fts WHERE kind = 'interaction'").get() as { n: number }).n
  const record = (sessionId: string, requestId: string, query: string): void => {
    sqliteSessions(app).recordNow({ request_id: requestId, session_id: sessionId, user_id: 'user-1', agent_id: AGENTS.echo, agent_request_id: requestId, root_request_id: requestId, timestamp: new Date().toISOString(), status: 'done', input: { query }, output: { echo: query } })
  }
  const sessionId = '5e550000-0000-4000-8000-0000000000b1'
  const before = indexed()
  record(sessionId, '5e550000-0000-4000-8000-0000000000c1', 'zeppelins over Lisbon')
  t.equal(indexed(), before, 'recording does not touch the index')
  const hits = await app.sessions.open(sessionId, ID).recall('zeppelins')
  t.same(hits.map((h) => h.ref), ['5e550000-0000-4000-8000-0000000000c1'], 'a recall indexes what is pending first')
  for (let i = 0; i < 600; i++) record(sessionId, `5e550000-0000-4000-8000-${String(i).padStart(12, '0')}`, `batch item ${i}`)
  await until('the background batches', () => indexed() === before + 601, 10_000)
  t.equal(sqliteSessions(app).indexPending(), 0, 'nothing left to index')
})

t.test('an erased session\'s interaction ids are never reused: what is recorded after an erasure is still indexed', async (t) => {
  const app = await buildApp(testConfig(t))
  t.teardown(() => app.close())
  const record = (sessionId: string, requestId: string, query: string): void => {
    sqliteSessions(app).recordNow({ request_id: requestId, session_id: sessionId, user_id: 'user-1', agent_id: AGENTS.echo, agent_request_id: requestId, root_request_id: requestId, timestamp: new Date().toISOString(), status: 'done', input: { query }, output: { echo: query } })
  }
  const gone = '5e550000-0000-4000-8000-0000000000d1'
  const kept = '5e550000-0000-4000-8000-0000000000d2'
  record(gone, '5e550000-0000-4000-8000-0000000000e1', 'marmalade')
  t.equal(sqliteSessions(app).indexPending(), 1)
  t.ok(await app.sessions.erase(gone))
  record(kept, '5e550000-0000-4000-8000-0000000000e2', 'marmalade again')
  t.equal(sqliteSessions(app).indexPending(), 1, 'the new interaction is above the index\'s mark')
  t.same((await app.sessions.open(kept, ID).recall('marmalade')).map((h) => h.ref), ['5e550000-0000-4000-8000-0000000000e2'])
  t.same((await app.sessions.open(gone, ID).recall('marmalade')), [], 'nothing of the erased session is found')
})

t.test('a value stored again and again joins the search index once a batch, with its latest content', async (t) => {
  // the store alone, without a server's background indexer (every 250 ms, which fifty stores on a
  // loaded machine can outlast)
  const db = openDatabase(tempDataDir(t))
  const writer = new SqliteGroupWriter(db, { budgetMs: 5000 })
  t.teardown(() => { writer.close(); db.close() })
  const sessions = new SqliteSessionStore(db, writer)
  const sessionId = '5e550000-0000-4000-8000-0000000000f1'
  const session = sessions.open(sessionId, ID)
  const entries = (): unknown[] => db.prepare("SELECT ref FROM memory_fts WHERE session_id = ? AND kind = 'value'").all(sessionId)
  for (let i = 0; i < 50; i++) await session.store('counter', `pelican ${i}`)
  t.same(entries(), [], 'storing does not touch the index')
  t.equal(sessions.indexPending(), 1, 'fifty stores, one value to index')
  t.same(entries(), [{ ref: 'counter' }])
  await session.store('counter', 'albatross')
  t.same((await session.recall('albatross')).map((h) => h.content), [{ key: 'counter', value: 'albatross' }], 'a recall indexes what is pending first')
  t.same(await session.recall('pelican'), [], 'the replaced content is gone')
  t.same(entries(), [{ ref: 'counter' }], 'still one entry')
})
