import t from 'tap'
import { once } from 'node:events'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { envelope, FIXTURE_AGENTS_DIR, SCRIPTED, streamingScript, tempDataDir } from '../helper.js'
import { startServer } from '../server-child.js'
import { open, until } from '../socket.js'
import { assertStreamRules, parseSse } from '../sse.js'
import type { StreamPacket } from '../../src/protocol/packets.js'

const INSTANCE_ID = '0f0f0f0f-0000-4000-8000-00000000000a'
const endless = streamingScript(400, 25)

// Regression: recovery required another instance id and a dead owner PID. In the Docker image node is
// PID 1 and INSTANCE_ID is fixed, so after a crash nothing was ever recovered and every retry hung.
t.test('a run whose owner was SIGKILLed is recovered after its lease lapses, with the same INSTANCE_ID and a live owner PID', async (t) => {
  const dataDir = tempDataDir(t)
  const env = { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, INSTANCE_ID, RUN_LEASE_MS: '600' }
  const first = await startServer(t, env)
  const body = envelope(SCRIPTED, { script: endless })
  const live = await open(first.url, body)
  await until('three deltas', () => (live.text().match(/"DELTA"/g) ?? []).length >= 3, 20_000)
  first.child.kill('SIGKILL')
  await first.exited
  await live.ended

  // the same identity comes back, and the recorded owner PID belongs to a live process
  const db = new Database(join(dataDir, 'agent-host.db'))
  db.prepare('UPDATE runs SET owner_pid = ? WHERE request_id = ?').run(process.pid, body.request_id)
  db.close()
  const second = await startServer(t, env)

  const got = parseSse(live.text().slice(0, live.text().lastIndexOf('\n\n') + 2), false).packets
  const last = got.at(-1) as StreamPacket
  const resumed = await open(second.url, body, 'text/event-stream', { 'last-event-id': `${last.stream_id}:${last.seq}` })
  await resumed.ended
  const rest = parseSse(resumed.text(), false).packets
  const all = [...got, ...rest]
  assertStreamRules(all)
  t.same(rest.slice(-3).map((p) => p.op), ['ERROR', 'CLOSE', 'CLOSE'])
  t.match(rest.at(-3)?.p, { code: 'run_interrupted', severity: 'FATAL' })
  t.equal(all.at(-1)?.p, 'aborted')

  const retry = await open(second.url, body, 'application/json')
  await retry.ended
  const answer = JSON.parse(retry.text())
  t.equal(retry.res.statusCode, 200, 'a JSON retry gets the recovered answer')
  t.match(answer.output.errors, [{ code: 'run_interrupted' }])
  // Regression: metrics.packets of a recovered run left out the packets recovery appended (7 vs 10)
  const journal = new Database(join(dataDir, 'agent-host.db'), { readonly: true })
  const rows = (journal.prepare('SELECT coalesce(sum(count), 0) AS n FROM journal WHERE run_id = (SELECT run_id FROM runs WHERE request_id = ?)').get(body.request_id) as { n: number }).n
  const recoveries = (journal.prepare("SELECT count(*) AS n FROM audit_log WHERE action = 'assist.interrupted' AND request_id = ?").get(body.request_id) as { n: number }).n
  journal.close()
  t.equal(answer.metrics.packets, rows, 'metrics.packets counts every journaled packet, the closing ones included')
  t.equal(recoveries, 1, 'recovered exactly once')
  second.child.kill('SIGTERM')
  t.equal(await second.exited, 0)
})

t.test('several servers finding one orphan recover it exactly once', async (t) => {
  const dataDir = tempDataDir(t)
  const env = { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '400' }
  const first = await startServer(t, env)
  const body = envelope(SCRIPTED, { script: endless })
  const live = await open(first.url, body)
  await until('a delta', () => live.text().includes('"DELTA"'), 20_000)
  first.child.kill('SIGKILL')
  await first.exited
  const servers = await Promise.all([startServer(t, env), startServer(t, env), startServer(t, env)])
  const clients = await Promise.all(servers.map(async (s) => await open(s.url, body, 'application/json')))
  await Promise.all(clients.map(async (c) => await c.ended))
  const answers = clients.map((c) => JSON.parse(c.text()))
  t.same(answers.slice(1), answers.slice(0, 1).concat(answers.slice(0, 1)), 'every server gives the one recovered answer')
  const db = new Database(join(dataDir, 'agent-host.db'), { readonly: true })
  t.equal((db.prepare("SELECT count(*) AS n FROM audit_log WHERE action = 'assist.interrupted'").get() as { n: number }).n, 1)
  t.equal((db.prepare("SELECT count(*) AS n FROM journal WHERE run_id = (SELECT run_id FROM runs WHERE request_id = ?) AND frames LIKE '%run_interrupted%'").get(body.request_id) as { n: number }).n, 1)
  db.close()
  for (const s of servers) s.child.kill('SIGTERM')
  await Promise.all(servers.map(async (s) => await once(s.child, 'exit')))
})
