import t from 'tap'
import { LlmProtocol } from '../../src/backends/llm/llm-protocol.js'
import { OpenAiTransport } from '../../src/backends/llm/openai.js'
import { capBridge } from '../../src/agents/cap-bridge.js'
import { BaseProtocol, ParseState, type Message, type ParseResult, type ProtocolResponse, type StreamChunk } from '../../src/backends/protocol.js'
import { memory } from '../fixtures/memory.js'
import { fakeProvider, openai, type FakeProvider } from '../fixtures/providers.js'
import type { ResponseHandler } from '../../src/agents/contract.js'

function protocol (fake: FakeProvider, options: { maxHistory?: number } = {}): LlmProtocol {
  return new LlmProtocol({
    name: 'test',
    transport: new OpenAiTransport({ baseUrl: `${fake.url}/v1`, apiKey: 'k', model: 'test-model', maxTokens: 50, maxRetries: 0, timeoutMs: 30_000 }),
    prices: {},
    timeoutMs: 30_000,
    maxTurns: 4,
    ...options
  })
}

t.test('the seed\'s defaults: available, no cost, no usage, streamMessage does nothing', async (t) => {
  class Minimal extends BaseProtocol {
    readonly name = 'minimal'
    async start (): Promise<string> { return 's' }
    async send (): Promise<ProtocolResponse> { return { content: '', toolCalls: [], usage: null, stopReason: null, metadata: {} } }
    async resume (): Promise<{ sessionId: string, response: ProtocolResponse }> { return { sessionId: 's', response: await this.send() } }
    async stop (): Promise<void> {}
    formatMessages (messages: Message[]): unknown { return messages }
    parseStream (): ParseResult[] { return [{ type: 'eof' }] }
    transportType (): 'llm' { return 'llm' }
  }
  const p = new Minimal()
  t.equal(await p.available(), true)
  t.equal(p.estimateCost({ content: 'x', toolCalls: [], usage: { input: 5, output: 5 }, stopReason: null, metadata: {} }), 0)
  t.equal(p.getUsage('s'), null)
  const seen: StreamChunk[] = []
  await p.streamMessage('s', { type: 'text', text: 'x' }, { onStreamMessage: (c) => { seen.push(c) } })
  t.same(seen, [], 'the default streamMessage is a no-op')
  t.match(p.unavailableReason(), /minimal/)
})

t.test('resume of an unknown session starts it; stop forgets it; history is trimmed, never starting with a tool result', async (t) => {
  const fake = await fakeProvider(t)
  const p = protocol(fake, { maxHistory: 3 })
  const mem = memory()
  fake.script({ frames: openai.text(['one']) })
  const first = await p.resume('fresh', [{ role: 'user', content: 'a' }], { memory: mem })
  t.equal(first.response.content, 'one')
  t.same(p.getUsage('fresh'), { input: 10, output: 1, cost: 0, turns: 1 })
  const call = openai.chunk({ tool_calls: [{ index: 0, id: 'c1', function: { name: 'fail', arguments: '{}' } }] })
  fake.script({ frames: [call, openai.finish('tool_calls'), openai.done] }, { frames: openai.text(['two']) })
  const tools = { fail: { description: 'always fails', parameters: { type: 'object' }, run: () => { throw new Error('nope') } } }
  await p.send('fresh', [{ role: 'user', content: 'b' }], { memory: mem, tools })
  t.match((fake.received.at(-1)?.body.messages as unknown[]).at(-1), { role: 'tool', content: 'Tool "fail" failed: nope' })
  const stored = mem.map.get('backend:test') as { messages: Message[] }
  t.same(stored.messages.map((m) => m.role), ['assistant', 'tool', 'assistant'], 'the last 3 of 6 kept')
  await p.stop('fresh')
  t.equal(p.getUsage('fresh'), null)
  fake.script({ frames: openai.text(['three']) })
  await p.send('fresh', [{ role: 'user', content: 'c' }], { memory: mem })
  t.same((fake.received.at(-1)?.body.messages as Message[]).map((m) => m.content), [...stored.messages.map((m) => m.content ?? null), 'c'].map((c) => c === '' ? null : c), 'reloaded from memory after stop')
})

t.test('a stream whose data is not JSON fails FATAL; a failed send leaves the history as it was', async (t) => {
  const fake = await fakeProvider(t)
  const p = protocol(fake)
  fake.script({ frames: ['data: {oops\n\n'] })
  await t.rejects(p.send('s', [{ role: 'user', content: 'x' }], {}), { streamCode: 'backend_failed', severity: 'FATAL', message: /could not be read/ })
  fake.script({ frames: openai.text(['ok']) })
  await p.send('s', [{ role: 'user', content: 'y' }], {})
  t.same((fake.received.at(-1)?.body.messages as Message[]).map((m) => m.content), ['y'], 'the failed message is not resent')
})

t.test('capBridge: text on one stream, reasoning as one thought, tool progress, usage, abort', async (t) => {
  const calls: unknown[][] = []
  const stream = { write: async (c: string) => { calls.push(['write', c]) }, close: async () => { calls.push(['close']) }, abort: async (r: string) => { calls.push(['abort', r]) } }
  const response = {
    thought: async (c: string) => { calls.push(['thought', c]) },
    progress: async (l: string, s: string) => { calls.push(['progress', l, s]) },
    usage: async (u: unknown, c: number) => { calls.push(['usage', u, c]) },
    create_stream: async (title: string) => { calls.push(['create_stream', title]); return stream }
  } as unknown as ResponseHandler
  const bridge = capBridge(response, 'T')
  await bridge.onStreamMessage({ type: 'reasoning', text: 'let me ' })
  await bridge.onStreamMessage({ type: 'reasoning', text: 'think' })
  await bridge.onStreamMessage({ type: 'tool_call', call: { id: '1', name: 'x', arguments: {} } })
  await bridge.onStreamMessage({ type: 'tool_result', callId: '1', name: 'x', content: 'r', isError: true })
  await bridge.onStreamMessage({ type: 'reasoning', text: '   ' })
  await bridge.onStreamMessage({ type: 'text', text: 'hi ' })
  await bridge.onStreamMessage({ type: 'text', text: 'there' })
  await bridge.onStreamMessage({ type: 'usage', usage: { input: 1, output: 2 }, cost: 0.5 })
  t.equal(bridge.text, 'hi there')
  await bridge.abort('broke')
  t.same(calls, [
    ['thought', 'let me think'], ['progress', 'Calling tool x', 'running'], ['progress', 'Calling tool x', 'failed'],
    ['create_stream', 'T'], ['write', 'hi '], ['write', 'there'], ['usage', { input_tokens: 1, output_tokens: 2 }, 0.5], ['abort', 'broke']
  ])
  const empty = capBridge(response)
  await empty.finish()
  await empty.abort('nothing open')
  t.equal(calls.length, 8, 'nothing to close or abort when no text came')
})

t.test('parse state: an SSE event split across a CRLF boundary', async (t) => {
  const fake = await fakeProvider(t)
  const p = protocol(fake)
  const state = new ParseState()
  t.same(p.parseStream('data: {"a":1}\r', state), [{ type: 'partial' }])
  t.same(p.parseStream('\n\r\n', state), [{ type: 'message', message: { data: { a: 1 } } }])
})
