import t from 'tap'
import { connect, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { envelope, FIXTURE_AGENTS_DIR, listen } from '../helper.js'
import { parseSse } from '../sse.js'
import { open, until } from '../socket.js'

const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

interface Raw { socket: Socket, text: () => string, closedAt: Promise<number> }

/** A raw TCP connection that records what the server sends and when it hangs up. */
async function raw (port: number): Promise<Raw> {
  const socket = connect(port, '127.0.0.1')
  await new Promise<void>((resolve, reject) => { socket.once('connect', resolve).once('error', reject) })
  socket.on('error', () => {})
  let text = ''
  socket.on('data', (c: Buffer) => { text += c.toString('latin1') })
  const closedAt = new Promise<number>((resolve) => { socket.once('close', () => { resolve(Date.now()) }) })
  return { socket, text: () => text, closedAt }
}

/** Write `chunks` one at a time, `every` ms apart, while the socket is open. */
async function trickle (socket: Socket, chunks: string[], every: number): Promise<void> {
  for (const chunk of chunks) {
    if (socket.destroyed || socket.writableEnded) return
    socket.write(chunk)
    await sleep(every)
  }
}

t.test('slowloris: clients that dribble their headers are cut off after HEADERS_TIMEOUT_MS, and others are served meanwhile', async (t) => {
  const { url, port } = await listen(t, { HEADERS_TIMEOUT_MS: '500', REQUEST_TIMEOUT_MS: '1000' })
  const started = Date.now()
  const clients = await Promise.all(Array.from({ length: 50 }, async () => await raw(port)))
  const dribbles = clients.map(async (c) => {
    c.socket.write('GET /v1/agents HTTP/1.1\r\nHost: localhost\r\n')
    await trickle(c.socket, Array.from({ length: 100 }, (_, i) => `X-Slow-${i}: y\r\n`), 100)
  })
  const healthy = await fetch(`${url}/health`)
  t.equal(healthy.status, 200, 'a normal client is served while 50 slow ones hold connections')
  const closed = await Promise.all(clients.map(async (c) => await c.closedAt))
  const slowest = Math.max(...closed) - started
  t.ok(slowest < 5000, `every slow client was cut off (the last after ${slowest} ms), long before its 10 s of headers`)
  t.ok(clients.every((c) => c.text().startsWith('HTTP/1.1 408')), 'each got 408 Request Timeout')
  await Promise.all(dribbles)
})

t.test('a body dribbled slower than REQUEST_TIMEOUT_MS gets 408 and starts no run', async (t) => {
  const { app, port } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, HEADERS_TIMEOUT_MS: '300', REQUEST_TIMEOUT_MS: '800' })
  const body = JSON.stringify(envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'never' }] }))
  const c = await raw(port)
  const started = Date.now()
  c.socket.write(`POST /v1/assist HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`)
  const dribble = trickle(c.socket, body.match(/.{1,8}/gs) ?? [], 100)
  const closedAt = await c.closedAt
  t.ok(closedAt - started < 3000, `cut off after ${closedAt - started} ms`)
  t.match(c.text(), /^HTTP\/1\.1 408/)
  await dribble
  t.equal(await app.ledger.get(JSON.parse(body).request_id as string), undefined, 'no run was started')
})

t.test('REQUEST_TIMEOUT_MS bounds the request, not the response: a long SSE stream runs to its end', async (t) => {
  const { port, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, HEADERS_TIMEOUT_MS: '200', REQUEST_TIMEOUT_MS: '400', SSE_HEARTBEAT_MS: '100' })
  const s = await open(url, envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'a' }, { op: 'sleep', ms: 1500 }, { op: 'write', name: 's', chunk: 'b' }, { op: 'close', name: 's' }] }))
  await s.ended
  const packets = parseSse(s.text()).packets
  t.same(packets.filter((p) => p.op === 'DELTA').map((p) => (p.p as { text?: string }).text ?? p.p), ['a', 'b'], 'both deltas, 1.5 s apart')
  t.ok(packets.some((p) => p.op === 'CLOSE' && p.p === 'done'), 'the stream closed normally')

  const idle = await raw(port)
  idle.socket.write('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n')
  await until('the answer', () => idle.text().includes('\r\n\r\n{'))
  t.match(idle.text(), /^HTTP\/1\.1 200/)
})

t.test('an idle keep-alive connection is closed after KEEP_ALIVE_TIMEOUT_MS', async (t) => {
  const { port } = await listen(t, { KEEP_ALIVE_TIMEOUT_MS: '300' })
  const c = await raw(port)
  c.socket.write('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n')
  const answered = Date.now()
  const closedAt = await c.closedAt
  t.match(c.text(), /keep-alive/i)
  t.ok(closedAt - answered >= 250 && closedAt - answered < 3000, `closed ${closedAt - answered} ms after the answer`)
})

t.test('many streams that are never read: capped per caller, each cut off after SSE_STALL_TIMEOUT_MS, and their runs finish into the journal', async (t) => {
  // the flood fixture writes 25 MB without yielding once its readers are gone: no load shedding here
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, MAX_STREAMS_PER_CALLER: '2', SSE_MAX_BUFFER_BYTES: '65536', SSE_STALL_TIMEOUT_MS: '500', WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  // 12.8 MB each: more than loopback's socket buffers hold, so the server sees the backlog
  const count = 200
  const bodies = Array.from({ length: 3 }, () => envelope(SCRIPTED, { script: [{ op: 'open', name: 's' }, { op: 'sleep', ms: 600 }, { op: 'flood', name: 's', count, size: 64 * 1024 }, { op: 'close', name: 's' }] }))
  const streams = []
  for (const body of bodies) {
    const s = await open(url, body)
    s.res.pause() // never read
    streams.push(s)
  }
  t.same(streams.map((s) => s.res.statusCode), [200, 200, 429], 'the third stream of one caller is refused')
  // a client that does not read does not see the hang-up either: watch the server's side
  await until('the server to hang up on every reader that did not read', () => app.limits.streams.open === 0, 10000, 20)
  for (const s of streams) s.res.destroy()
  await until('the runs to finish', async () => (await Promise.all(bodies.slice(0, 2).map(async (b) => await app.ledger.get(b.request_id)))).every((r) => r?.state === 'ended'), 15000, 20)
  t.match((await app.inject({ url: '/metrics' })).body, /agent_host_sse_disconnects_total\{why="slow_consumer"\} 2\n/)
  // the client comes back to a server on the same data with a stall timeout that a loaded test
  // machine reading 12.8 MB cannot trip: the replay proves the journal, not the reader's speed
  await app.close()
  const again = await listen(t, { DATA_DIR: app.config.DATA_DIR, AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0' })
  const replay = await open(again.url, bodies[0])
  await replay.ended
  const packets = parseSse(replay.text()).packets
  t.equal(packets.filter((p) => p.op === 'DELTA').length, count, 'a client that comes back and reads gets every delta from the journal')
  t.ok(packets.some((p) => p.op === 'CLOSE' && p.p === 'done'), 'to the end of the run')
  const [interaction] = await again.app.sessions.history(bodies[0]?.context.session_id as string)
  t.match((interaction?.output as { errors: unknown[] }).errors, [{ code: 'slow_consumer', severity: 'TRANSIENT' }], 'the history records that the first reader was too slow')
})
