import t from 'tap'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { envelope, FIXTURE_AGENTS_DIR, tempDataDir } from '../helper.js'
import { startServer } from '../server-child.js'
import { open, until } from '../socket.js'
import { parseSse } from '../sse.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

// Regression: with an agent that ignores its abort, the run drain and close-with-grace both waited the
// whole CLOSE_GRACE_MS, and the process was killed (exit 1) before its shutdown audit row was written.
t.test('SIGTERM with an agent that ignores its abort: the run ends "shutdown", the shutdown is audited, the process exits 0 within the grace period', async (t) => {
  const dataDir = tempDataDir(t)
  const server = await startServer(t, { DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, CLOSE_GRACE_MS: '3000' })
  const body = envelope(SCRIPTED, { script: [{ op: 'thought', content: 'working' }, { op: 'ignore_abort', ms: 60_000 }] })
  const stream = await open(server.url, body)
  await until('the first packet', () => stream.text().includes('THOUGHT_TRACE'), 20_000)
  const sent = Date.now()
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0, 'clean exit')
  const took = Date.now() - sent
  t.ok(took < 3000 + 2000, `exited ${took} ms after SIGTERM (grace 3000 ms)`)
  await stream.ended
  t.equal(parseSse(stream.text()).packets.at(-1)?.p, 'shutdown')
  const db = new Database(join(dataDir, 'agent-host.db'), { readonly: true })
  t.teardown(() => db.close())
  t.match(db.prepare('SELECT state, end_reason FROM runs WHERE request_id = ?').get(body.request_id), { state: 'ended', end_reason: 'shutdown' })
  t.equal((db.prepare("SELECT count(*) AS n FROM audit_log WHERE action = 'shutdown'").get() as { n: number }).n, 1, 'the shutdown is audited')
})
