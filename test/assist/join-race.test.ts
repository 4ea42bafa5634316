import t from 'tap'
import { buildApp } from '../../src/app.js'
import { AGENTS, envelope, tempDataDir, testConfig } from '../helper.js'

// Regression: two servers on one DATA_DIR racing the same JSON envelope: 1 in 200 got a 500 instead of joining.
t.test('two servers on one DATA_DIR racing one JSON envelope: both join the one run and give the same answer', async (t) => {
  const config = { ...testConfig(t), DATA_DIR: tempDataDir(t) }
  const a = await buildApp(config)
  const b = await buildApp(config)
  t.teardown(async () => { await a.close(); await b.close() })
  const statuses = new Map<number, number>()
  let same = 0
  const ROUNDS = 200
  for (let i = 0; i < ROUNDS; i++) {
    const body = envelope(AGENTS.echo, { query: `q${i}` })
    const [x, y] = await Promise.all([a.inject({ method: 'POST', url: '/v1/assist', payload: body }), b.inject({ method: 'POST', url: '/v1/assist', payload: body })])
    for (const r of [x, y]) statuses.set(r.statusCode, (statuses.get(r.statusCode) ?? 0) + 1)
    if (x.body === y.body) same++
  }
  t.same([...statuses], [[200, 2 * ROUNDS]], 'every answer is a 200')
  t.equal(same, ROUNDS, 'each pair got one answer, byte for byte')
})

t.test('a start that loses the insert to another server joins the winner\'s run', async (t) => {
  const config = { ...testConfig(t), DATA_DIR: tempDataDir(t) }
  const a = await buildApp(config)
  const b = await buildApp(config)
  t.teardown(async () => { await a.close(); await b.close() })
  const body = envelope(AGENTS.echo, { query: 'race' })
  // b looks first and sees nothing; a starts the run before b inserts (the race, made certain)
  const look = b.ledger.get.bind(b.ledger)
  let first = true
  b.ledger.get = (id: string) => {
    if (!first) return look(id)
    first = false
    return undefined
  }
  const won = await a.inject({ method: 'POST', url: '/v1/assist', payload: body })
  const joined = await b.inject({ method: 'POST', url: '/v1/assist', payload: body })
  t.equal(joined.statusCode, 200)
  t.equal(joined.body, won.body, 'the same answer')
  t.equal((await a.sessions.history(body.context.session_id)).length, 1, 'the agent ran once')
  const conflict = await b.inject({ method: 'POST', url: '/v1/assist', payload: { ...body, payload: { ...body.payload, payload: { query: 'other' } } } })
  t.equal(conflict.statusCode, 409, 'a different envelope under the same id is still a conflict')
})
