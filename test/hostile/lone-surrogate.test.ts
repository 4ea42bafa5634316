import t from 'tap'
import { AGENTS, build, envelope } from '../helper.js'

// Regression: a string with a lone UTF-16 surrogate (valid JSON: "\ud83d") made the envelope's
// canonical hashing throw, and /v1/assist answered 500 AH_ERR_INTERNAL.
t.test('a lone surrogate in an envelope is a run like any other, and a retry of it joins the same run', async (t) => {
  const app = await build(t)
  const body = JSON.stringify(envelope(AGENTS.echo, { query: 'half an emoji: @@' })).replace('@@', '\\ud83d')
  const first = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: body })
  t.equal(first.statusCode, 200, first.body)
  const again = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: body })
  t.equal(again.statusCode, 200)
  t.same(again.json(), first.json(), 'the retry gets the stored answer')
  t.match(await app.audit.verify(), { ok: true }, 'the chain verifies')
  t.equal((await app.audit.list({ action: 'assist', limit: 10 })).length, 1, 'the run is audited once')
})
