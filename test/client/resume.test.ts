import t from 'tap'
import { AgentHostClient, type AssistStream, type StreamPacket } from '../../client/src/index.js'
import { FIXTURE_AGENTS_DIR, listen, SCRIPTED, streamingScript } from '../helper.js'
import { assertStreamRules } from '../sse.js'
import { observed } from '../fixtures/agents/scripted/index.js'
import { errorAnswer, eventStream, MAIN, RUN, scripted, sse, SUB } from './fixtures/stream-fakes.js'
import { tcpProxy } from './fixtures/tcp-proxy.js'
import { rejection } from './fixtures/rejection.js'

const FAST = { baseDelayMs: 5, maxDelayMs: 20 }
const script = (words: number, ms: number) => [{ op: 'thought', content: 'go' }, ...streamingScript(words, ms), { op: 'markdown', content: 'end' }]
const key = (p: StreamPacket) => `${p.stream_id}:${p.seq}`

async function drain (stream: AssistStream): Promise<StreamPacket[]> {
  const packets: StreamPacket[] = []
  for await (const packet of stream) packets.push(packet)
  return packets
}

/** Each stream's seqs are exactly 1..n: no gap, no duplicate. */
function gapless (packets: StreamPacket[]): boolean {
  const seqs = new Map<string, number[]>()
  for (const p of packets) seqs.set(p.stream_id, [...(seqs.get(p.stream_id) ?? []), p.seq])
  return [...seqs.values()].every((list) => list.every((seq, i) => seq === i + 1))
}

t.test('a stream whose connection drops mid-stream is resumed without a gap or a duplicate; the agent ran once', async (t) => {
  const { app, port } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const proxy = await tcpProxy(t, port)
  const resumes: Array<{ cursor: string, attempt: number, had: number }> = []
  const packets: StreamPacket[] = []
  const cut = proxy.cutAfter(5)
  const stream = new AgentHostClient({ baseUrl: proxy.url, resume: FAST }).stream({ agentId: SCRIPTED, input: { script: script(12, 10) } }, {
    onResume: (cursor, attempt) => { resumes.push({ cursor, attempt, had: packets.length }) }
  })
  for await (const packet of stream) packets.push(packet)
  await cut
  t.equal(resumes.length, 1, 'one resume')
  const [resume] = resumes
  t.ok(resume !== undefined && resume.had >= 1 && resume.had <= 5, `the drop came after ${resume?.had} packets`)
  t.same(resume, { cursor: key(packets[(resume?.had ?? 0) - 1] as StreamPacket), attempt: 1, had: resume?.had }, 'resumed after the last packet it had')
  t.equal(proxy.connections(), 2, 'the re-POST was a new connection')
  t.ok(gapless(packets), 'every stream is 1..n, no gap, no duplicate')
  assertStreamRules(packets)
  const body = stream.request
  t.same(packets.map((p) => JSON.stringify(p)), (await app.ledger.rows(body.request_id)).map((r) => r.frame), 'exactly the run\'s journal, in order')
  t.equal(packets.filter((p) => p.op === 'DELTA').map((p) => p.p).join(''), Array.from({ length: 12 }, (_, i) => `w${i} `).join(''))
  t.equal(observed.started.filter((s) => s === body.context.session_id).length, 1, 'the server ran the agent once')
})

t.test('packets a resume sends again are dropped (a server that ignores the cursor replays from the start)', async (t) => {
  const { app, port } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const proxy = await tcpProxy(t, port)
  const stripped: string[] = []
  const forgetful = (async (url: string, init: RequestInit) => {
    const { 'last-event-id': cursor, ...headers } = init.headers as Record<string, string>
    if (cursor !== undefined) stripped.push(cursor)
    return await fetch(url, { ...init, headers })
  }) as typeof fetch
  const packets: StreamPacket[] = []
  let had = 0
  const cut = proxy.cutAfter(4)
  const stream = new AgentHostClient({ baseUrl: proxy.url, fetch: forgetful, resume: FAST }).stream({ agentId: SCRIPTED, input: { script: script(6, 10) } }, {
    onResume: () => { had = packets.length }
  })
  for await (const packet of stream) packets.push(packet)
  await cut
  t.ok(had >= 1, `${had} packets came before the drop, and came again after it`)
  t.same(stripped, [key(packets[had - 1] as StreamPacket)], 'the client sent its cursor (the wrapper took it away)')
  t.ok(gapless(packets))
  t.same(packets.map((p) => JSON.stringify(p)), (await app.ledger.rows(stream.request.request_id)).map((r) => r.frame))
})

t.test('a stream that cannot be resumed ends with stream_interrupted after maxAttempts tries in a row', async (t) => {
  const { port } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const proxy = await tcpProxy(t, port)
  const attempts: number[] = []
  const cut = proxy.cutAfter(3)
  const stream = new AgentHostClient({ baseUrl: proxy.url, resume: { maxAttempts: 3, ...FAST } }).stream({ agentId: SCRIPTED, input: { script: script(40, 10) } }, {
    onResume: (cursor, attempt) => {
      attempts.push(attempt)
      proxy.refuse()
    }
  })
  const packets: StreamPacket[] = []
  const error = await rejection((async () => { for await (const packet of stream) packets.push(packet) })())
  await cut
  t.match(error, { status: 0, code: 'stream_interrupted', requestId: stream.request.request_id, message: /3 resumes in a row failed/ })
  t.match(error.cause, { code: 'network_error' }, 'the last failure is the cause')
  t.same(attempts, [1, 2, 3])
  t.ok(packets.length > 0 && packets.length <= 3, 'the packets before the drop were yielded')
  t.equal(stream.cursor, key(packets.at(-1) as StreamPacket), 'the cursor to try again with later')
})

t.test('resume follows the protocol: Last-Event-ID is the cursor, 408/429/5xx are retried, a refusal for good is thrown, progress resets the count', async (t) => {
  const first = RUN.slice(0, 2)
  const second = RUN.slice(2, 4)
  const rest = RUN.slice(4)
  const resumes: Array<[string, number]> = []
  const { fetch, lastEventIds } = scripted([
    () => eventStream(sse(first)),
    () => errorAnswer(503, 'AH_ERR_SHUTTING_DOWN'),
    () => eventStream(sse(second)),
    () => errorAnswer(429, 'AH_ERR_RATE_LIMITED'),
    () => eventStream(sse(rest))
  ])
  const stream = new AgentHostClient({ baseUrl: '', fetch, resume: { maxAttempts: 2, ...FAST } }).stream({ agentId: MAIN, query: 'x' }, { onResume: (cursor, attempt) => { resumes.push([cursor, attempt]) } })
  t.same(await drain(stream), RUN, 'every packet once, in order')
  t.same(lastEventIds, [undefined, `${SUB}:1`, `${SUB}:1`, `${SUB}:3`, `${SUB}:3`])
  t.same(resumes, [[`${SUB}:1`, 1], [`${SUB}:1`, 2], [`${SUB}:3`, 1], [`${SUB}:3`, 2]], 'a clean end without the main CLOSE is a drop; a response with new packets starts the count again')

  const refused = scripted([() => eventStream(sse(first)), () => errorAnswer(403, 'AH_ERR_FORBIDDEN')])
  const forbidden = new AgentHostClient({ baseUrl: '', fetch: refused.fetch, resume: FAST }).stream({ agentId: MAIN, query: 'x' })
  t.match(await rejection(drain(forbidden)), { status: 403, code: 'AH_ERR_FORBIDDEN', requestId: forbidden.request.request_id })

  const empty = scripted(Array.from({ length: 3 }, () => () => eventStream('')))
  const cursors: string[] = []
  const nothing = new AgentHostClient({ baseUrl: '', fetch: empty.fetch, resume: { maxAttempts: 2, ...FAST } }).stream({ agentId: MAIN, query: 'x' }, { onResume: (cursor) => { cursors.push(cursor) } })
  t.match(await rejection(drain(nothing)), { code: 'stream_interrupted', cause: { message: /ended before the main stream's CLOSE/ } })
  t.same(cursors, ['', ''], 'before any packet the cursor is empty: the resume replays from the start')
  t.same(empty.lastEventIds, [undefined, undefined, undefined])
})

t.test('aborting while the stream waits to resume ends it with code aborted', async (t) => {
  const controller = new AbortController()
  const { fetch } = scripted([() => eventStream(sse(RUN.slice(0, 2)))])
  const stream = new AgentHostClient({ baseUrl: '', fetch, resume: { baseDelayMs: 60_000, maxDelayMs: 60_000 } }).stream({ agentId: MAIN, query: 'x' }, {
    signal: controller.signal,
    onResume: () => { queueMicrotask(() => { controller.abort('gave up') }) }
  })
  t.match(await rejection(drain(stream)), { code: 'aborted', cause: 'gave up' })
})
