import { request } from 'node:http'
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { envelope, FIXTURE_AGENTS_DIR, listen } from '../helper.js'
import { checkErrorBody, parseSse } from '../sse.js'
import { open, until } from '../socket.js'
import { observed } from '../fixtures/agents/scripted/index.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

const abortOf = (sessionId: string) => observed.aborts.find((a) => a.sessionId === sessionId)

t.test('a heartbeat comment is sent on an idle stream, after the retry line', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, SSE_HEARTBEAT_MS: '40', SSE_RETRY_MS: '1500' })
  // the agent stays idle until three pings came (a loaded machine's timers run late, not never)
  const gate = `idle-${Date.now()}`
  const s = await open(url, envelope(SCRIPTED, { script: [{ op: 'wait', name: gate }, { op: 'markdown', content: 'after the pause' }] }))
  await until('three pings', () => (s.text().match(/^: ping$/gm) ?? []).length >= 3, 10_000, 5)
  observed.released.add(gate)
  await s.ended
  t.ok(s.text().startsWith('retry: 1500\n\n'), 'retry is advertised once, first')
  const parsed = parseSse(s.text())
  t.equal(parsed.retry, 1500)
  t.ok(parsed.comments.length >= 3, `pings while idle (${parsed.comments.length})`)
  t.ok(parsed.comments.every((c) => c === 'ping'))
  t.same(parsed.packets.map((p) => p.op), ['EVENT', 'CLOSE'])
})

t.test('no heartbeat while packets keep flowing', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, SSE_HEARTBEAT_MS: '600', SSE_RETRY_MS: '0' })
  const script = Array.from({ length: 8 }, () => [{ op: 'sleep', ms: 20 }, { op: 'thought', content: 'busy' }]).flat()
  const s = await open(url, envelope(SCRIPTED, { script }))
  await s.ended
  const parsed = parseSse(s.text())
  t.equal(parsed.comments.length, 0)
  t.equal(parsed.retry, undefined, 'SSE_RETRY_MS=0 sends no retry line')
})

const CANCEL = { agentRequest: { metadata: { on_disconnect: 'cancel' } } }

t.test('with on_disconnect "cancel", a client disconnect aborts the agent within 100 ms (SSE)', async (t) => {
  const { url, app } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'x' }, { op: 'wait_abort' }, { op: 'write', name: 's', chunk: 'never sent' }] }, CANCEL)
  const s = await open(url, body)
  await until('the first packets', () => s.text().includes('"DELTA"'))
  const cut = Date.now()
  s.res.destroy()
  await until('the abort', () => abortOf(body.context.session_id) !== undefined, 2000)
  const abort = abortOf(body.context.session_id)
  t.ok((abort?.at ?? Infinity) - cut < 100, `aborted after ${(abort?.at ?? 0) - cut} ms`)
  t.match(abort?.reason, { name: 'AbortError', kind: 'client_disconnected' })
  await until('the run to settle', () => app.runs.size === 0)
  const history = await app.sessions.open(body.context.session_id, { user_id: 'u', tier: 't', locale: 'l' }).history()
  t.match(history[0]?.output, { text: 'x', streams: [{ text: 'x' }] }, 'the run\'s output is still recorded')
})

t.test('with DISCONNECT_POLICY=cancel, a client disconnect aborts the agent in JSON mode too', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, DISCONNECT_POLICY: 'cancel' })
  const body = envelope(SCRIPTED, { script: [{ op: 'thought', content: 'x' }, { op: 'wait_abort' }] })
  const payload = JSON.stringify(body)
  const req = request(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json' } })
  req.on('error', () => {})
  req.end(payload)
  await until('the run to start', () => observed.started.includes(body.context.session_id))
  const cut = Date.now()
  req.destroy()
  await until('the abort', () => abortOf(body.context.session_id) !== undefined, 2000)
  t.ok((abortOf(body.context.session_id)?.at ?? Infinity) - cut < 100)
  t.match(abortOf(body.context.session_id)?.reason, { kind: 'client_disconnected' })
})

t.test('by default a run goes on after its client leaves, and its output is kept', async (t) => {
  const { url, app } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'before ' }, { op: 'sleep', ms: 150 }, { op: 'write', name: 's', chunk: 'after' }] })
  const s = await open(url, body)
  await until('the first delta', () => s.text().includes('"DELTA"'))
  s.res.destroy()
  await until('the run to finish', async () => (await app.ledger.get(body.request_id))?.state === 'ended')
  t.equal(abortOf(body.context.session_id), undefined, 'the agent was not aborted')
  const [interaction] = await app.sessions.history(body.context.session_id)
  t.equal(interaction?.status, 'done')
  t.match(interaction?.output, { text: 'before after' })
})

t.test('a slow reader: the server stops writing until the socket drains', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_MAX_OUTPUT_BYTES: String(64 * 1024 * 1024) })
  const count = 400
  const size = 64 * 1024
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'flood', name: 's', count, size }] })
  const s = await open(url, body)
  s.res.pause()
  const key = body.context.session_id
  await until('some progress', () => (observed.progress.get(key) ?? 0) > 0)
  // wait until the socket buffers are full and the agent is held
  let stalled = -1
  await until('the agent to stall', () => {
    const now = observed.progress.get(key) ?? 0
    const same = now === stalled
    stalled = now
    return same
  }, 10000, 200)
  await sleep(300)
  t.equal(observed.progress.get(key), stalled, `the agent is held at chunk ${stalled} while the client does not read`)
  t.ok(stalled < count / 2, 'well before the end')
  s.res.resume()
  await s.ended
  t.equal(observed.progress.get(key), count, 'it finishes once the client reads')
  const { packets } = parseSse(s.text())
  t.equal(packets.filter((p) => p.op === 'DELTA').length, count)
})

t.test('a client that never reads cannot grow the server\'s buffer past SSE_MAX_BUFFER_BYTES', async (t) => {
  const { url, app } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, SSE_MAX_BUFFER_BYTES: '1048576', DISCONNECT_POLICY: 'cancel' })
  // the flood starts once the client follows the live run (how soon a fresh run's first client
  // attaches is not this test's question), and the client stops reading before it starts
  const gate = `flood-${Date.now()}`
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'wait', name: gate }, { op: 'flood', name: 's', count: 200, size: 64 * 1024, await: false }] })
  const s = await open(url, body)
  await until('the stream to open', () => s.text().includes('STREAM_START'))
  s.res.pause()
  observed.released.add(gate)
  await until('the slow-consumer abort', () => abortOf(body.context.session_id) !== undefined)
  t.match(abortOf(body.context.session_id)?.reason, { kind: 'slow_consumer' })
  await s.ended
  await until('the run to settle', () => app.runs.size === 0)
  const history = await app.sessions.open(body.context.session_id, { user_id: 'u', tier: 't', locale: 'l' }).history()
  t.match((history[0]?.output as { errors: unknown[] }).errors, [{ code: 'slow_consumer', severity: 'TRANSIENT' }])
})

t.test('cancel ends every open stream with CLOSE "cancelled" and fires the signal', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'wait_abort' }] })
  const s = await open(url, body)
  await until('the stream to open', () => s.text().includes('STREAM_START'))
  const res = await fetch(`${url}/v1/assist/${body.request_id}/cancel`, { method: 'POST' })
  t.equal(res.status, 202)
  t.same(await res.json(), { request_id: body.request_id, cancelled: true })
  await s.ended
  const { packets } = parseSse(s.text())
  t.same(packets.filter((p) => p.op === 'CLOSE').map((p) => p.p), ['cancelled', 'cancelled'])
  t.match(abortOf(body.context.session_id)?.reason, { kind: 'cancelled' })
  const again = await fetch(`${url}/v1/assist/${body.request_id}/cancel`, { method: 'POST' })
  t.equal(again.status, 404)
  t.equal(checkErrorBody(await again.json()).code, 'AH_ERR_RUN_NOT_FOUND')
})

t.test('shutdown: open streams get ERROR shutting_down + CLOSE "shutdown", new requests 503', async (t) => {
  const { url, app } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, CLOSE_GRACE_MS: '3000' })
  const body = envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'x' }, { op: 'wait_abort' }, { op: 'ignore_abort', ms: 300 }] })
  const s = await open(url, body)
  await until('the stream to open', () => s.text().includes('DELTA'))
  const closing = app.close()
  await s.ended
  const { packets } = parseSse(s.text())
  const main = packets.at(-1)?.stream_id
  t.same(packets.slice(-3).map((p) => [p.stream_id === main ? 'main' : 'sub', p.op, p.p]), [
    ['main', 'ERROR', { code: 'shutting_down', message: 'The server is shutting down; retry the request', severity: 'TRANSIENT' }],
    ['sub', 'CLOSE', 'shutdown'],
    ['main', 'CLOSE', 'shutdown']
  ])
  t.match(abortOf(body.context.session_id)?.reason, { kind: 'shutdown' })
  // the agent ignores its signal for a while, so the server is still draining: new work is refused
  const refused = await fetch(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(envelope(SCRIPTED, { script: [] })) })
  t.equal(refused.status, 503)
  t.equal(refused.headers.get('retry-after'), '5')
  t.equal(checkErrorBody(await refused.json()).code, 'AH_ERR_SHUTTING_DOWN')
  const health = await fetch(`${url}/health`)
  t.equal(health.status, 503)
  t.match(await health.json(), { status: 'maintenance' })
  await closing
})
