import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { request, type IncomingMessage } from 'node:http'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildApp } from '../../src/app.js'
import type { StreamPacket } from '../../src/protocol/packets.js'
import { AGENTS, build, envelope, FIXTURE_AGENTS_DIR, listen, sqliteAudit, sqliteRuns, sqliteSessions, tempDataDir, testConfig, TEST_ENV } from '../helper.js'
import { assertStreamRules, checkErrorBody, parseSse } from '../sse.js'
import { observed } from '../fixtures/agents/scripted/index.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'
const ROOT = fileURLToPath(new URL('../..', import.meta.url))

interface Live { res: IncomingMessage, text: () => string, ended: Promise<unknown> }

async function post (url: string, body: unknown, headers: Record<string, string> = {}): Promise<Live> {
  return await new Promise((resolve, reject) => {
    const req = request(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...headers } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString() })
      resolve({ res, text: () => text, ended: new Promise((resolve) => { res.on('close', resolve) }) })
    })
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
}

async function until (check: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out')
    await sleep(5)
  }
}

const slowScript = (n: number, ms: number) => [{ op: 'thought', content: 'go' }, { op: 'open', name: 's' },
  ...Array.from({ length: n }, (_, i) => [{ op: 'write', name: 's', chunk: `w${i} ` }, { op: 'sleep', ms }]).flat()]
const key = (p: StreamPacket) => `${p.stream_id}:${p.seq}`

t.test('drop the socket mid-stream, re-POST with Last-Event-ID: no gap, no duplicate, the agent ran once', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: slowScript(10, 30) })
  const first = await post(url, body)
  await until(() => (first.text().match(/"DELTA"/g) ?? []).length >= 3)
  first.res.destroy()
  const got = parseSse(first.text().slice(0, first.text().lastIndexOf('\n\n') + 2), false).packets
  const last = got.at(-1) as StreamPacket
  const second = await post(url, body, { 'last-event-id': `${last.stream_id}:${last.seq}` })
  await second.ended
  const rest = parseSse(second.text(), false).packets
  const firstNew = rest[0] as StreamPacket
  t.notOk(got.some((p) => key(p) === key(firstNew)), 'the replay starts after the cursor')
  const union = [...got, ...rest]
  t.equal(new Set(union.map(key)).size, union.length, 'no duplicates')
  assertStreamRules(union)
  const journal = sqliteRuns(app).rows(body.request_id).map((r) => r.frame)
  t.same(union.map((p) => JSON.stringify(p)), journal, 'exactly the journaled packets, byte for byte')
  t.equal(observed.started.filter((s) => s === body.context.session_id).length, 1, 'the agent ran once')
})

t.test('a bare stream id as Last-Event-ID replays everything; a finished run replays identically', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: slowScript(3, 0) })
  const first = await post(url, body)
  await first.ended
  const original = parseSse(first.text()).packets
  const again = await post(url, body)
  await again.ended
  t.same(parseSse(again.text()).packets, original)
  const bare = await post(url, body, { 'last-event-id': original[0]?.stream_id ?? '' })
  await bare.ended
  t.same(parseSse(bare.text()).packets, original)
  t.equal(observed.started.filter((s) => s === body.context.session_id).length, 1)
  t.equal(sqliteSessions(app).history(body.context.session_id).length, 1, 'one interaction')
})

t.test('several clients can follow one live run', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: slowScript(6, 25) })
  const a = await post(url, body)
  await until(() => a.text().includes('"DELTA"'))
  const b = await post(url, body)
  const c = await post(url, body, { accept: 'application/json' })
  await Promise.all([a.ended, b.ended, c.ended])
  const pa = parseSse(a.text()).packets
  t.same(parseSse(b.text()).packets, pa, 'the follower got the same packets')
  t.match(JSON.parse(c.text()), { output: { text: 'w0 w1 w2 w3 w4 w5 ' } }, 'a JSON retry waits for the answer')
  t.equal(observed.started.filter((s) => s === body.context.session_id).length, 1)
})

t.test('the same request id with a different envelope is a 409', async (t) => {
  const app = await build(t)
  const body = envelope(AGENTS.echo, { query: 'one' })
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', payload: body })).statusCode, 200)
  const changed = { ...body, payload: { ...body.payload, payload: { query: 'two' } } }
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: changed })
  t.equal(res.statusCode, 409)
  t.equal(checkErrorBody(res.json()).code, 'AH_ERR_REQUEST_CONFLICT')
  const withUnknownKey = { ...body, ignored: true }
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', payload: withUnknownKey })).statusCode, 200, 'unknown keys do not change the envelope')
})

t.test('JSON retries are idempotent: the stored answer, the agent ran once', async (t) => {
  const app = await build(t)
  const body = envelope(AGENTS.echo, { query: 'once' })
  const first = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  const second = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  t.equal(second.statusCode, 200)
  t.same(second.json(), first.json(), 'identical, created_at included')
  t.equal(first.json().output.calls, 1)
  const asSse = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: body })
  t.same(parseSse(asSse.body).packets.map((p) => p.op), ['EVENT', 'CLOSE'], 'the run\'s journal replays as SSE too')
  t.equal(sqliteSessions(app).history(body.context.session_id).length, 1)
})

t.test('failed JSON runs replay their error answer', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: [{ op: 'throw', message: 'x' }] })
  const first = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  const second = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  t.equal(first.statusCode, 502)
  t.equal(second.statusCode, 502)
  t.same(second.json(), first.json())
})

t.test('a cursor for a request the journal no longer holds gets resume_gap', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, JOURNAL_RETENTION_MS: '1000' })
  const body = envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'm' }] })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: body })
  const packets = parseSse(res.body).packets
  t.equal(sqliteRuns(app).prune(Date.now() + 1), 1, 'the finished run is pruned once it is older than the retention')
  const cursor = `${packets[0]?.stream_id ?? ''}:1`
  const gap = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream', 'last-event-id': cursor }, payload: body })
  const { packets: gapPackets } = parseSse(gap.body, false)
  t.same(gapPackets.map((p) => [p.stream_id, p.seq, p.op, p.op === 'ERROR' ? (p.p as { code: string, severity: string }).code : p.p]), [
    [packets[0]?.stream_id, 2, 'ERROR', 'resume_gap'], [packets[0]?.stream_id, 3, 'CLOSE', 'aborted']
  ])
  t.equal(observed.started.filter((s) => s === body.context.session_id).length, 1, 'a resume never reruns the agent')
  const bad = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream', 'last-event-id': 'garbage' }, payload: body })
  t.equal(checkErrorBody(bad.json()).code, 'AH_ERR_VALIDATION')
})

t.test('the prune timer removes expired journals', async (t) => {
  const app = await build(t, { JOURNAL_RETENTION_MS: '1000' })
  const body = envelope(AGENTS.echo, { query: 'x' })
  await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  await until(() => sqliteRuns(app).get(body.request_id) === undefined, 4000)
  t.pass('pruned within a few seconds')
})

t.test('on_disconnect must be "continue" or "cancel"', async (t) => {
  const app = await build(t)
  const body = envelope(AGENTS.echo, { query: 'x' }, { agentRequest: { metadata: { on_disconnect: 'explode' } } })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  t.equal(res.statusCode, 400)
  t.match(checkErrorBody(res.json()).details, { errors: [{ path: '/payload/metadata/on_disconnect' }] })
})

t.test('a run whose process was killed is finished as run_interrupted, and a re-POST gets its journal', async (t) => {
  const dataDir = tempDataDir(t)
  const child = spawn(process.execPath, [...process.execArgv, 'src/server.ts'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...TEST_ENV, DATA_DIR: dataDir, RUN_LEASE_MS: '300' },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(() => { child.kill('SIGKILL') })
  let stdout = ''
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
  await until(() => /listening at http:\/\/127\.0\.0\.1:\d+/.test(stdout), 60_000)
  const port = /listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(stdout)?.[1] ?? ''
  const body = envelope(AGENTS.echoStream, { query: 'one two three four five six seven eight', delay_ms: 200 })
  const live = await post(`http://127.0.0.1:${port}`, body)
  await until(() => (live.text().match(/"DELTA"/g) ?? []).length >= 2)
  child.kill('SIGKILL')
  await once(child, 'exit')
  await live.ended
  const before = parseSse(live.text().slice(0, live.text().lastIndexOf('\n\n') + 2), false).packets

  const app = await buildApp(testConfig(t, { DATA_DIR: dataDir, RUN_LEASE_MS: '300' }))
  t.teardown(() => app.close())
  await until(() => sqliteRuns(app).get(body.request_id)?.state === 'ended', 10_000)
  t.equal(sqliteRuns(app).get(body.request_id)?.end_reason, 'interrupted', 'recovered once its owner\'s lease lapsed')
  const replay = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  const packets = parseSse(replay.body).packets
  t.same(packets.slice(0, before.length), before, 'what the client had is replayed first')
  t.same(packets.slice(-3).map((p) => [p.op, p.op === 'ERROR' ? (p.p as { code: string }).code : p.p]), [['ERROR', 'run_interrupted'], ['CLOSE', 'aborted'], ['CLOSE', 'aborted']])
  const json = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
  t.equal(json.statusCode, 200)
  t.match(json.json().output.errors, [{ code: 'run_interrupted', severity: 'FATAL' }])
  t.match(sqliteAudit(app).list({ action: 'assist.interrupted' }), [{ request_id: body.request_id, success: false }])
  t.match(sqliteSessions(app).history(body.context.session_id), [{ request_id: body.request_id, status: 'interrupted', input: { query: 'one two three four five six seven eight' } }])
})

t.test('a run live in another process on the same DATA_DIR is replayed and followed through its journal', async (t) => {
  const dataDir = tempDataDir(t)
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, DATA_DIR: dataDir })
  const other = await buildApp(testConfig(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, DATA_DIR: dataDir }))
  t.teardown(() => other.close())
  const body = envelope(SCRIPTED, { script: slowScript(6, 40) })
  const owner = await post(url, body)
  await until(() => owner.text().includes('"DELTA"'))
  const [sse, json] = await Promise.all([
    other.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: body }),
    other.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
  ])
  await owner.ended
  t.same(parseSse(sse.body).packets, parseSse(owner.text()).packets, 'the follower saw the whole run')
  t.match(json.json(), { output: { text: 'w0 w1 w2 w3 w4 w5 ' } })
  t.equal(observed.started.filter((s) => s === body.context.session_id).length, 1)
})
