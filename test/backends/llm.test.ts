import t from 'tap'
import { request } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../src/app.js'
import { build, envelope, listen, testConfig } from '../helper.js'
import { checkErrorBody, checkServiceResponse, parseSse } from '../sse.js'
import { anthropic, fakeProvider, openai, type FakeProvider } from '../fixtures/providers.js'
import type { StreamPacket } from '../../src/protocol/packets.js'

const LLM_CHAT = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a06'
const PRICES = JSON.stringify({ 'test-model': { input: 2, output: 10 } })

function openAiEnv (fake: FakeProvider, extra: Record<string, string> = {}): Record<string, string> {
  return { LLM_PROVIDER: 'openai', OPENAI_BASE_URL: `${fake.url}/v1`, OPENAI_MODEL: 'test-model', LLM_MAX_RETRIES: '0', LLM_PRICES: PRICES, ...extra }
}

function anthropicEnv (fake: FakeProvider, extra: Record<string, string> = {}): Record<string, string> {
  return { LLM_PROVIDER: 'anthropic', ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'sk-test', ANTHROPIC_MODEL: 'test-model', LLM_MAX_RETRIES: '0', LLM_PRICES: PRICES, ...extra }
}

async function sse (app: FastifyInstance, body: unknown): Promise<StreamPacket[]> {
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: body as Record<string, unknown> })
  t.equal(res.statusCode, 200)
  return parseSse(res.body).packets
}

const deltas = (packets: StreamPacket[]): string[] => packets.filter((p) => p.op === 'DELTA').map((p) => p.p as string)
const events = (packets: StreamPacket[], type: string): Array<Record<string, unknown>> =>
  packets.filter((p) => p.op === 'EVENT' && (p.p as { type: string }).type === type).map((p) => p.p as Record<string, unknown>)
const errors = (packets: StreamPacket[]): Array<Record<string, unknown>> => packets.filter((p) => p.op === 'ERROR').map((p) => p.p as Record<string, unknown>)

t.test('OpenAI-compatible: text streams as DELTAs in order; usage and cost reach the metrics', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: openai.text(['Hello', ', ', 'wörld', ' 🌍'], [12, 4]) })
  const app = await build(t, openAiEnv(fake))
  const packets = await sse(app, envelope(LLM_CHAT, { query: 'hi', system: 'Be brief.' }))
  t.same(deltas(packets), ['Hello', ', ', 'wörld', ' 🌍'])
  t.same(events(packets, 'USAGE'), [{ type: 'USAGE', data: { input_tokens: 12, output_tokens: 4, cost: (12 * 2 + 4 * 10) / 1e6 } }])
  const sent = fake.received[0]
  t.equal(sent?.url, '/v1/chat/completions')
  t.match(sent?.headers.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/, 'the trace goes upstream')
  t.match(sent?.body, { model: 'test-model', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }] })
  t.same((sent?.body.tools as Array<{ function: { name: string } }>).map((x) => x.function.name), ['current_time', 'word_count'])

  fake.script({ frames: openai.text(['again'], [20, 1]) })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(LLM_CHAT, { query: 'once more' }) })
  const body = checkServiceResponse(res.json(), true)
  t.match(body.metrics, { usage: { input_tokens: 20, output_tokens: 1 }, cost: (20 * 2 + 10) / 1e6 })
  t.equal((body.output as { text: string }).text, 'again')

  const listed = (await app.inject({ url: '/v1/backends' })).json().backends as Array<Record<string, unknown>>
  t.match(listed.find((b) => b.name === 'openai'), { aliases: ['llm'], transport: 'llm', available: true, provider: 'openai', model: 'test-model', usage: { input: 32, output: 5, turns: 2, sessions: 2 } })
})

t.test('OpenAI-compatible: tool calls run with the agent\'s tools and their results go back to the model', async (t) => {
  const fake = await fakeProvider(t)
  const call = (delta: Record<string, unknown>): string => openai.chunk({ tool_calls: [delta] })
  fake.script(
    { frames: [call({ index: 0, id: 'call_1', type: 'function', function: { name: 'word_count', arguments: '' } }), call({ index: 0, function: { arguments: '{"text": "one ' } }), call({ index: 0, function: { arguments: 'two three"}' } }), openai.finish('tool_calls'), openai.usage(30, 8), openai.done] },
    { frames: openai.text(['That is ', '3 words.'], [50, 4]) }
  )
  const app = await build(t, openAiEnv(fake))
  const packets = await sse(app, envelope(LLM_CHAT, { query: 'how many words in "one two three"?' }))
  t.same(deltas(packets), ['That is ', '3 words.'])
  t.same(events(packets, 'PROGRESS_INDICATOR').map((e) => (e.data as { status: string }).status), ['running', 'complete'])
  t.same(events(packets, 'USAGE').map((e) => e.data), [{ input_tokens: 30, output_tokens: 8, cost: (30 * 2 + 80) / 1e6 }, { input_tokens: 50, output_tokens: 4, cost: (100 + 40) / 1e6 }])
  const second = fake.received[1]?.body.messages as Array<Record<string, unknown>>
  t.match(second.slice(-2), [
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'word_count', arguments: '{"text":"one two three"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '3' }
  ])
})

t.test('OpenAI-compatible: the tool loop stops at LLM_MAX_TURNS; an unknown tool gets an error result', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: [openai.chunk({ tool_calls: [{ index: 0, id: 'c', function: { name: 'no_such_tool', arguments: '{}' } }, { index: 1, id: 'd', function: { name: 'current_time', arguments: '' } }] }), openai.finish('tool_calls'), openai.done] })
  const app = await build(t, openAiEnv(fake, { LLM_MAX_TURNS: '3' }))
  const packets = await sse(app, envelope(LLM_CHAT, { query: 'loop' }))
  t.equal(fake.received.length, 3, 'three model calls, then the loop is cut off')
  t.match((fake.received[1]?.body.messages as unknown[]).slice(-2), [{ role: 'tool', tool_call_id: 'c', content: 'Unknown tool "no_such_tool"' }, { role: 'tool', tool_call_id: 'd', content: /^\d{4}-\d\d-\d\dT/ }])
  t.equal(errors(packets).length, 0)
  t.equal(packets.at(-1)?.p, 'done')
})

t.test('Anthropic: text, thinking and tool_use stream; tool results go back as tool_result blocks', async (t) => {
  const fake = await fakeProvider(t)
  const ev = anthropic.event
  fake.script(
    {
      frames: [
        anthropic.start(40),
        ev('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '' } }),
        ev('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'The user wants ' } }),
        ev('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'a count.' } }),
        ev('content_block_stop', { index: 0 }),
        ev('content_block_start', { index: 1, content_block: { type: 'tool_use', id: 'toolu_1', name: 'word_count', input: {} } }),
        ev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: '{"text": "a b' } }),
        ev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: '"}' } }),
        ev('content_block_stop', { index: 1 }),
        ev('message_delta', { delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 9 } }),
        ev('message_stop', {})
      ]
    },
    { frames: anthropic.text(['Two', ' words.'], [60, 3]) }
  )
  const app = await build(t, anthropicEnv(fake))
  const packets = await sse(app, envelope(LLM_CHAT, { query: 'count "a b"', system: 'You count.' }))
  t.same(deltas(packets), ['Two', ' words.'])
  t.same(events(packets, 'THOUGHT_TRACE').map((e) => (e.data as { thought: string }).thought), ['The user wants a count.'])
  t.same(events(packets, 'USAGE').map((e) => e.data), [{ input_tokens: 40, output_tokens: 9, cost: (80 + 90) / 1e6 }, { input_tokens: 60, output_tokens: 3, cost: (120 + 30) / 1e6 }])
  const first = fake.received[0]
  t.equal(first?.url, '/v1/messages')
  t.equal(first?.headers.authorization, 'Bearer sk-test', 'the key is sent')
  t.match(first?.body, { model: 'test-model', stream: true, system: 'You count.', messages: [{ role: 'user', content: [{ type: 'text', text: 'count "a b"' }] }] })
  t.same((first?.body.tools as Array<{ name: string }>).map((x) => x.name), ['current_time', 'word_count'])
  t.match((fake.received[1]?.body.messages as unknown[]).slice(-2), [
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'word_count', input: { text: 'a b' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '2' }] }
  ])
})

// the default was claude-sonnet-4-5, which the SDK warned (on every call, in every log) reaches its end
// of life on 30 November 2026: a deployment that kept the default would then fail every call
t.test('Anthropic with the default model: a model the SDK knows and does not call deprecated', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: anthropic.text(['Hi.'], [5, 1]) })
  const { ANTHROPIC_MODEL: _model, ...env } = anthropicEnv(fake)
  const app = await build(t, env)
  const warned: string[] = []
  const warn = console.warn
  console.warn = (...args: unknown[]) => { warned.push(args.map(String).join(' ')) }
  try {
    t.same(deltas(await sse(app, envelope(LLM_CHAT, { query: 'hello' }))), ['Hi.'])
  } finally {
    console.warn = warn
  }
  const model = fake.received[0]?.body.model
  t.equal(model, testConfig(t).ANTHROPIC_MODEL, 'the default model is sent')
  t.same(warned.filter((line) => /deprecated/i.test(line)), [], 'no deprecation warning')
})

t.test('a provider error mid-stream ends the answer with a backend_failed ERROR', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: [...anthropic.text(['partial']).slice(0, 3), anthropic.event('error', { error: { type: 'overloaded_error', message: 'Overloaded' } })] })
  const app = await build(t, anthropicEnv(fake))
  const packets = await sse(app, envelope(LLM_CHAT, { query: 'hi' }))
  t.same(deltas(packets), [])
  t.match(errors(packets), [{ code: 'backend_failed', severity: 'TRANSIENT', message: /Overloaded/ }])
  t.equal(packets.at(-1)?.p, 'aborted')

  fake.script({ frames: [openai.chunk({ content: 'so far' }), `data: ${JSON.stringify({ error: { message: 'context length exceeded', type: 'invalid_request_error' } })}\n\n`] })
  const app2 = await build(t, openAiEnv(fake))
  const p2 = await sse(app2, envelope(LLM_CHAT, { query: 'hi' }))
  t.same(deltas(p2), ['so far'])
  t.match(errors(p2), [{ code: 'stream_aborted' }, { code: 'backend_failed', severity: 'FATAL', message: /context length exceeded/ }])
})

t.test('provider statuses: 401 is FATAL, 429 and 5xx are TRANSIENT, a cut stream is TRANSIENT', async (t) => {
  const fake = await fakeProvider(t)
  const app = await build(t, openAiEnv(fake))
  for (const [status, severity] of [[401, 'FATAL'], [429, 'TRANSIENT'], [503, 'TRANSIENT']] as const) {
    fake.script({ status, json: { error: { message: `status ${status}`, type: 'x' } } })
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(LLM_CHAT, { query: 'hi' }) })
    t.equal(res.statusCode, 502, 'JSON mode: nothing produced, so 502')
    t.match(checkErrorBody(res.json()).details, { error: { code: 'backend_failed', severity, details: { status } } })
  }
  fake.script({ frames: [openai.chunk({ content: 'half' })] })
  const packets = await sse(app, envelope(LLM_CHAT, { query: 'hi' }))
  t.match(errors(packets).at(-1), { code: 'backend_failed', severity: 'TRANSIENT', message: /ended before the response was complete/ })
})

t.test('a provider that stalls hits LLM_TIMEOUT_MS with a TRANSIENT backend_timeout', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: [openai.chunk({ content: 'thinking...' })], stall: true })
  const app = await build(t, openAiEnv(fake, { LLM_TIMEOUT_MS: '300' }))
  const started = Date.now()
  const packets = await sse(app, envelope(LLM_CHAT, { query: 'hi' }))
  const took = Date.now() - started
  t.ok(took >= 290 && took < 3000, `ended after ${took} ms`)
  t.same(deltas(packets), ['thinking...'])
  t.match(errors(packets).at(-1), { code: 'backend_timeout', severity: 'TRANSIENT', details: { timeout_ms: 300 } })
  await fake.received[0]?.aborted
  t.ok(fake.received[0]?.wasAborted, 'the upstream request was closed')

  fake.script({ frames: [{ pauseMs: 5000 }], stall: true })
  const before = await sse(app, envelope(LLM_CHAT, { query: 'hi' }))
  t.match(errors(before).at(-1), { code: 'backend_timeout' }, 'silence before the first byte counts too')
})

t.test('a client disconnect (on_disconnect cancel) and a cancel abort the upstream request within 1 s', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: [openai.chunk({ content: 'streaming' })], stall: true })
  const { url, app } = await listen(t, openAiEnv(fake))
  const body = envelope(LLM_CHAT, { query: 'hi' }, { agentRequest: { metadata: { on_disconnect: 'cancel' } } })
  const payload = JSON.stringify(body)
  let text = ''
  const req = request(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' } }, (res) => {
    res.on('data', (c: Buffer) => { text += c.toString() })
    res.on('error', () => {})
  })
  req.on('error', () => {})
  req.end(payload)
  while (!text.includes('"DELTA"')) await sleep(5)
  const cut = Date.now()
  req.destroy()
  await fake.received[0]?.aborted
  t.ok(Date.now() - cut < 1000, `upstream closed ${Date.now() - cut} ms after the client left`)

  const second = envelope(LLM_CHAT, { query: 'hi' })
  const run = app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: second })
  while (fake.received.length < 2) await sleep(5)
  await sleep(50)
  const cancelled = Date.now()
  t.equal((await app.inject({ method: 'POST', url: `/v1/assist/${second.request_id}/cancel` })).statusCode, 202)
  await fake.received[1]?.aborted
  t.ok(Date.now() - cancelled < 1000, 'cancel closed the upstream request')
  t.equal(parseSse((await run).body).packets.at(-1)?.p, 'cancelled')
})

t.test('shutdown aborts the upstream request', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: [openai.chunk({ content: 'streaming' })], stall: true })
  const app = await build(t, openAiEnv(fake))
  const run = app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(LLM_CHAT, { query: 'hi' }) })
  while (fake.received.length < 1) await sleep(5)
  await sleep(50)
  const closing = Date.now()
  await app.close()
  await fake.received[0]?.aborted
  t.ok(Date.now() - closing < 1000, 'the upstream request was closed on shutdown')
  const packets = parseSse((await run).body).packets
  t.match(errors(packets).at(-1), { code: 'shutting_down', severity: 'TRANSIENT' })
})

t.test('no provider configured: the server starts and llm-chat answers 503 AH_ERR_BACKEND_UNAVAILABLE', async (t) => {
  const app = await build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(LLM_CHAT, { query: 'hi' }) })
  t.equal(res.statusCode, 503)
  const body = checkErrorBody(res.json())
  t.equal(body.code, 'AH_ERR_BACKEND_UNAVAILABLE')
  t.match(body.message, /OPENAI_API_KEY.*OPENAI_BASE_URL/)
  const sseRes = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(LLM_CHAT, { query: 'hi' }) })
  t.equal(sseRes.statusCode, 503, 'SSE too: refused before the stream starts')
  const anth = await build(t, { LLM_PROVIDER: 'anthropic' })
  t.match((await anth.inject({ method: 'POST', url: '/v1/assist', payload: envelope(LLM_CHAT, { query: 'hi' }) })).json().message, /ANTHROPIC_API_KEY/)
  const listed = (await app.inject({ url: '/v1/backends' })).json().backends as Array<Record<string, unknown>>
  t.match(listed.find((b) => b.name === 'openai'), { available: false, reason: /OPENAI_API_KEY/ })
  t.match(listed.find((b) => b.name === 'anthropic'), { available: false, reason: /ANTHROPIC_API_KEY/, aliases: [] })
})

t.test('the conversation persists in the session and resumes after a restart', async (t) => {
  const fake = await fakeProvider(t)
  const config = testConfig(t, openAiEnv(fake))
  const sessionId = '0b7e1c9a-2f4d-4e8b-9c3a-5d6e7f8a9b0c'
  fake.script({ frames: openai.text(['Nice to meet you, Ada.']) })
  const first = await buildApp(config)
  await first.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(LLM_CHAT, { query: 'I am Ada.', system: 'Remember names.' }, { sessionId }) })
  await first.close()

  fake.script({ frames: openai.text(['You are Ada.']) })
  const second = await buildApp(config)
  t.teardown(() => second.close())
  await second.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(LLM_CHAT, { query: 'Who am I?' }, { sessionId }) })
  t.same(fake.received[1]?.body.messages, [
    { role: 'system', content: 'Remember names.' },
    { role: 'user', content: 'I am Ada.' },
    { role: 'assistant', content: 'Nice to meet you, Ada.' },
    { role: 'user', content: 'Who am I?' }
  ])
})

t.test('parseStream gives the same events however a recorded provider stream is split', async (t) => {
  const { LlmProtocol } = await import('../../src/backends/llm/llm-protocol.js')
  const { OpenAiTransport } = await import('../../src/backends/llm/openai.js')
  const { ParseState } = await import('../../src/backends/protocol.js')
  const protocol = new LlmProtocol({ name: 'p', transport: new OpenAiTransport({ baseUrl: '', apiKey: '', model: 'm', maxTokens: 1, maxRetries: 0, timeoutMs: 1000 }), prices: {}, timeoutMs: 1000, maxTurns: 1 })
  const recordings = {
    openai: [': keep-alive\n\n', ...openai.text(['naïve ', 'café ', '日本 ', '🌍'], [3, 4]).map((f) => f.replace(/\n/g, '\r\n'))].join(''),
    anthropic: [...anthropic.text(['Grüße ', '🌍'], [5, 2]), 'retry: 100\nid: 7\n\n'].join('')
  }
  for (const [name, text] of Object.entries(recordings)) {
    const recorded = Buffer.from(text)
    const run = (parts: Buffer[]): unknown[] => {
      const state = new ParseState()
      const out = parts.flatMap((p) => protocol.parseStream(p, state))
      return [...out, ...protocol.parseStream(null, state)].filter((r) => r.type !== 'partial')
    }
    const whole = run([recorded])
    t.ok(whole.filter((r) => (r as { type: string }).type === 'message').length >= 6, `${name}: the events`)
    t.equal((whole.at(-1) as { type: string }).type, 'eof', `${name}: ends with eof`)
    let same = 0
    for (let cut = 0; cut <= recorded.length; cut++) {
      if (JSON.stringify(run([recorded.subarray(0, cut), recorded.subarray(cut)])) === JSON.stringify(whole)) same++
    }
    t.equal(same, recorded.length + 1, `${name}: split in two at every byte boundary`)
    t.same(run([...recorded].map((b) => Buffer.from([b]))), whole, `${name}: one byte at a time`)
  }
  t.match(protocol.parseStream('data: {not json}\n\n', new ParseState()), [{ type: 'error', error: /unparsable event data/ }])
  t.match(protocol.parseStream('data: [1]\n\n', new ParseState()), [{ type: 'error' }])
  t.same(protocol.parseStream('data: {"a":', new ParseState()), [{ type: 'partial' }])
  const unterminated = new ParseState()
  t.same(protocol.parseStream('data: {"a":1}', unterminated), [{ type: 'partial' }])
  t.same(protocol.parseStream(null, unterminated), [{ type: 'message', message: { data: { a: 1 } } }], 'the end of input completes the last event')
  t.same(protocol.formatMessages([{ role: 'user', content: 'x' }]), [{ role: 'user', content: 'x' }])
  t.equal(protocol.getUsage('nope'), null)
  t.equal(await protocol.available(), false)
  t.equal(protocol.transportType(), 'llm')
})
