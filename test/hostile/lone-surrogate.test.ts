import t from 'tap'
import { AGENTS, build, envelope } from '../helper.js'
import { main } from '../../src/commands.js'

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

// Issue 27, fault 2: a claimed user holding a lone surrogate (or cut inside a pair at 256
// characters) was hashed as a JavaScript string but stored by SQLite with U+FFFD in its place: the
// row failed verification for ever, and verify, stopping there, hid any real edit after it. A key
// limited to another agent got the same row written with its refusal.
const ADMIN = 'admin-key-'.padEnd(32, 'a')
const OTHER = 'other-key-'.padEnd(32, 'o')
const KEYS = JSON.stringify([{ name: 'admin', key: ADMIN, scopes: ['admin'] }, { name: 'other', key: OTHER, scopes: ['assist:invoke'], agents: ['echo-stream'] }])

t.test('a claimed user with a lone surrogate or a pair cut at 256 characters leaves a log that verifies, on the route, the store and the command line (issue 27, fault 2)', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', API_KEYS: KEYS, WORKERS_PER_TYPE: '0', AUDIT_CHECKPOINT_INTERVAL_MS: '0' })
  const cases: Array<{ user: string, key: string, status: number }> = [
    { user: 'ada\ud800', key: ADMIN, status: 200 },
    { user: `${'a'.repeat(255)}\u{1F600}`, key: ADMIN, status: 200 },
    { user: 'ada\ud800', key: OTHER, status: 403 },
    { user: `${'b'.repeat(255)}\u{1F600}`, key: OTHER, status: 403 },
    { user: '\udc00lone low', key: ADMIN, status: 200 }
  ]
  for (const { user, key, status } of cases) {
    const body = envelope(AGENTS.echo)
    body.context.user = { user_id: user, tier: 'free', locale: 'en-GB' }
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) })
    t.equal(res.statusCode, status, res.body)
  }
  const verified = await app.inject({ url: '/v1/audit/verify', headers: { authorization: `Bearer ${ADMIN}` } })
  t.match(verified.json(), { ok: true }, verified.body)
  t.match(await app.audit.verify(), { ok: true })
  const claimed = (await app.audit.list({ limit: 100 })).map((r) => r.claimed_user).filter((u) => u !== null)
  t.same(claimed, ['ada\ufffd', 'a'.repeat(255), 'ada\ufffd', 'b'.repeat(255), '\ufffdlone low'], 'a lone surrogate is U+FFFD, a pair is never cut in half')
  const dir = app.config.DATA_DIR
  await app.close()
  const lines: string[] = []
  t.equal(await main(['audit', 'verify', '--data-dir', dir], {}, { out: (l) => lines.push(l), err: () => {} }), 0, lines.join('\n'))
  t.match(JSON.parse(lines[0] ?? '{}'), { ok: true })
})
