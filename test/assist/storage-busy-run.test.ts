import t from 'tap'
import { envelope, FIXTURE_AGENTS_DIR, listen } from '../helper.js'
import { holdDbLock } from '../lock-holder.js'
import { open, until } from '../socket.js'
import { parseSse } from '../sse.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

t.test('a run that cannot journal within DB_WRITE_BUDGET_MS ends with storage_busy (TRANSIENT); once the lock is free its journal holds exactly what the client got', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, DB_WRITE_BUDGET_MS: '300' })
  const holder = await holdDbLock(t, app.config.DATA_DIR, true)
  const body = envelope(SCRIPTED, {
    script: [{ op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'before ' }, { op: 'sleep', ms: 2000 }, { op: 'write', name: 's', chunk: 'after ' }, { op: 'sleep', ms: 1500 }, { op: 'close', name: 's' }],
    catch: true
  })
  const stream = await open(url, body)
  await until('the first delta', () => stream.text().includes('before'), 10_000)
  // the agent sleeps, then writes again: by then another process holds the lock
  await holder.lock()
  await stream.ended
  const got = parseSse(stream.text()).packets
  t.match(got.at(-3)?.p, { code: 'storage_busy', severity: 'TRANSIENT' }, 'the client is told to retry')
  t.same(got.slice(-2).map((p) => [p.op, p.p]), [['CLOSE', 'aborted'], ['CLOSE', 'aborted']])
  t.equal((await app.inject({ url: '/health' })).statusCode, 200, 'the server is not blocked meanwhile')

  await holder.release()
  await until('the run to be recorded', async () => (await app.ledger.get(body.request_id))?.state === 'ended', 20_000, 20)
  const replay = await open(url, body)
  await replay.ended
  t.same(parseSse(replay.text()).packets, got, 'the journal, written once the lock was free, is what the client got')
  const json = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
  t.match(json.json().output.errors, [{ code: 'storage_busy' }])
})
