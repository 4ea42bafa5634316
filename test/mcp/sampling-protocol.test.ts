import t from 'tap'
import { ParseState, type Message, type ProtocolContext } from '../../src/backends/protocol.js'
import { SamplingProtocol } from '../../src/mcp/sampling.js'

type CreateMessage = (params: Record<string, unknown>) => Promise<Record<string, unknown>>

/** A protocol over a fake session server whose client answers with `answer` (and declares `capabilities`). */
function protocolOf (answer: CreateMessage, capabilities: Record<string, unknown> = { sampling: {} }, options: { timeoutMs?: number, maxTurns?: number } = {}): { protocol: SamplingProtocol, asked: Array<Record<string, unknown>> } {
  const asked: Array<Record<string, unknown>> = []
  const server = {
    getClientCapabilities: () => capabilities,
    createMessage: async (params: Record<string, unknown>) => { asked.push(params); return await answer(params) }
  }
  return { protocol: new SamplingProtocol({ server: server as never, relatedRequestId: 1, ...options }), asked }
}

/** A session memory in a map (the CAP session's values). */
function memory (): ProtocolContext['memory'] & { values: Map<string, unknown> } {
  const values = new Map<string, unknown>()
  return {
    values,
    get: async <T>(key: string) => values.get(key) as T | undefined,
    store: async (key: string, value: unknown) => { values.set(key, structuredClone(value)) }
  }
}

const text = (value: string): Record<string, unknown> => ({ role: 'assistant', content: { type: 'text', text: value }, model: 'client-model', stopReason: 'endTurn' })

t.test('parseStream: sampling does not stream; a chunk is the client\'s answer whole, as JSON', async (t) => {
  const { protocol } = protocolOf(async () => text('x'))
  const state = new ParseState()
  t.same(protocol.parseStream('{"a":1}', state), [{ type: 'message', message: { a: 1 } }])
  t.same(protocol.parseStream(new TextEncoder().encode('{"b":2}'), state), [{ type: 'message', message: { b: 2 } }])
  t.equal(protocol.parseStream('not json', state)[0]?.type, 'error')
  t.same(protocol.parseStream(null, state), [{ type: 'eof' }])
  t.ok(state.ended)
  t.match(protocol.formatMessages([{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }]), { systemPrompt: 'be brief', messages: [{ role: 'user' }] })
})

t.test('a client that does not answer in time is a transient backend_timeout; an answer that is not an MCP error is backend_failed saying it could not be used', async (t) => {
  const late = protocolOf(async () => { throw Object.assign(new Error('Request timed out'), { code: -32001 }) }, { sampling: {} }, { timeoutMs: 50 })
  const id = await late.protocol.start({}, {})
  await t.rejects(late.protocol.send(id, [{ role: 'user', content: 'hi' }], {}), { streamCode: 'backend_timeout', severity: 'TRANSIENT', message: /did not answer within 50 ms/ })
  const broken = protocolOf(async () => { throw new TypeError('no content') })
  const other = await broken.protocol.start({}, {})
  await t.rejects(broken.protocol.send(other, [{ role: 'user', content: 'hi' }], {}), { streamCode: 'backend_failed', message: /could not be used: no content/ })
})

t.test('a session is loaded from the CAP session\'s memory in another process; its history is cut to the last 200 messages, never starting with a tool result', async (t) => {
  const store = memory()
  const first = protocolOf(async () => text('hello'))
  const id = await first.protocol.start({ system: 'be brief', model: 'small' }, { memory: store })
  await first.protocol.send(id, [{ role: 'user', content: 'one' }], { memory: store })
  // another process: nothing held, the memory has the session
  const second = protocolOf(async () => text('again'))
  const answered = await second.protocol.send(id, [{ role: 'user', content: 'two' }], { memory: store })
  t.equal(answered.content, 'again')
  t.match(second.asked[0], { systemPrompt: 'be brief', modelPreferences: { hints: [{ name: 'small' }] } })
  t.same((second.asked[0]?.messages as Array<{ content: { text: string } }>).map((m) => m.content.text), ['one', 'hello', 'two'], 'the conversation so far')
  // a session the memory does not hold (or holds for another id) starts afresh
  const third = protocolOf(async () => text('fresh'))
  await third.protocol.send('unknown-session', [{ role: 'user', content: 'three' }], { memory: memory() })
  t.same((third.asked[0]?.messages as unknown[]).length, 1)

  const long: Message[] = [{ role: 'user', content: 'start' }, { role: 'assistant', content: '', toolCalls: [{ id: 'c', name: 'tool', arguments: {} }] }, { role: 'tool', toolCallId: 'c', content: 'r' }]
  for (let i = 0; i < 200; i++) long.push({ role: 'user', content: `m${i}` })
  const trimmed = protocolOf(async () => text('ok'))
  const kept = memory()
  const session = await trimmed.protocol.start({}, { memory: kept })
  await trimmed.protocol.send(session, long, { memory: kept })
  const stored = kept.values.get('backend:mcp-sampling') as { messages: Message[] }
  t.ok(stored.messages.length <= 200, 'at most 200 kept')
  t.not(stored.messages[0]?.role, 'tool', 'not starting with a tool result whose call was cut off')
})

t.test('tools: an unknown tool and one that throws are error results the model reads; the loop stops at maxTurns', async (t) => {
  let turn = 0
  const { protocol, asked } = protocolOf(async () => {
    turn++
    return { role: 'assistant', model: 'm', stopReason: 'toolUse', content: [{ type: 'tool_use', id: `u${turn}`, name: turn === 1 ? 'missing' : 'broken', input: {} }] }
  }, { sampling: { tools: {} } }, { maxTurns: 3 })
  const chunks: unknown[] = []
  const ctx: ProtocolContext = {
    tools: { broken: { description: 'fails', parameters: { type: 'object' }, run: () => { throw new Error('it broke') } } },
    onStreamMessage: (chunk) => { chunks.push(chunk) }
  }
  const id = await protocol.start({}, ctx)
  const response = await protocol.send(id, [{ role: 'user', content: 'use a tool' }], ctx)
  t.equal(response.stopReason, 'max_turns')
  t.equal(asked.length, 3)
  t.match(chunks.filter((c) => (c as { type: string }).type === 'tool_result'), [{ content: 'Unknown tool "missing"', isError: true }, { content: 'Tool "broken" failed: it broke', isError: true }])
  t.same(protocol.getUsage(id), null)
  await protocol.stop(id)
})
