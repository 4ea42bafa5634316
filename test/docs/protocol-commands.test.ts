import t from 'tap'
import type { StreamPacket } from '../../src/protocol/packets.js'
import { listen } from '../helper.js'
import { assertStreamRules, parseSse } from '../sse.js'
import { docBlocks, runShell } from './doc-blocks.js'

// The curl commands of docs/protocol.md, pasted in the page's order into a shell against one server
// (only the port changes, and the `<stream_id>:<seq>` a reader fills in from what they received).
// test/docs/protocol.test.ts checks the page's answers field by field through app.inject; this file
// checks that the commands a reader copies get those answers over a socket.

t.test('the protocol page\'s commands work as pasted, in order', async (t) => {
  const { url } = await listen(t)
  const local = (block: string | undefined): string => (block as string).replaceAll('http://127.0.0.1:3000', url)
  const [health] = docBlocks('docs/protocol.md', '## 1. Endpoints')
  const choosing = docBlocks('docs/protocol.md', '## 3. Choosing JSON or SSE')
  const [resume] = docBlocks('docs/protocol.md', '### 5.8 Resuming: `Last-Event-ID`')
  const [cancel] = docBlocks('docs/protocol.md', '### 5.9 Cancelling')
  const [manifests] = docBlocks('docs/protocol.md', '## 7. Agent manifests: `GET /v1/agents`')
  const [openapi] = docBlocks('docs/protocol.md', '## 8. OpenAPI and Swagger UI')
  t.equal(choosing.length, 3, '§3: echo, echo-stream, showcase')

  t.match(JSON.parse(await runShell(local(health))), { status: 'ok', version: String, instance_id: String }, '§1: /health')

  const [echo, echoStream, showcase] = choosing
  t.match(JSON.parse(await runShell(local(echo))), { request_id: 'd0c5d0c5-0000-4000-8000-000000000001', output: { echo: 'hello world', calls: 1 } }, '§3: echo answers in JSON')
  const streamed = parseSse(await runShell(local(echoStream))).packets
  assertStreamRules(streamed)
  t.same(streamed.filter((p) => p.op === 'DELTA').map((p) => p.p), ['hello ', 'streaming ', 'world '], '§3: echo-stream streams its words')
  const shown = parseSse(await runShell(local(showcase))).packets
  assertStreamRules(shown)
  const kinds = new Set(shown.flatMap((p) => p.op === 'EVENT' ? [(p.p as { type: string }).type] : []))
  t.ok(['THOUGHT_TRACE', 'DATA', 'STREAM_START'].every((k) => kinds.has(k)), `§3: showcase streams events of every kind: ${[...kinds].join(', ')}`)
  t.match(shown.at(-1), { op: 'CLOSE', p: 'done' }, 'to the end')

  // §5.8: the reader received up to "hello " (the second stream's seq 2) and resumes after it
  t.match(resume, /-H 'last-event-id: <stream_id>:<seq>'/, 'the placeholder a reader fills in')
  const words = streamed.find((p) => p.op === 'DELTA') as StreamPacket
  t.equal(words.seq, 2, '"hello " is seq 2 of its stream')
  const rest = parseSse(await runShell(local(resume).replace('<stream_id>:<seq>', `${words.stream_id}:2`)), false).packets
  t.same(rest.filter((p) => p.op === 'DELTA').map((p) => p.p), ['streaming ', 'world '], '§5.8: the rest, after "hello "')
  t.notOk(rest.some((p) => p.stream_id === words.stream_id && p.seq <= 2), 'nothing received twice')

  // §5.9: the slow run in the background, the cancel after the page's two seconds; the shell's
  // output is both, the cancel's answer (no newline) amid the stream's frames
  const printed = await runShell(local(cancel))
  const cancelled = /\{"request_id":[^}]*\}/.exec(printed)?.[0] ?? '{}'
  const sse = printed.replace(cancelled, '')
  t.match(JSON.parse(cancelled), { request_id: 'd0c5d0c5-0000-4000-8000-000000000008', cancelled: true }, '§5.9: the cancel is accepted')
  const ended = parseSse(sse).packets
  t.same(ended.filter((p) => p.op === 'CLOSE').map((p) => p.p), ['cancelled', 'cancelled'], 'every stream closes "cancelled"')
  t.same(ended.filter((p) => p.op === 'DELTA').map((p) => p.p), ['one '], 'after the first word')

  const [all, one] = (manifests as string).trimEnd().split('\n').map((line) => local(line))
  t.ok((JSON.parse(await runShell(all as string)) as { agents: Array<{ metadata: { name: string } }> }).agents.some((a) => a.metadata.name === 'echo'), '§7: every manifest')
  t.match(JSON.parse(await runShell(one as string)), { metadata: { id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01', name: 'echo' } }, '§7: one, by name')

  const [document, swagger] = (openapi as string).trimEnd().split('\n').map((line) => local(line))
  t.match(JSON.parse(await runShell(document as string)), { openapi: /^3\.1/, paths: { '/v1/assist': { post: Object } } }, '§8: the OpenAPI document')
  t.match(await runShell(swagger as string), /swagger/i, '§8: Swagger UI')
})
