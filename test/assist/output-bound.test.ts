import t from 'tap'
import { envelope, FIXTURE_AGENTS_DIR, listen, sqliteRuns, sqliteDb, sqliteSessions } from '../helper.js'
import { open } from '../socket.js'
import { parseSse } from '../sse.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'
const MiB = 1024 * 1024

// Regression: a client that never read let a run keep its whole output in memory and store it four times
// (journal, interaction, JSON answer, search index): 20 runs of 20-50 MB took RSS to 1.2 GB and the database to 5 GB.
t.test('a run past RUN_MAX_OUTPUT_BYTES ends with a FATAL output_too_large; what is stored stays bounded', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_MAX_OUTPUT_BYTES: String(MiB) })
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'flood', name: 's', count: 300, size: 10_000 }], catch: true })
  const stream = await open(url, body)
  await stream.ended
  const packets = parseSse(stream.text()).packets
  t.same(packets.slice(-3).map((p) => p.op), ['ERROR', 'CLOSE', 'CLOSE'])
  t.match(packets.at(-3)?.p, { code: 'output_too_large', severity: 'FATAL', details: { max_bytes: MiB } })
  t.equal(packets.at(-1)?.p, 'aborted')

  const journalBytes = sqliteDb(app).prepare('SELECT sum(length(frames)) AS n FROM journal WHERE run_id = (SELECT run_id FROM runs WHERE request_id = ?)').get(body.request_id) as { n: number }
  t.ok(journalBytes.n <= MiB + 20_000, `the journal holds at most the cap and one packet (${journalBytes.n} bytes)`)
  const stored = sqliteDb(app).prepare('SELECT length(response) AS answer, (SELECT length(output) FROM interactions WHERE request_id = runs.request_id) AS interaction FROM runs WHERE request_id = ?').get(body.request_id) as { answer: number, interaction: number }
  t.ok(stored.answer < 4096, `the stored answer is not a copy of the output (${stored.answer} bytes)`)
  t.ok(stored.interaction < 80_000, `the session keeps a bounded summary (${stored.interaction} bytes)`)
  sqliteSessions(app).indexPending()
  const fts = sqliteDb(app).prepare("SELECT count(*) AS n, max(length(content)) AS text FROM memory_fts WHERE kind = 'interaction' AND ref = ?").get(body.request_id) as { n: number, text: number | null }
  t.same(fts, { n: 1, text: null }, 'the search index holds the run, and no copy of its text')

  const retry = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
  t.equal(retry.statusCode, 200)
  const answer = retry.json()
  t.match(answer.output.errors, [{ code: 'output_too_large' }], 'the stored answer says why it ended')
  t.ok(answer.output.text.length > MiB * 0.9, 'a JSON retry still gets everything that was produced (rebuilt from the journal)')
})

t.test('an SSE client that never reads: the run finishes into the journal, memory is not kept per packet', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, SSE_STALL_TIMEOUT_MS: '300', SSE_MAX_BUFFER_BYTES: '65536' })
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'flood', name: 's', count: 200, size: 20_000 }] })
  const stream = await open(url, body)
  stream.res.pause()
  const deadline = Date.now() + 60_000
  while (sqliteRuns(app).get(body.request_id)?.state !== 'ended' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal(sqliteRuns(app).get(body.request_id)?.state, 'ended', 'the run went on without its reader and ended')
  stream.res.destroy()
  const replay = await open(url, body)
  await replay.ended
  const packets = parseSse(replay.text()).packets
  t.equal(packets.filter((p) => p.op === 'DELTA').length, 200, 'everything is in the journal')
})
