import t from 'tap'
import { build, envelope, FIXTURE_AGENTS_DIR, listen } from '../helper.js'
import { open, until } from '../socket.js'
import { checkErrorBody, parseSse } from '../sse.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'
const slow = [{ op: 'open', name: 's' }, ...Array.from({ length: 100 }, (_, i) => [{ op: 'write', name: 's', chunk: `w${i} ` }, { op: 'sleep', ms: 20 }]).flat()]

// Regression: any key with assist:invoke could cancel another key's run (202, and the owner's stream closed "cancelled").
t.test('only the key that started a run, or an admin, may cancel it; others get 404 as for an unknown run', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, AUTH_MODE: 'apikey' })
  const owner = (await app.keys.create({ name: 'owner', scopes: ['assist:invoke'] })).key
  const other = (await app.keys.create({ name: 'other', scopes: ['assist:invoke'] })).key
  const admin = (await app.keys.create({ name: 'root', scopes: ['admin'] })).key
  const cancel = async (id: string, key: string) => await app.inject({ method: 'POST', url: `/v1/assist/${id}/cancel`, headers: { authorization: `Bearer ${key}` } })

  const body = envelope(SCRIPTED, { script: slow })
  const stream = await open(url, body, 'text/event-stream', { authorization: `Bearer ${owner}` })
  await until('a delta', () => stream.text().includes('"DELTA"'), 10_000)
  const refused = await cancel(body.request_id, other)
  t.equal(refused.statusCode, 404)
  t.equal(checkErrorBody(refused.json()).code, 'AH_ERR_RUN_NOT_FOUND')
  const unknown = await cancel('00000000-0000-4000-8000-000000000000', other)
  t.same([unknown.statusCode, unknown.json().code], [404, 'AH_ERR_RUN_NOT_FOUND'], 'the same answer as for a run that does not exist')
  t.equal((await cancel(body.request_id, owner)).statusCode, 202, 'the owner may')
  await stream.ended
  t.equal(parseSse(stream.text()).packets.at(-1)?.p, 'cancelled')

  const second = envelope(SCRIPTED, { script: slow })
  const s2 = await open(url, second, 'text/event-stream', { authorization: `Bearer ${owner}` })
  await until('a delta', () => s2.text().includes('"DELTA"'), 10_000)
  t.equal((await cancel(second.request_id, admin)).statusCode, 202, 'an admin may')
  await s2.ended
  t.equal(parseSse(s2.text()).packets.at(-1)?.p, 'cancelled')
  t.equal((await cancel(second.request_id, admin)).statusCode, 404, 'an ended run cannot be cancelled')
})

t.test('cancel reaches a run owned by another server on the same DATA_DIR', async (t) => {
  const a = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '600' })
  const b = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, DATA_DIR: a.app.config.DATA_DIR })
  const body = envelope(SCRIPTED, { script: slow })
  const stream = await open(a.url, body)
  await until('a delta', () => stream.text().includes('"DELTA"'), 10_000)
  const res = await b.inject({ method: 'POST', url: `/v1/assist/${body.request_id}/cancel` })
  t.equal(res.statusCode, 202)
  await stream.ended
  t.equal(parseSse(stream.text()).packets.at(-1)?.p, 'cancelled', 'the owning server cancelled it')
})
