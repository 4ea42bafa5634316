import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../../src/app.js'
import { AGENTS, FIXTURE_AGENTS_DIR, SCRIPTED, envelope, streamingScript, tempDataDir, testConfig } from '../../helper.js'
import { open, until } from '../../socket.js'
import { pgDatabase } from '../../pg.js'

interface Node { app: FastifyInstance, url: string }

/** Two instances of the server on one PostgreSQL database, each with its own DATA_DIR, listening. */
async function cluster (t: Test, env: Record<string, string> = {}): Promise<[Node, Node] | undefined> {
  const database = await pgDatabase(t)
  if (database === undefined) return undefined
  const instances: Node[] = []
  for (let i = 0; i < 2; i++) {
    const app = await buildApp({ ...testConfig(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '1500', ...env }), DATA_DIR: tempDataDir(t), DATABASE_URL: database, TASK_STORE: 'postgres' })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = app.server.address() as { port: number }
    instances.push({ app, url: `http://127.0.0.1:${port}` })
  }
  t.teardown(async () => { for (const { app } of instances) await app.close() })
  return [instances[0] as Node, instances[1] as Node]
}

t.test('a JSON request answered by one instance is the same answer on the other, and runs once', async (t) => {
  const nodes = await cluster(t, { AGENTS_DIR: '' })
  if (nodes === undefined) return
  const [a, b] = nodes
  const body = envelope(AGENTS.echo, { query: 'hello cluster' })
  const first = await a.app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  t.equal(first.statusCode, 200)
  const again = await b.app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  t.equal(again.statusCode, 200)
  t.same(again.json().output, first.json().output, 'the stored answer')
  t.equal((await b.app.sessions.history(body.context.session_id)).length, 1, 'the agent ran once')
  t.match(await b.app.audit.list({ action: 'assist' }), [{ request_id: body.request_id }], 'one audit chain across the instances')
  t.match(await a.app.audit.verify(), { ok: true })
})

t.test('the same request id sent to two instances at once runs once, and both callers get the same answer', async (t) => {
  const nodes = await cluster(t, { AGENTS_DIR: '' })
  if (nodes === undefined) return
  const [a, b] = nodes
  for (let round = 0; round < 5; round++) {
    const body = envelope(AGENTS.echo, { query: `race ${round}` })
    const [x, y] = await Promise.all([a.app.inject({ method: 'POST', url: '/v1/assist', payload: body }), b.app.inject({ method: 'POST', url: '/v1/assist', payload: body })])
    t.equal(x.statusCode, 200)
    t.equal(y.statusCode, 200)
    t.same(x.json().output, y.json().output, `round ${round}: the same answer`)
    t.equal((await a.app.sessions.history(body.context.session_id)).length, 1, `round ${round}: one run`)
  }
})

t.test('a stream started on one instance is followed from the other: the same packets, woken by notifications', async (t) => {
  const nodes = await cluster(t)
  if (nodes === undefined) return
  const [a, b] = nodes
  const body = envelope(SCRIPTED, { script: streamingScript(30, 20) })
  const first = await open(a.url, body)
  await until('the first packets on A', () => first.text().includes('"DELTA"'), 20_000)
  const second = await open(b.url, body)
  await first.ended
  await second.ended
  const packets = (text: string): string[] => text.split('\n').filter((line) => line.startsWith('data: ')).map((line) => line.slice(6))
  t.ok(packets(first.text()).length > 30)
  t.same(packets(second.text()), packets(first.text()), 'B replayed the journal, then followed A\'s run to its end')
})

t.test('cancel on one instance stops the run on the other within a second', async (t) => {
  const nodes = await cluster(t)
  if (nodes === undefined) return
  const [a, b] = nodes
  const body = envelope(SCRIPTED, { script: streamingScript(400, 50) })
  const stream = await open(a.url, body)
  await until('the run to start on A', () => stream.text().includes('"DELTA"'), 20_000)
  const asked = Date.now()
  const cancel = await b.app.inject({ method: 'POST', url: `/v1/assist/${body.request_id}/cancel` })
  t.equal(cancel.statusCode, 202)
  await stream.ended
  const took = Date.now() - asked
  t.match(stream.text(), /"op":"CLOSE"[^\n]*"cancelled"/, 'the stream ended with CLOSE "cancelled"')
  t.ok(took < 1000, `the stream ended ${took} ms after the cancel on B`)
  await until('the run recorded as ended', async () => (await b.app.ledger.runningByRequestId(body.request_id)).length === 0, 5000)
})
