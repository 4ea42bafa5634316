import t from 'tap'
import { buildApp } from '../../src/app.js'
import { envelope, FIXTURE_AGENTS_DIR, tempDataDir, testConfig } from '../helper.js'
import { holdDbLock } from '../lock-holder.js'
import { open, until } from '../socket.js'
import { parseSse } from '../sse.js'
import { loadConfig } from '../../src/config.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'
const slow = (n: number) => [{ op: 'open', name: 's' }, ...Array.from({ length: n }, (_, i) => [{ op: 'write', name: 's', chunk: `w${i} ` }, { op: 'sleep', ms: 20 }]).flat()]

// Regression: the SSE branch's disconnect callback read `run` before it was assigned; when starting the
// run threw, the client's disconnect raised a ReferenceError from a socket event and the process exited.
t.test('two servers on one DATA_DIR racing one SSE envelope: both answer the same stream, clients may leave, nobody crashes', async (t) => {
  const dataDir = tempDataDir(t)
  const config = { ...testConfig(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR }), DATA_DIR: dataDir }
  const a = await buildApp(config)
  const b = await buildApp(config)
  t.teardown(async () => { await a.close(); await b.close() })
  await a.listen({ host: '127.0.0.1', port: 0 })
  await b.listen({ host: '127.0.0.1', port: 0 })
  const urlOf = (app: typeof a): string => `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
  for (let i = 0; i < 20; i++) {
    const body = envelope(SCRIPTED, { script: slow(3) })
    const [x, y] = await Promise.all([open(urlOf(a), body), open(urlOf(b), body)])
    t.equal(x.res.statusCode, 200)
    t.equal(y.res.statusCode, 200)
    if (i % 2 === 0) {
      // one client goes away mid-stream; the other reads to the end
      await until('a first packet', () => y.text().includes('stream.packet'), 10_000)
      y.res.destroy()
      await x.ended
      t.equal(parseSse(x.text()).packets.at(-1)?.p, 'done')
    } else {
      await Promise.all([x.ended, y.ended])
      t.same(parseSse(y.text()).packets, parseSse(x.text()).packets, 'one run, the same packets on both servers')
    }
  }
})

t.test('a database locked by another process: SSE requests are refused before the stream starts, and clients leaving do not crash the server', async (t) => {
  const dataDir = tempDataDir(t)
  const config = loadConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', AGENTS_DIR: FIXTURE_AGENTS_DIR, DB_WRITE_BUDGET_MS: '300' })
  const app = await buildApp(config)
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
  const holder = await holdDbLock(t, dataDir)
  const clients = await Promise.all(Array.from({ length: 3 }, async () => await open(url, envelope(SCRIPTED, { script: slow(2) }))))
  for (const c of clients) {
    await c.ended
    t.equal(c.res.statusCode, 503, 'refused with a plain HTTP error, before any SSE header')
    t.equal(JSON.parse(c.text()).code, 'AH_ERR_STORAGE_BUSY')
    c.res.destroy()
  }
  await holder.release()
  const after = await open(url, envelope(SCRIPTED, { script: slow(1) }))
  await after.ended
  t.equal(parseSse(after.text()).packets.at(-1)?.p, 'done', 'the server is alive and writes again once the lock is gone')
})
