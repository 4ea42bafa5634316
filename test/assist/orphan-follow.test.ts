import t from 'tap'
import { buildApp } from '../../src/app.js'
import { envelope, FIXTURE_AGENTS_DIR, SCRIPTED, streamingScript, tempDataDir, testConfig, sqliteRuns } from '../helper.js'
import { holdDbLock } from '../lock-holder.js'
import { startServer } from '../server-child.js'
import { open, until } from '../socket.js'
import { assertStreamRules, parseSse } from '../sse.js'

const slow = streamingScript(400, 20)

t.test('a client following an orphan recovers it; while the lock is held elsewhere its stream is cut short, never closed as if complete', async (t) => {
  const dataDir = tempDataDir(t)
  const owner = await startServer(t, { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '1500' })
  // this server's own heartbeat is slow (a ten-minute lease): only a follower can recover the run.
  // It boots, and the lock holder is ready, before the owner dies: a boot's recovery or a slow
  // spawn on a loaded machine would otherwise find the lease lapsed first
  const app = await buildApp(testConfig(t, { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '600000', DB_WRITE_BUDGET_MS: '300' }))
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
  const holder = await holdDbLock(t, dataDir, true)

  const body = envelope(SCRIPTED, { script: slow })
  const first = await open(owner.url, body)
  await until('some deltas', () => (first.text().match(/"DELTA"/g) ?? []).length >= 3, 20_000)
  owner.child.kill('SIGKILL')
  await owner.exited
  await until('the dead owner\'s lease to lapse', () => (sqliteRuns(app).get(body.request_id)?.lease_expires_at ?? Infinity) < Date.now(), 20_000, 20)

  await holder.lock()
  const cut = await open(url, body)
  // bounded, so that a hang says where it was (one run beside a CPU hog timed out at tap's 180 s)
  await until('the response cut short while the lock is held', () => cut.res.readableEnded || cut.res.destroyed, 30_000, 20)
  const partial = parseSse(cut.text().slice(0, cut.text().lastIndexOf('\n\n') + 2), false).packets
  t.ok(partial.length >= 3, 'the journal was replayed')
  t.notOk(partial.some((p) => p.op === 'CLOSE' && p.stream_id === partial[0]?.stream_id), 'but the response was cut before any end, so the client knows to come back')
  t.equal(sqliteRuns(app).get(body.request_id)?.state, 'running', 'nothing was recovered while the lock was held')

  await holder.release()
  const again = await open(url, body)
  await until('the recovered run\'s response to end', () => again.res.readableEnded || again.res.destroyed, 30_000, 20)
  const packets = parseSse(again.text()).packets
  assertStreamRules(packets)
  t.match(packets.at(-3)?.p, { code: 'run_interrupted', severity: 'FATAL' }, 'the follower recovered it')
  t.equal(sqliteRuns(app).get(body.request_id)?.end_reason, 'interrupted')
})
