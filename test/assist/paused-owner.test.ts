import t from 'tap'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { buildApp } from '../../src/app.js'
import { envelope, FIXTURE_AGENTS_DIR, SCRIPTED, streamingScript, tempDataDir, testConfig, sqliteRuns } from '../helper.js'
import { startServer } from '../server-child.js'
import { open, until } from '../socket.js'
import { assertStreamRules, parseSse } from '../sse.js'

const slow = streamingScript(400, 20)

t.test('a server paused past its run\'s lease: another recovers the run; when the first wakes it writes nothing more and its client gets the recovered end', async (t) => {
  const dataDir = tempDataDir(t)
  const owner = await startServer(t, { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '600' })
  const body = envelope(SCRIPTED, { script: slow })
  const stream = await open(owner.url, body)
  await until('some deltas', () => (stream.text().match(/"DELTA"/g) ?? []).length >= 3, 20_000)
  owner.child.kill('SIGSTOP')
  t.teardown(() => { owner.child.kill('SIGCONT') })

  const other = await buildApp(testConfig(t, { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '600' }))
  t.teardown(() => other.close())
  await until('the other server to recover the run', () => sqliteRuns(other).get(body.request_id)?.state === 'ended', 20_000, 20)
  t.equal(sqliteRuns(other).get(body.request_id)?.end_reason, 'interrupted')
  const journaled = sqliteRuns(other).rows(body.request_id).length

  owner.child.kill('SIGCONT')
  await stream.ended
  const packets = parseSse(stream.text()).packets
  assertStreamRules(packets)
  t.match(packets.at(-3)?.p, { code: 'run_interrupted' }, 'the woken server\'s client gets the end the journal has')
  t.same(packets.map((p) => JSON.stringify(p)), sqliteRuns(other).rows(body.request_id).filter((r) => r.seq !== null).map((r) => r.frame), 'exactly the journal')
  // give the woken server every chance to write: its heartbeat and its agent run on for a while
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.equal(sqliteRuns(other).rows(body.request_id).length, journaled, 'the woken server added nothing to the journal')
  const db = new Database(join(dataDir, 'agent-host.db'), { readonly: true })
  t.teardown(() => db.close())
  t.same(db.prepare("SELECT action FROM audit_log WHERE request_id = ? AND action LIKE 'assist%'").all(body.request_id), [{ action: 'assist.interrupted' }], 'and recorded nothing: one end, audited once')
  t.equal((db.prepare('SELECT count(*) AS n FROM interactions WHERE request_id = ?').get(body.request_id) as { n: number }).n, 1)
})
