// The packet → chunk mapping where a real agent cannot easily go (a shutdown, a run aborted without
// an ERROR, a warning on the main stream, a question with every field), and the answers read back
// from a message; each checked with the AI SDK's own stream reader. Against a real server:
// chat.test.ts.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai'
import { answerChunks, answersIn, interruptChunks } from '../../src/ai-sdk/interrupts.js'
import { UiChunkProjection } from '../../src/ai-sdk/ui-chunks.js'
import type { StreamPacket } from '../../src/protocol/packets.js'

const MAIN = randomUUID()
const T = '2026-11-29T10:00:00.000Z'
let seq = 0
const packet = (op: StreamPacket['op'], p: unknown, stream = MAIN): StreamPacket => ({ stream_id: stream, seq: ++seq, t: T, op, p }) as StreamPacket

/** The chunks of `packets` as one run, and the message the AI SDK's reader makes of them. */
async function project (packets: StreamPacket[]): Promise<{ chunks: UIMessageChunk[], message: UIMessage | undefined, errors: unknown[] }> {
  const projection = new UiChunkProjection('m1', { request_id: randomUUID(), session_id: randomUUID(), agent: 'a' })
  const chunks = [...projection.start(), ...projection.beginRun(MAIN)]
  for (const p of packets) chunks.push(...projection.apply(p))
  if (projection.ended) chunks.push(...projection.finish())
  const errors: unknown[] = []
  let message: UIMessage | undefined
  const stream = new ReadableStream<UIMessageChunk>({ start (c) { for (const chunk of chunks) c.enqueue(chunk); c.close() } })
  for await (const snapshot of readUIMessageStream({ stream, onError: (err) => { errors.push(err) } })) message = snapshot
  return { chunks, message, errors }
}

t.test('a run the server shut down: the text left open ends, then an error and finish "error"', async (t) => {
  const { chunks, message, errors } = await project([packet('DELTA', 'half'), packet('CLOSE', 'shutdown')])
  t.same(chunks.map((c) => c.type), ['start', 'start-step', 'text-start', 'text-delta', 'text-end', 'finish-step', 'error', 'finish'])
  t.match(chunks.at(-2), { errorText: /shut down.*shutting_down/ })
  t.match(message?.parts[1], { type: 'text', text: 'half', state: 'done' })
  t.equal(errors.length, 1)
})

t.test('a run aborted without an ERROR says so; one with an ERROR says it once', async (t) => {
  const bare = await project([packet('CLOSE', 'aborted')])
  t.match(bare.chunks.filter((c) => c.type === 'error'), [{ errorText: /aborted/ }])
  const told = await project([packet('ERROR', { code: 'agent_failed', message: 'The agent failed', severity: 'FATAL' }), packet('CLOSE', 'aborted')])
  t.match(told.chunks.filter((c) => c.type === 'error'), [{ errorText: 'The agent failed (agent_failed)' }], 'once')
  t.match(told.chunks.at(-1), { type: 'finish', finishReason: 'error', messageMetadata: { end_reason: 'aborted' } })
})

t.test('a warning on the main stream is a data-error part, and the run goes on to finish "stop"', async (t) => {
  const { chunks, message, errors } = await project([packet('ERROR', { code: 'slow', message: 'slow backend', severity: 'WARNING' }), packet('CLOSE', 'done')])
  t.equal(errors.length, 0)
  t.match(message?.parts[1], { type: 'data-error', data: { stream_id: MAIN, code: 'slow', severity: 'WARNING' } })
  t.match(chunks.at(-1), { finishReason: 'stop' })
  t.same((await project([packet('CLOSE', 'done', randomUUID()), packet('CLOSE', 'done')])).chunks.map((c) => c.type), ['start', 'start-step', 'finish-step', 'finish'], 'another stream that wrote nothing closes with no chunk')
})

t.test('a question with every field: its tool call carries them; an approval\'s answers settle its tool part', async (t) => {
  const interrupt = { id: randomUUID(), kind: 'approval' as const, message: 'Call the tool?', call: { tool: 'fs', action: 'write', args: {} }, reason: 'auth' as const, expires_at: T }
  const input = { id: randomUUID(), kind: 'input' as const, message: 'Name?', schema: { type: 'string' }, expires_at: T }
  t.same(interruptChunks([interrupt, input]), [
    { type: 'tool-input-available', toolCallId: interrupt.id, toolName: 'approval', title: 'Call the tool?', input: { message: 'Call the tool?', call: interrupt.call, reason: 'auth', expires_at: T } },
    { type: 'tool-approval-request', approvalId: interrupt.id, toolCallId: interrupt.id },
    { type: 'tool-input-available', toolCallId: input.id, toolName: 'input', title: 'Name?', input: { message: 'Name?', schema: { type: 'string' }, expires_at: T } }
  ])
  t.same(answerChunks([{ interrupt_id: interrupt.id, kind: 'approval', value: { approved: true } }, { interrupt_id: input.id, kind: 'input', value: null }]), [
    { type: 'tool-output-available', toolCallId: interrupt.id, output: { approved: true } },
    { type: 'tool-output-available', toolCallId: input.id, output: null }
  ], 'an approval granted and an input (even null) are outputs')

  const open = [interrupt, input]
  t.same(answersIn([
    { type: 'text' },
    { type: 'dynamic-tool', toolCallId: interrupt.id.toUpperCase(), state: 'approval-responded', approval: { id: interrupt.id, approved: true, reason: '' } },
    { type: 'tool-input', toolCallId: input.id, state: 'output-error' },
    { type: 'tool-other', toolCallId: randomUUID(), state: 'output-available', output: 1 },
    { type: 'tool-input', toolCallId: 7, state: 'output-available', output: 1 }
  ], open), [{ interrupt_id: interrupt.id, kind: 'approval', value: { approved: true } }], 'only settled parts of open questions; an empty reason is no comment')
})
