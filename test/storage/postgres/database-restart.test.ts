import t from 'tap'
import { buildApp } from '../../../src/app.js'
import { AGENTS, envelope, tempDataDir, testConfig } from '../../helper.js'
import { until } from '../../socket.js'
import { ownPgServer } from '../../pg.js'

// a server of its own: this test stops it, which would break every other test on a shared one
t.test('the database restarting: /health says degraded, requests get a clear 503 and never hang, and service comes back', async (t) => {
  const cluster = await ownPgServer(t)
  if (cluster === undefined) return
  const app = await buildApp({ ...testConfig(t), DATA_DIR: tempDataDir(t), DATABASE_URL: cluster.url, TASK_STORE: 'postgres' })
  t.teardown(async () => { await app.close() })
  const ask = async (query: string): Promise<{ statusCode: number, json: () => any }> => await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo, { query }) })
  const health = async (): Promise<string> => (await app.inject({ url: '/health' })).json().status
  const acknowledged: string[] = []
  const before = await ask('before')
  t.equal(before.statusCode, 200)
  acknowledged.push(before.json().request_id)
  t.equal(await health(), 'ok')

  cluster.stop()
  await until('health to say degraded', async () => await health() === 'degraded', 15_000, 50)
  const started = Date.now()
  const during = await ask('during')
  t.equal(during.statusCode, 503, 'refused while the database is down')
  t.equal(during.json().code, 'AH_ERR_STORAGE_UNAVAILABLE')
  t.ok(Date.now() - started < 15_000, 'answered, not hung')
  t.equal((await app.inject({ url: '/v1/agents' })).statusCode, 200, 'what needs no database still answers')

  cluster.start()
  await until('health to say ok again', async () => await health() === 'ok', 30_000, 50)
  await until('requests to succeed again', async () => (await ask('probe')).statusCode === 200, 30_000, 100)
  const after = await ask('after')
  t.equal(after.statusCode, 200)
  acknowledged.push(after.json().request_id)
  for (const id of acknowledged) {
    t.match(await app.audit.list({ action: 'assist', request_id: id }), [{ request_id: id }], `the acknowledged run ${id} is stored`)
  }
  t.match(await app.audit.verify(), { ok: true }, 'the audit chain is intact')
})
