import t from 'tap'
import { fileURLToPath } from 'node:url'
import { EventSourceParserStream, type EventSourceMessage } from 'eventsource-parser/stream'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import {
  CreateMessageRequestSchema, CreateTaskResultSchema, type CallToolResult, type ClientCapabilities, type CreateMessageRequest, type CreateMessageResult, type CreateMessageResultWithTools
} from '@modelcontextprotocol/sdk/types.js'
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node'
import { buildApp } from '../../src/app.js'
import { META_REQUEST_ID, META_SESSION_ID } from '../../src/mcp/call-result.js'
import { DEFAULT_MAX_TOKENS, samplingAnswer, samplingMessages } from '../../src/mcp/sampling.js'
import { envelope, listen, sqliteRuns, testConfig, type Teardown } from '../helper.js'
import { checkErrorBody } from '../sse.js'
import { until } from '../socket.js'
import { connect, post } from './client.js'

const SAMPLING_AGENTS = fileURLToPath(new URL('../fixtures/sampling-agents/', import.meta.url))
const CLIENT_MODEL = 'f0000000-0000-4000-8000-0000000005a1'

type Params = CreateMessageRequest['params']
type Answer = (params: Params, signal: AbortSignal) => CreateMessageResult | CreateMessageResultWithTools | Promise<CreateMessageResult | CreateMessageResultWithTools>

/** An SDK MCP client that declared `capabilities` (sampling by default), answering `sampling/createMessage` with `answer`; what it was asked, in order. */
async function samplingClient (t: Teardown, url: string, answer: Answer, capabilities: ClientCapabilities = { sampling: {} }): Promise<{ client: Client, asked: Params[] }> {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 }
  })
  const client = new Client({ name: 'agent-host-tests', version: '1.0.0' }, { capabilities })
  const asked: Params[] = []
  client.setRequestHandler(CreateMessageRequestSchema, async (request, extra) => {
    asked.push(request.params)
    return await answer(request.params, extra.signal)
  })
  t.teardown(async () => { await client.close() })
  await client.connect(transport)
  return { client, asked }
}

/** The CAP run and session a tool result names. */
function runOf (result: unknown): { requestId: string, sessionId: string } {
  const meta = (result as CallToolResult)._meta as Record<string, string>
  return { requestId: meta[META_REQUEST_ID] as string, sessionId: meta[META_SESSION_ID] as string }
}

/** The text contents of a tool result. */
function texts (result: unknown): string[] {
  return (result as CallToolResult).content.map((c) => (c as { text: string }).text)
}

const said = (text: string, model = 'client-llm-1'): CreateMessageResult => ({ model, role: 'assistant', content: { type: 'text', text }, stopReason: 'endTurn' })

t.test('sampling through the SDK client\'s createMessage handler: it gets the agent\'s prompt and system prompt, and its answer is the tool\'s result, streamed, recorded and traced', async (t) => {
  const exporter = new InMemorySpanExporter()
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  t.teardown(async () => { await provider.shutdown() })
  const app = await buildApp(testConfig(t, { AGENTS_DIR: SAMPLING_AGENTS }), { tracerProvider: provider })
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
  const { client, asked } = await samplingClient(t, url, () => said('Bonjour.'))

  const result = await client.callTool({ name: 'client-model', arguments: { prompt: 'Say hello in French.', system: 'Be brief.', maxTokens: 64, model: 'small' } })
  t.notOk(result.isError, texts(result).join('\n'))
  t.same(asked, [{
    messages: [{ role: 'user', content: { type: 'text', text: 'Say hello in French.' } }],
    systemPrompt: 'Be brief.',
    maxTokens: 64,
    modelPreferences: { hints: [{ name: 'small' }] }
  }], 'the prompt as a user message, the system prompt, the token limit and the model asked for as a hint; no tools')
  t.equal(texts(result)[0], 'Bonjour.', 'the model\'s text, as the agent streamed it')
  t.same(result.structuredContent, { text: 'Bonjour.', model: 'client-llm-1', stopReason: 'endTurn', usage: null, toolCalls: [] }, 'the client\'s model and stop reason; no usage (MCP reports none)')

  const { requestId, sessionId } = runOf(result)
  const frames = sqliteRuns(app).rows(requestId).map((row) => JSON.parse(row.frame) as { op: string, p: unknown })
  t.ok(frames.some((f) => f.op === 'DELTA' && f.p === 'Bonjour.'), 'the answer is in the run\'s journal, as one DELTA')
  t.match(await app.sessions.history(sessionId, 10, 0), [{ request_id: requestId, status: 'done', output: { text: 'Bonjour.', model: 'client-llm-1' } }], 'and in the session\'s history')
  await until('the run\'s span ended', () => exporter.getFinishedSpans().some((s) => s.name === 'assist.run'))
  const run = exporter.getFinishedSpans().find((s) => s.name === 'assist.run')
  const call = exporter.getFinishedSpans().find((s) => s.name === 'backend.call')
  t.match(call?.attributes, { 'agent_host.backend.name': 'mcp-sampling', 'agent_host.backend.transport': 'llm', 'gen_ai.request.model': 'client-llm-1', 'gen_ai.provider.name': 'mcp-sampling' }, 'the backend call is traced as any')
  t.equal(call?.parentSpanContext?.spanId, run?.spanContext().spanId, 'under the run\'s span')

  const defaults = await client.callTool({ name: 'client-model', arguments: { prompt: 'Again.' } })
  t.notOk(defaults.isError)
  t.same(asked[1], { messages: [{ role: 'user', content: { type: 'text', text: 'Again.' } }], maxTokens: DEFAULT_MAX_TOKENS }, 'without a system prompt, a model or a limit: the default limit only')
})

t.test('the sampling request goes on the tools/call\'s own SSE stream, and the answer POSTed back finishes the call', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: SAMPLING_AGENTS })
  const init = await post(url, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: { sampling: {} }, clientInfo: { name: 'raw', version: '1' } } })
  const headers = { 'mcp-session-id': init.headers.get('mcp-session-id') as string }
  await init.text()
  await (await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers)).text()

  const call = await post(url, { jsonrpc: '2.0', id: 'call-1', method: 'tools/call', params: { name: 'client-model', arguments: { prompt: 'raw' } } }, headers)
  t.match(call.headers.get('content-type'), /^text\/event-stream/)
  const reader = (call.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream()).getReader()
  const next = async (): Promise<{ id?: string | number, method?: string, params?: Params, result?: CallToolResult }> => {
    for (;;) {
      const { value, done } = await reader.read()
      if (done) throw new Error('the tools/call stream ended')
      if ((value as EventSourceMessage).data !== '') return JSON.parse((value as EventSourceMessage).data) as never
    }
  }
  let message = await next()
  while (message.method !== 'sampling/createMessage') message = await next()
  t.same(message.params?.messages, [{ role: 'user', content: { type: 'text', text: 'raw' } }], 'the request came on the call\'s stream')
  const answered = await post(url, { jsonrpc: '2.0', id: message.id, result: said('from the raw client') }, headers)
  t.equal(answered.status, 202)
  while (message.id !== 'call-1') message = await next()
  t.equal(message.result?.isError, undefined)
  t.equal((message.result?.content[0] as { text: string }).text, 'from the raw client')
  await reader.cancel()
})

t.test('a client without sampling is refused before the run starts, as is a run started any other way: AH_ERR_BACKEND_UNAVAILABLE saying why', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: SAMPLING_AGENTS })
  const { client } = await connect(t, url)
  const result = await client.callTool({ name: 'client-model', arguments: { prompt: 'hello' } })
  t.equal(result.isError, true)
  t.match(texts(result), [/^AH_ERR_BACKEND_UNAVAILABLE: .*mcp-sampling is the calling MCP client's model, and this client did not declare the `sampling` capability/])
  t.same(await app.sessions.history(runOf(result).sessionId, 10, 0), [], 'no run was started')

  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(CLIENT_MODEL, { prompt: 'hello' }) })
  t.equal(res.statusCode, 503)
  t.match(checkErrorBody(res.json()), { code: 'AH_ERR_BACKEND_UNAVAILABLE', message: /mcp-sampling is the calling MCP client's model: a run has it only when an MCP tools\/call starts it, from a client that declared the `sampling` capability/ })

  // a task's run goes on without its call's stream, where the client would be asked
  const sampler = await samplingClient(t, url, () => ({ role: 'assistant', content: { type: 'text', text: 'never' }, model: 'm' }))
  await t.rejects(sampler.client.request({ method: 'tools/call', params: { name: 'client-model', arguments: { prompt: 'hello' }, task: {} } }, CreateTaskResultSchema),
    /not as a task \(a task's run has no call stream to ask on\)/, 'nor as a task, saying why')
})

t.test('a client whose handler throws (its user declined) fails the run cleanly: the tool result is an error with the client\'s message', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: SAMPLING_AGENTS })
  const { client } = await samplingClient(t, url, () => { throw new Error('The user declined to sample') })
  const result = await client.callTool({ name: 'client-model', arguments: { prompt: 'hello' } })
  t.equal(result.isError, true)
  t.match(texts(result).at(-1), /^backend_failed: The MCP client refused to sample its model: The user declined to sample$/)
  const { sessionId } = runOf(result)
  t.match(await app.sessions.history(sessionId, 10, 0), [{ status: 'aborted' }], 'the run ended, recorded')
})

for (const signal of [true, false]) {
  t.test(`cancelling the tools/call while the client is asked aborts the sampling request and cancels the run (${signal ? 'the agent passes its signal' : 'the agent passes none: the call\'s own'})`, async (t) => {
    const { app, url } = await listen(t, { AGENTS_DIR: SAMPLING_AGENTS })
    const aborted: unknown[] = []
    const { client, asked } = await samplingClient(t, url, async (_params, abort) => await new Promise((_resolve, reject) => {
      abort.addEventListener('abort', () => { aborted.push(abort.reason); reject(new Error('cancelled')) }, { once: true })
    }))
    const controller = new AbortController()
    const call = client.callTool({ name: 'client-model', arguments: { prompt: 'take your time', signal } }, undefined, { signal: controller.signal })
    await until('the client is asked', () => asked.length === 1)
    controller.abort('the user changed their mind')
    await t.rejects(call, /changed their mind|abort/i, 'the client gives up the call')
    const runs = (): Array<{ state: string, end_reason: string | null }> => sqliteRuns(app).list({ agentId: CLIENT_MODEL }, { limit: 10 }).runs
    await until('the run ended', () => runs()[0]?.state === 'ended')
    t.match(runs(), [{ end_reason: 'cancelled' }], 'one run, cancelled')
    await until('the client\'s handler is told the sampling request was cancelled', () => aborted.length === 1)
  })
}

t.test('tools: with a client that takes sampling tools, the model\'s tool calls run and their results go back; a client without them is asked without the tools', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: SAMPLING_AGENTS })
  const answers: Array<CreateMessageResult | CreateMessageResultWithTools> = [
    { model: 'm', role: 'assistant', content: [{ type: 'text', text: 'Let me shout. ' }, { type: 'tool_use', id: 'c1', name: 'shout', input: { text: 'hi' } }], stopReason: 'toolUse' },
    said('Done: HI')
  ]
  const { client, asked } = await samplingClient(t, url, () => answers.shift() as CreateMessageResult, { sampling: { tools: {} } })
  const result = await client.callTool({ name: 'client-model', arguments: { prompt: 'Shout hi.', tools: true } })
  t.notOk(result.isError, texts(result).join('\n'))
  t.match(asked[0]?.tools, [{ name: 'shout', description: 'Upper-case a text', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }])
  t.same(asked[1]?.messages, [
    { role: 'user', content: { type: 'text', text: 'Shout hi.' } },
    { role: 'assistant', content: [{ type: 'text', text: 'Let me shout. ' }, { type: 'tool_use', id: 'c1', name: 'shout', input: { text: 'hi' } }] },
    { role: 'user', content: [{ type: 'tool_result', toolUseId: 'c1', content: [{ type: 'text', text: 'HI' }] }] }
  ], 'the call and its result go back to the model')
  t.match(result.structuredContent, { text: 'Done: HI', stopReason: 'endTurn', toolCalls: ['shout'] })
  t.match(texts(result)[0], /^Let me shout\. [\s\S]*Done: HI$/, 'both answers were streamed')

  const plain = await samplingClient(t, url, () => said('no tools here'))
  const untooled = await plain.client.callTool({ name: 'client-model', arguments: { prompt: 'Shout hi.', tools: true } })
  t.notOk(untooled.isError)
  t.equal(plain.asked[0]?.tools, undefined, 'the tools are not offered to a client that did not declare sampling.tools')
})

t.test('a conversation goes on across the tool calls of one MCP session (history in the CAP session)', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: SAMPLING_AGENTS })
  const { client, asked } = await samplingClient(t, url, (params) => params.messages.length === 1 ? said('Hello, Ada.') : said('Your name is Ada.'))
  t.notOk((await client.callTool({ name: 'client-model', arguments: { prompt: 'I am Ada.', system: 'Be kind.', remember: true } })).isError)
  const second = await client.callTool({ name: 'client-model', arguments: { prompt: 'What is my name?', remember: true } })
  t.equal(texts(second)[0], 'Your name is Ada.')
  t.same(asked[1], {
    messages: [
      { role: 'user', content: { type: 'text', text: 'I am Ada.' } },
      { role: 'assistant', content: { type: 'text', text: 'Hello, Ada.' } },
      { role: 'user', content: { type: 'text', text: 'What is my name?' } }
    ],
    systemPrompt: 'Be kind.',
    maxTokens: DEFAULT_MAX_TOKENS
  }, 'the second call\'s run (a new backend instance) read the first exchange and the system prompt from the session')
})

t.test('samplingMessages: system messages join the system prompt; tool calls are blocks only for a client with tools and when every call has its answer, words otherwise', async (t) => {
  const call = { id: 'c1', name: 'shout', arguments: { text: 'hi' } }
  const exchange = [
    { role: 'user' as const, content: 'Shout hi.' },
    { role: 'assistant' as const, content: '', toolCalls: [call] },
    { role: 'tool' as const, toolCallId: 'c1', content: 'HI' }
  ]
  t.same(samplingMessages([{ role: 'system', content: 'And be brief.' }, { role: 'user', content: 'hi' }], false, 'Be kind.'), {
    systemPrompt: 'Be kind.\n\nAnd be brief.',
    messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }]
  })
  t.same(samplingMessages(exchange, true).messages.slice(1), [
    { role: 'assistant', content: [{ type: 'tool_use', id: 'c1', name: 'shout', input: { text: 'hi' } }] },
    { role: 'user', content: [{ type: 'tool_result', toolUseId: 'c1', content: [{ type: 'text', text: 'HI' }] }] }
  ], 'with tools: blocks, no empty text block')
  t.same(samplingMessages(exchange, false).messages.slice(1), [
    { role: 'assistant', content: { type: 'text', text: '[called the tool shout with {"text":"hi"}]' } },
    { role: 'user', content: { type: 'text', text: '[the tool shout answered: HI]' } }
  ], 'without tools: the same in words')
  t.same(samplingMessages([{ role: 'assistant', content: 'Let me see.', toolCalls: [call] }, { role: 'user', content: 'Never mind.' }], true).messages, [
    { role: 'assistant', content: { type: 'text', text: 'Let me see.\n[called the tool shout with {"text":"hi"}]' } },
    { role: 'user', content: { type: 'text', text: 'Never mind.' } }
  ], 'a call cut off (no answer) is said in words: a tool_use block would need its result next')
  t.same(samplingMessages([{ role: 'tool', toolCallId: 'lost', content: '42' }, { role: 'user', content: 'So?' }], true).messages, [
    { role: 'user', content: { type: 'text', text: '[a tool answered: 42]' } },
    { role: 'user', content: { type: 'text', text: 'So?' } }
  ], 'a result whose call the kept history lost is said in words')
})

t.test('samplingAnswer: text blocks are the content, tool_use blocks the tool calls, other content is named as ignored', async (t) => {
  t.same(samplingAnswer(said('plain')), { content: 'plain', toolCalls: [], ignored: [] })
  t.same(samplingAnswer({
    model: 'm',
    role: 'assistant',
    content: [{ type: 'text', text: 'a' }, { type: 'image', data: 'AAAA', mimeType: 'image/png' }, { type: 'text', text: 'b' }, { type: 'tool_use', id: 'c', name: 'n', input: { x: 1 } }]
  }), { content: 'ab', toolCalls: [{ id: 'c', name: 'n', arguments: { x: 1 } }], ignored: ['image'] })
})
