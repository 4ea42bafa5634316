// The projection of packets as AG-UI events, packet by packet, for what the example agents do not
// send: warnings, failures, shutdown, usage, results, steps and messages a run leaves open. Every
// event is checked against @ag-ui/core's schema.
import t, { type Test } from 'tap'
import { EventSchema } from '@ag-ui/core/schemas'
import { RunEvents, type AgUiEvent } from '../../src/ag-ui/events.js'
import { agUiInterrupt } from '../../src/ag-ui/interrupts.js'
import { envelopeOf, lastUserText } from '../../src/ag-ui/run-input.js'
import type { StreamPacket } from '../../src/protocol/packets.js'

const MAIN = '00000000-0000-4000-8000-00000000000a'
const SIDE = '00000000-0000-4000-8000-00000000000b'
const T = '2026-11-29T10:00:00.000Z'
let seq = 0
const packet = (stream: string, op: StreamPacket['op'], p: unknown): StreamPacket => ({ stream_id: stream, seq: ++seq, op, t: T, p }) as StreamPacket
const event = (p: Record<string, unknown>, stream = MAIN): StreamPacket => packet(stream, 'EVENT', p)
const progress = (label: string, status: string): StreamPacket => event({ id: `p-${++seq}`, timestamp: T, type: 'PROGRESS_INDICATOR', data: { label, status } })

/** Feed `packets` to a fresh projection: every event it makes, each checked to be valid AG-UI. */
function project (t: Test, packets: StreamPacket[]): AgUiEvent[] {
  const projection = new RunEvents({ threadId: 'th', runId: 'ru', mainStreamId: MAIN })
  const events = [projection.started(), ...packets.flatMap((p) => projection.apply(p))]
  for (const e of events) t.ok(EventSchema.safeParse(e).success, `valid AG-UI: ${e.type}`)
  return events
}

t.test('a failed run: a warning is CUSTOM, open messages and steps are closed, then RUN_ERROR with the error and the usage so far', async (t) => {
  const events = project(t, [
    progress('Searching', 'running'),
    progress('Searching', 'running'),
    packet(SIDE, 'DELTA', 'half a sen'),
    packet(SIDE, 'ERROR', { code: 'slow_source', message: 'The source is slow', severity: 'WARNING' }),
    event({ type: 'USAGE', data: { input_tokens: 10, output_tokens: 5 } }),
    event({ type: 'USAGE', data: { input_tokens: 1, output_tokens: 2, cost: 0.1 } }),
    packet(MAIN, 'ERROR', { code: 'agent_error', message: 'The agent failed', severity: 'FATAL' }),
    packet(SIDE, 'CLOSE', 'aborted'),
    packet(MAIN, 'CLOSE', 'aborted'),
    packet(MAIN, 'DELTA', 'after the end')
  ])
  t.match(events.map((e) => e.type), [
    'RUN_STARTED', 'STEP_STARTED', 'CUSTOM', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'CUSTOM', 'CUSTOM', 'CUSTOM', 'TEXT_MESSAGE_END', 'STEP_FINISHED', 'RUN_ERROR'
  ], 'nothing after the end')
  t.match(events[2], { type: 'CUSTOM', name: 'PROGRESS_INDICATOR', value: { label: 'Searching', status: 'running' } }, 'a running step reported again')
  t.match(events[5], { type: 'CUSTOM', name: 'WARNING', value: { stream_id: SIDE, code: 'slow_source', severity: 'WARNING' } })
  t.match(events.at(-1), { type: 'RUN_ERROR', message: 'The agent failed', code: 'agent_error', usage: [{ inputTokens: 11, outputTokens: 7, totalTokens: 18 }] })
})

t.test('a run that ends without an error packet, or by shutdown, is a RUN_ERROR saying so', async (t) => {
  t.match(project(t, [packet(MAIN, 'CLOSE', 'aborted')]).at(-1), { type: 'RUN_ERROR', code: 'aborted' })
  t.match(project(t, [packet(MAIN, 'ERROR', { code: 'shutting_down', message: 'Shutting down', severity: 'TRANSIENT' }), packet(MAIN, 'CLOSE', 'shutdown')]).at(-1), { type: 'RUN_ERROR', code: 'shutting_down' })
  t.match(project(t, [packet(MAIN, 'CLOSE', 'shutdown')]).at(-1), { type: 'RUN_ERROR', code: 'shutting_down', message: /shut down/ })
})

t.test('steps reported finished without running start and finish at once; a result is RUN_FINISHED\'s, with the usage', async (t) => {
  const events = project(t, [
    progress('Fetch', 'complete'),
    progress('Parse', 'running'),
    progress('Parse', 'failed'),
    event({ type: 'RESULT', data: { answer: 42 } }),
    event({ type: 'USAGE', data: { input_tokens: 3, output_tokens: 4 } }),
    packet(MAIN, 'CLOSE', 'done')
  ])
  t.match(events.filter((e) => e.type.startsWith('STEP_')), [
    { type: 'STEP_STARTED', stepName: 'Fetch' }, { type: 'STEP_FINISHED', stepName: 'Fetch' },
    { type: 'STEP_STARTED', stepName: 'Parse' }, { type: 'STEP_FINISHED', stepName: 'Parse', metadata: { progress: { status: 'failed' } } }
  ])
  t.match(events.find((e) => e.type === 'CUSTOM' && e.name === 'RESULT'), { value: { type: 'RESULT', data: { answer: 42 } } }, 'the RESULT as it came, too')
  t.match(events.at(-1), { type: 'RUN_FINISHED', threadId: 'th', runId: 'ru', result: { answer: 42 }, outcome: { type: 'success' }, usage: [{ totalTokens: 7 }] })
})

t.test('a run cancelled, or stopped to ask, finishes with those outcomes; an interrupt keeps what it is about', async (t) => {
  t.match(project(t, [event({ type: 'USAGE', data: { input_tokens: 1, output_tokens: 1 } }), packet(MAIN, 'CLOSE', 'cancelled')]).at(-1), { type: 'RUN_FINISHED', outcome: { type: 'cancelled' }, usage: [{ totalTokens: 2 }] })
  const interrupts = [
    { id: '00000000-0000-4000-8000-0000000000c1', kind: 'approval', message: 'Call the tool?', call: { tool: 'fs', action: 'write', args: {} }, expires_at: T },
    { id: '00000000-0000-4000-8000-0000000000c2', kind: 'input', reason: 'auth', message: 'Your token?', expires_at: T }
  ]
  const end = project(t, [event({ type: 'INTERRUPT', interrupts }), event({ type: 'USAGE', data: { input_tokens: 1, output_tokens: 1 } }), packet(MAIN, 'CLOSE', 'input_required')]).at(-1)
  t.match(end, {
    type: 'RUN_FINISHED',
    usage: [{ totalTokens: 2 }],
    outcome: {
      type: 'interrupt',
      interrupts: [
        { id: interrupts[0]?.id, reason: 'approval', metadata: { call: { tool: 'fs' } }, responseSchema: { required: ['approved'] }, expiresAt: T },
        { id: interrupts[1]?.id, reason: 'auth', message: 'Your token?' }
      ]
    }
  })
  t.notOk('responseSchema' in agUiInterrupt(interrupts[1] as Parameters<typeof agUiInterrupt>[0]), 'an input without a schema has none')
})

t.test('a user message\'s content: a string, text parts, or refused', async (t) => {
  t.equal(lastUserText([{ role: 'user', content: 'first' }, { role: 'assistant', content: 'reply' }, { role: 'user', content: 'last' }]), 'last')
  t.equal(lastUserText([{ role: 'assistant', content: 'hi' }]), undefined, 'no user message: no query')
  t.throws(() => lastUserText([{ role: 'user', content: 42 }]), { code: 'AH_ERR_VALIDATION', message: /\/messages\/0\/content must be a string or a list/ })
  const envelope = envelopeOf({ threadId: 't', runId: 'r', messages: [], forwardedProps: { agent_host: { capability: 'x', timeout_ms: 5, on_disconnect: 'continue' } } }, { agentId: 'a', userId: 'u', traceId: '0af7651916cd43dd8448eb211c80319c' })
  t.match(envelope.payload.metadata, { capability: 'x', timeout_ms: 5, on_disconnect: 'continue', ag_ui: { thread_id: 't', run_id: 'r' } }, 'forwardedProps.agent_host is the request\'s metadata')
  t.same(envelope.payload.payload, {}, 'and not the agent\'s arguments')
  t.equal(envelope.context.trace.trace_id, '0af76519-16cd-43dd-8448-eb211c80319c', 'in the request\'s trace')
})
