import t from 'tap'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { compileSchema, toIssues } from '../../src/agents/json-schema.js'
import { StreamPacket as StreamPacketSchema } from '../../src/protocol/packets.js'
import { AgentHostClient, AgentHostError, buildEnvelope, type AssistStream, type StreamPacket } from '../../client/src/index.js'
import { AGENTS, FIXTURE_AGENTS_DIR, listen, SCRIPTED, streamingScript } from '../helper.js'
import { assertStreamRules } from '../sse.js'
import { eventStream, MAIN, RUN, scripted, sse } from './fixtures/stream-fakes.js'

const strict = compileSchema<StreamPacket>(StreamPacketSchema)

/** Every packet of `stream`, each checked against the server's strict packet schema. */
async function collect (stream: AssistStream, onPacket: (packet: StreamPacket, all: StreamPacket[]) => unknown = () => {}): Promise<StreamPacket[]> {
  const packets: StreamPacket[] = []
  for await (const packet of stream) {
    if (!strict(packet)) throw new Error(`not a valid packet: ${JSON.stringify(toIssues(strict.errors))}`)
    packets.push(packet)
    await onPacket(packet, packets)
  }
  return packets
}

/** What `next()` of `stream` rejects with, which must be an AgentHostError. */
async function failure (stream: AssistStream): Promise<AgentHostError> {
  try {
    for (let r = await stream.next(); r.done !== true; r = await stream.next());
  } catch (err) {
    if (err instanceof AgentHostError) return err
    throw err
  }
  throw new Error('expected a rejection')
}

const key = (p: StreamPacket): string => `${p.stream_id}:${p.seq}`
const text = (packets: StreamPacket[]): string => packets.map((p) => p.op === 'DELTA' ? p.p : '').join('')

t.test('stream yields typed packets as they come and ends with the main stream\'s CLOSE', async (t) => {
  const { url } = await listen(t)
  const stream = new AgentHostClient({ baseUrl: url }).stream({ agentId: AGENTS.echoStream, query: 'hello streaming world', input: { delay_ms: 0 } })
  t.equal(stream.cursor, undefined, 'no cursor before the first packet')
  const packets = await collect(stream)
  const main = assertStreamRules(packets)
  t.match(packets[0], { stream_id: main, seq: 1, op: 'EVENT', p: { type: 'THOUGHT_TRACE' } })
  t.match(packets[1], { seq: 1, op: 'EVENT', p: { type: 'STREAM_START', title: 'Echo Response' } })
  t.equal(text(packets), 'hello streaming world ')
  t.match(packets.at(-1), { stream_id: main, op: 'CLOSE', p: 'done' })
  const last = packets.at(-1) as StreamPacket
  t.equal(stream.cursor, `${last.stream_id}:${last.seq}`, 'the cursor is the last packet\'s')
  t.same(await stream.next(), { done: true, value: undefined }, 'and the iteration is over')
})

t.test('regression: a run whose first packet is on a sub-stream does not end at that sub-stream\'s CLOSE', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const packets = await collect(new AgentHostClient({ baseUrl: url }).stream({ agentId: SCRIPTED, input: { script: streamingScript(2, 0) } }))
  t.same(packets.map((p) => [p.seq, p.op]), [[1, 'EVENT'], [2, 'DELTA'], [3, 'DELTA'], [4, 'CLOSE'], [1, 'CLOSE']])
  t.not(packets[0]?.stream_id, packets[4]?.stream_id, 'the first packet is not on the main stream')
  assertStreamRules(packets)
})

t.test('an agent\'s FATAL error is yielded like any packet, then the stream closes', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const packets = await collect(new AgentHostClient({ baseUrl: url }).stream({ agentId: SCRIPTED, input: { script: [{ op: 'markdown', content: 'm' }, { op: 'throw', message: 'x' }] } }))
  t.match(packets.map((p) => p.op === 'ERROR' ? p.p : p.p), [{ type: 'MARKDOWN_BLOCK' }, { code: 'agent_failed', severity: 'FATAL' }, 'aborted'])
})

t.test('a refusal before the stream starts rejects the first next() with the server\'s error; an unreachable server with network_error', async (t) => {
  const { url } = await listen(t)
  const client = new AgentHostClient({ baseUrl: url })
  const envelope = buildEnvelope({ agentId: randomUUID(), query: 'x' })
  const stream = client.stream(envelope)
  t.equal(stream.request, envelope, 'the envelope it sends')
  t.match(await failure(stream), { status: 404, code: 'AH_ERR_AGENT_NOT_FOUND', requestId: envelope.request_id })
  t.match(await failure(client.stream({ agentId: AGENTS.echoStream })), { status: 400, code: 'AH_ERR_VALIDATION' })
  const closed = createServer().listen(0, '127.0.0.1')
  await once(closed, 'listening')
  const { port } = closed.address() as { port: number }
  await new Promise((resolve) => closed.close(resolve))
  t.match(await failure(new AgentHostClient({ baseUrl: `http://127.0.0.1:${port}` }).stream({ agentId: AGENTS.echoStream, query: 'x' })), { status: 0, code: 'network_error' })
})

t.test('cancel ends a running stream: every stream closes "cancelled"; cancelling it again is a 404', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const client = new AgentHostClient({ baseUrl: url })
  const stream = client.stream({ agentId: SCRIPTED, input: { script: [{ op: 'thought', content: 'go' }, ...streamingScript(500, 20)] } })
  let cancelled = false
  const packets = await collect(stream, async (packet) => {
    if (packet.op === 'DELTA' && !cancelled) {
      cancelled = true
      await client.cancel(stream.request.request_id)
    }
  })
  t.ok(packets.filter((p) => p.op === 'DELTA').length < 500, 'the run stopped early')
  t.same(packets.filter((p) => p.op === 'CLOSE').map((p) => p.p), ['cancelled', 'cancelled'], 'the sub-stream, then the main stream')
  assertStreamRules(packets)
  t.match(await client.cancel(stream.request.request_id).catch((err: unknown) => err), { status: 404, code: 'AH_ERR_RUN_NOT_FOUND', requestId: stream.request.request_id })
})

t.test('an AbortSignal ends the iteration with code aborted: before the request, and in the middle of the stream', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const client = new AgentHostClient({ baseUrl: url })
  const early = client.stream({ agentId: AGENTS.echoStream, query: 'x' }, { signal: AbortSignal.abort('not now') })
  t.match(await failure(early), { code: 'aborted', cause: 'not now', requestId: early.request.request_id })
  const controller = new AbortController()
  const stream = client.stream({ agentId: SCRIPTED, input: { script: streamingScript(500, 20) } }, { signal: controller.signal })
  const first = await stream.next()
  t.equal(first.done, false)
  controller.abort('page closed')
  t.match(await failure(stream), { status: 0, code: 'aborted', cause: 'page closed', requestId: stream.request.request_id })
  t.same(await stream.next(), { done: true, value: undefined }, 'then it is over')
  await client.cancel(stream.request.request_id)
})

t.test('leaving the loop early lets the request go; the run goes on and can be followed again', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const client = new AgentHostClient({ baseUrl: url })
  const stream = client.stream({ agentId: SCRIPTED, input: { script: streamingScript(5, 10) } })
  for await (const packet of stream) if (packet.op === 'DELTA') break
  t.same(await stream.next(), { done: true, value: undefined })
  const again = await collect(client.stream(stream.request))
  assertStreamRules(again)
  t.equal(text(again), 'w0 w1 w2 w3 w4 ', 'the same envelope again follows the same run from the start')
})

t.test('a page reload: a new client given the saved envelope and cursor gets only the rest', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const first = new AgentHostClient({ baseUrl: url }).stream({ agentId: SCRIPTED, input: { script: [{ op: 'thought', content: 'go' }, ...streamingScript(8, 15)] } })
  const before: StreamPacket[] = []
  for await (const packet of first) {
    before.push(packet)
    if (before.length === 4) break
  }
  const saved = JSON.parse(JSON.stringify({ request: first.request, cursor: first.cursor })) as { request: typeof first.request, cursor: string }
  t.equal(saved.cursor, `${before[3]?.stream_id ?? ''}:${before[3]?.seq ?? 0}`)

  const resumed = new AgentHostClient({ baseUrl: url }).stream(saved.request, { resumeFrom: saved.cursor })
  t.equal(resumed.cursor, saved.cursor, 'it starts at the saved cursor')
  const after = await collect(resumed)
  const all = [...before, ...after]
  assertStreamRules(all)
  t.same(all.map((p) => JSON.stringify(p)), (await app.ledger.rows(saved.request.request_id)).map((r) => r.frame), 'exactly the run\'s packets, once each, in order')
  t.equal(after.at(-1)?.op, 'CLOSE', 'it ends at the main stream\'s CLOSE although it never saw that stream\'s first packet')

  const everything = await collect(new AgentHostClient({ baseUrl: url }).stream(saved.request, { resumeFrom: all[0]?.stream_id as string }))
  t.same(everything, all, 'a bare stream id as the cursor replays the whole run')
  const finished = new AgentHostClient({ baseUrl: url, resume: { maxAttempts: 1, baseDelayMs: 1 } }).stream(saved.request, { resumeFrom: key(all.at(-1) as StreamPacket) })
  t.match(await failure(finished), { code: 'stream_interrupted' }, 'after the last packet there is nothing to resume (the README says to drop the cursor)')
})

t.test('what is not a CAP event stream is an invalid_response; other events, comments and retry lines are skipped', async (t) => {
  const call = async (answer: () => Response) => await failure(new AgentHostClient({ baseUrl: '', fetch: scripted([answer]).fetch }).stream({ agentId: AGENTS.echoStream, query: 'x' }))
  t.match(await call(() => new Response('{}', { headers: { 'content-type': 'application/json' } })), { status: 200, code: 'invalid_response', message: /Expected an event stream, got application\/json/ })
  t.match(await call(() => new Response(null, { status: 200 })), { code: 'invalid_response', message: /got no content type/ })
  t.match(await call(() => eventStream(`${sse(RUN.slice(0, 1))}event: stream.packet\ndata: {not json\n\n`)), { code: 'invalid_response', message: /data is not JSON: \{not json/ })
  const noise = `retry: 3000\n\n: ping\n\nevent: other\ndata: {}\n\n${sse(RUN.slice(0, 3))}: ping\n\n${sse(RUN.slice(3))}`
  const packets = await collect(new AgentHostClient({ baseUrl: '', fetch: scripted([() => eventStream(noise)]).fetch }).stream({ agentId: AGENTS.echoStream, query: 'x' }))
  t.same(packets, RUN)
  t.equal(packets.at(-1)?.stream_id, MAIN)
})
