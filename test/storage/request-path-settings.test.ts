import t, { type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { buildApp } from '../../src/app.js'
import { AGENTS, envelope, FIXTURE_AGENTS_DIR, SCRIPTED, tempDataDir, testConfig } from '../helper.js'
import { pgDatabase } from '../pg.js'

// Issue 33: two promises a deployment may choose not to pay for, each a setting whose default keeps
// the promise, on both stores:
// - SESSION_SEARCH=values: an interaction stays in the session's history but not in the search
//   index (`recall()` finds stored values only); `all` (the default) searches both;
// - AUDIT_RUNS=failed: a run that succeeded gets no `assist` row in the audit chain; a run that
//   failed still does, and so do denials; `all` (the default) audits every run.

type App = Awaited<ReturnType<typeof buildApp>>

const drivers: Record<string, (t: Test) => Promise<Record<string, string> | undefined>> = {
  sqlite: async () => ({}),
  postgres: async (t) => {
    const url = await pgDatabase(t)
    return url === undefined ? undefined : { DATABASE_URL: url }
  }
}

async function app (t: Test, driver: Record<string, string>, env: Record<string, string>): Promise<App> {
  const built = await buildApp(testConfig(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, ...driver, ...env }))
  t.teardown(() => built.close())
  return built
}

async function assist (server: App, agentId: string, payload: Record<string, unknown>, sessionId?: string): Promise<{ status: number, requestId: string }> {
  const body = envelope(agentId, payload, sessionId === undefined ? {} : { sessionId })
  const res = await server.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
  return { status: res.statusCode, requestId: body.request_id }
}

for (const [name, driver] of Object.entries(drivers)) {
  t.test(`${name}: SESSION_SEARCH`, async (t) => {
    const env = await driver(t)
    if (env === undefined) return
    for (const setting of [undefined, 'all', 'values'] as const) {
      const server = await app(t, env, { ...(setting !== undefined ? { SESSION_SEARCH: setting } : {}), AGENTS_DIR: FIXTURE_AGENTS_DIR })
      const sessionId = randomUUID()
      const ran = await assist(server, SCRIPTED, { script: [{ op: 'markdown', content: 'zebracorn quokka' }] }, sessionId)
      t.equal(ran.status, 200)
      const handle = server.sessions.open(sessionId, { user_id: 'u1', tier: 'free', locale: 'en' })
      await handle.store('note', { text: 'marmoset' })
      const interactionHits = await handle.recall('zebracorn')
      const valueHits = await handle.recall('marmoset')
      const history = await handle.history(10)
      t.equal(history.length, 1, `${setting ?? 'default'}: the interaction is in the history`)
      t.match(valueHits, [{ kind: 'value', ref: 'note' }], `${setting ?? 'default'}: values are searched`)
      if (setting === 'values') t.same(interactionHits, [], 'values: the interaction is not searched')
      else t.match(interactionHits, [{ kind: 'interaction', ref: ran.requestId }], `${setting ?? 'default'}: the interaction is searched`)
    }
  })

  t.test(`${name}: AUDIT_RUNS`, async (t) => {
    const env = await driver(t)
    if (env === undefined) return
    for (const setting of [undefined, 'all', 'failed'] as const) {
      const server = await app(t, env, setting !== undefined ? { AUDIT_RUNS: setting } : {})
      const ok = await assist(server, SCRIPTED, { script: [{ op: 'markdown', content: 'fine' }] })
      const failed = await assist(server, SCRIPTED, { script: [{ op: 'throw', message: 'broken' }] })
      t.equal(ok.status, 200)
      // on PostgreSQL the three apps share one database: this one's runs
      const rows = (await server.audit.list({ action: 'assist', limit: 100 })).filter((r) => r.request_id === ok.requestId || r.request_id === failed.requestId).map((r) => ({ request_id: r.request_id, success: r.success }))
      const expected = setting === 'failed'
        ? [{ request_id: failed.requestId, success: false }]
        : [{ request_id: ok.requestId, success: true }, { request_id: failed.requestId, success: false }]
      t.same(rows, expected, `${setting ?? 'default'}: ${setting === 'failed' ? 'only the failed run' : 'every run'} is audited`)
      t.ok((await server.audit.verify()).ok, 'the chain verifies')
    }
  })

  t.test(`${name}: AUDIT_RUNS=failed still audits a run that stopped to ask a person, and not one that answered`, async (t) => {
    const env = await driver(t)
    if (env === undefined) return
    // the bundled agents: ask stops to ask, echo answers
    const built = await buildApp(testConfig(t, { ...env, AUDIT_RUNS: 'failed' }))
    t.teardown(() => built.close())
    const asked = await assist(built, AGENTS.ask, { question: 'which colour?' })
    const answered = await assist(built, AGENTS.echo, { query: 'hello' })
    t.same([asked.status, answered.status], [200, 200])
    const rows = (await built.audit.list({ action: 'assist', limit: 100 })).filter((r) => r.request_id === asked.requestId || r.request_id === answered.requestId)
    t.match(rows, [{ request_id: asked.requestId, success: false, details: { end: 'input_required' } }], 'only the run that stopped to ask')
    t.equal(rows.length, 1)
  })

  t.test(`${name}: SESSION_SEARCH turned back to all`, async (t) => {
    const env = await driver(t)
    if (env === undefined) return
    // one DATA_DIR (SQLite) or database (PostgreSQL) for both apps
    const shared = { ...env, DATA_DIR: tempDataDir(t) }
    const sessionId = randomUUID()
    const before = await app(t, shared, { SESSION_SEARCH: 'values' })
    const ran = await assist(before, SCRIPTED, { script: [{ op: 'markdown', content: 'okapi narwhal' }] }, sessionId)
    t.equal(ran.status, 200)
    await before.close()
    const after = await app(t, shared, { SESSION_SEARCH: 'all' })
    const hits = await after.sessions.open(sessionId, { user_id: 'u1', tier: 'free', locale: 'en' }).recall('okapi')
    if (name === 'sqlite') t.match(hits, [{ kind: 'interaction', ref: ran.requestId }], 'SQLite indexes the interactions recorded meanwhile')
    else t.same(hits, [], 'PostgreSQL leaves them unsearchable: their search vector was never written')
  })
}
