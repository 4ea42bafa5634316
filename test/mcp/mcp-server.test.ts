import t from 'tap'
import { McpError, type CallToolResult, type Progress } from '@modelcontextprotocol/sdk/types.js'
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node'
import { buildApp } from '../../src/app.js'
import pkg from '../../package.json' with { type: 'json' }
import { META_REQUEST_ID, META_SESSION_ID } from '../../src/mcp/call-result.js'
import { observed } from '../fixtures/agents/scripted/index.js'
import { AGENTS, FIXTURE_AGENTS_DIR, listen, SCRIPTED, testConfig } from '../helper.js'
import { until } from '../socket.js'
import { connect, post } from './client.js'

/** The CAP ids a tool result names in its `_meta`. */
function runOf (result: unknown): { requestId: string, sessionId: string } {
  const meta = (result as CallToolResult)._meta as Record<string, string>
  return { requestId: meta[META_REQUEST_ID] as string, sessionId: meta[META_SESSION_ID] as string }
}

/** The text contents of a tool result. */
function texts (result: unknown): string[] {
  return ((result as CallToolResult).content).map((c) => (c as { text: string }).text)
}

t.test('initialize: the server names itself and offers tools and logging; tools/list shows every example agent with its capability\'s schemas', async (t) => {
  const { app, url } = await listen(t)
  const { client, errors } = await connect(t, url)
  t.match(client.getServerVersion(), { name: 'agent-host', version: pkg.version })
  t.match(client.getServerCapabilities(), { tools: { listChanged: false }, logging: {} })
  t.match(client.getInstructions(), /agent-host/)

  const { tools } = await client.listTools()
  const byName = new Map(tools.map((tool) => [tool.name, tool]))
  let expected = 0
  for (const { manifest } of app.agents.list()) {
    for (const capability of manifest.capabilities) {
      expected++
      const name = manifest.capabilities.length === 1 ? manifest.metadata.name : `${manifest.metadata.name}.${capability.name}`
      const tool = byName.get(name)
      if (tool === undefined) { t.fail(`${name} is listed`); continue }
      t.equal(tool.description, capability.description, `${name}: its capability's description`)
      t.same(tool.inputSchema, { ...capability.inputs, type: 'object' }, `${name}: its capability's inputs, an object at the root`)
      t.match(tool._meta, { 'agent-host/agent_id': manifest.metadata.id, 'agent-host/capability': capability.name })
    }
  }
  t.equal(tools.length, expected, 'one tool per capability, nothing else')
  t.match(byName.get('echo'), { title: 'echo', annotations: { title: 'echo' }, outputSchema: { type: 'object', required: ['echo', 'calls'] } })
  t.notOk(byName.get('echo-stream')?.outputSchema, 'a capability with the default outputs declares no outputSchema')
  t.match(byName.get('refactor.add_docstrings'), { title: 'refactor: add_docstrings', _meta: { 'agent-host/agent_id': AGENTS.refactor } })
  t.notOk(byName.get('echo')?.annotations?.readOnlyHint, 'no hint the agent did not declare')
  t.same(errors, [], 'the GET stream opened, nothing failed')
})

t.test('tools/call of echo: result() is the structuredContent (and JSON text); the calls of one MCP session share one CAP session, its memory and history', async (t) => {
  const { app, url } = await listen(t)
  const { client } = await connect(t, url)
  const first = await client.callTool({ name: 'echo', arguments: { query: 'hello' } })
  t.notOk(first.isError)
  t.same(first.structuredContent, { echo: 'hello', calls: 1 })
  t.same(first.content, [{ type: 'text', text: JSON.stringify({ echo: 'hello', calls: 1 }) }])
  const second = await client.callTool({ name: 'echo', arguments: { query: 'again' } })
  t.same(second.structuredContent, { echo: 'again', calls: 2 }, 'the session remembers the first call')
  const [a, b] = [runOf(first), runOf(second)]
  t.equal(a.sessionId, b.sessionId, 'one CAP session per MCP session')
  t.not(a.requestId, b.requestId, 'a fresh request id per call')

  const history = await app.inject({ url: `/v1/sessions/${a.sessionId}/history` })
  t.equal(history.statusCode, 200)
  t.match(history.json(), { total: 2, interactions: [{ request_id: a.requestId, status: 'done', output: { echo: 'hello' } }, { request_id: b.requestId, status: 'done' }] })
  t.match(await app.audit.list({ action: 'assist', limit: 10 }), [{ actor: 'anonymous', request_id: a.requestId, success: true }, { request_id: b.requestId }], 'audited as any run')

  const other = await connect(t, url)
  t.match((await other.client.callTool({ name: 'echo', arguments: { query: 'x' } })).structuredContent, { calls: 1 }, 'another MCP session is another CAP session')
})

t.test('tools/call of a streaming agent: its stream\'s text is the result\'s text, its thought a logging notification', async (t) => {
  const { url } = await listen(t)
  const { client, logs } = await connect(t, url)
  const result = await client.callTool({ name: 'echo-stream', arguments: { query: 'stream me please', delay_ms: 0 } })
  t.notOk(result.isError)
  t.same(result.content, [{ type: 'text', text: 'stream me please ' }])
  t.notOk(result.structuredContent, 'no result(): no structured content')
  t.match(logs, [{ level: 'info', logger: 'echo-stream', data: { thought: 'Processing request...', status: 'IN_PROGRESS' } }])
})

t.test('progress packets become progress notifications for a client that sent a progressToken', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { client, logs, errors } = await connect(t, url)
  const script = [
    { op: 'progress', label: 'reading', percent: 0.25 },
    { op: 'progress', label: 'no figure' },
    { op: 'progress', label: 'half', percent: 0.5 },
    { op: 'progress', label: 'back', percent: 0.4, status: 'failed' },
    { op: 'progress', label: 'done', status: 'complete' },
    { op: 'markdown', content: 'ok' }
  ]
  const progress: Progress[] = []
  const result = await client.callTool({ name: 'scripted', arguments: { script } }, undefined, { onprogress: (p) => { progress.push(p) } })
  t.same(texts(result), ['ok'])
  t.same(progress, [
    { progress: 25, total: 100, message: 'reading' },
    { progress: 50, total: 100, message: 'half' },
    { progress: 100, total: 100, message: 'done' }
  ], 'each advance of percent, on a 0-100 scale')
  t.match(logs, [{ level: 'info', data: { progress: 'no figure', status: 'running' } }, { level: 'warning', data: { progress: 'back', status: 'failed' } }], 'a step that does not advance is a log line')

  await client.callTool({ name: 'scripted', arguments: { script } })
  t.same(errors, [], 'without a progressToken no progress notification is sent (the client would report one it cannot place)')
})

t.test('logging: thoughts, the agent\'s log() lines and warnings become notifications/message at or above the level the client set', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { client, logs } = await connect(t, url)
  const script = [
    { op: 'thought', content: 'thinking' },
    { op: 'log', level: 'debug', message: 'dbg' },
    { op: 'log', level: 'warn', message: 'careful' },
    { op: 'error', message: 'oops', recoverable: true },
    { op: 'markdown', content: 'x' }
  ]
  await client.callTool({ name: 'scripted', arguments: { script } })
  t.same(logs.map((l) => l.level).sort(), ['info', 'warning', 'warning'], 'by default: info and up')
  t.match(logs.find((l) => l.level === 'info'), { logger: 'scripted', data: { thought: 'thinking' } })
  t.ok(logs.some((l) => l.level === 'warning' && (l.data as { message?: string }).message === 'careful'), 'the agent\'s log() line')
  t.ok(logs.some((l) => l.level === 'warning' && (l.data as { error?: string }).error === 'agent_error'), 'a WARNING error packet')

  logs.length = 0
  await client.setLoggingLevel('debug')
  await client.callTool({ name: 'scripted', arguments: { script } })
  t.match(logs.find((l) => l.level === 'debug'), { logger: 'scripted', data: { message: 'dbg', metadata: { step: 'log' } } }, 'debug lines once asked for')

  logs.length = 0
  await client.setLoggingLevel('error')
  await client.callTool({ name: 'scripted', arguments: { script } })
  t.same(logs, [], 'nothing under error')
})

t.test('a run that fails is an isError result with its CAP error; what it wrote before is in the text', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { client } = await connect(t, url)
  const failed = await client.callTool({ name: 'scripted', arguments: { script: [{ op: 'markdown', content: 'partial' }, { op: 'throw', message: 'it broke', safe: true }] } })
  t.equal(failed.isError, true)
  t.same(texts(failed), ['partial', 'agent_failed: it broke'])
  t.match(runOf(failed), { requestId: /^[0-9a-f-]{36}$/ }, 'it names its run')
})

t.test('invalid arguments are an isError result the model can read, and start no run', async (t) => {
  const { app, url } = await listen(t)
  const { client } = await connect(t, url)
  const wrongType = await client.callTool({ name: 'echo', arguments: { query: 5 } })
  t.equal(wrongType.isError, true)
  t.same(texts(wrongType), ['Invalid arguments: /query must be string'])
  const missing = await client.callTool({ name: 'echo', arguments: {} })
  t.equal(missing.isError, true)
  t.same(texts(missing), ['Invalid arguments: /query must have required property \'query\''])
  t.equal(await app.ledger.get(runOf(missing).requestId), undefined, 'no run')
  t.same(texts(await client.callTool({ name: 'echo' })), texts(missing), 'no arguments at all are {}')
  await t.rejects(client.callTool({ name: 'nobody', arguments: {} }), { code: -32602, message: /Unknown tool: nobody/ }, 'an unknown tool is a protocol error')
})

t.test('the per-agent rate limit counts MCP runs: past it a tool call is an isError naming AH_ERR_RATE_LIMITED', async (t) => {
  const { url } = await listen(t, { RATE_LIMIT_AGENT_MAX: '1' })
  const { client } = await connect(t, url)
  t.notOk((await client.callTool({ name: 'echo', arguments: { query: 'one' } })).isError)
  const limited = await client.callTool({ name: 'echo', arguments: { query: 'two' } })
  t.equal(limited.isError, true)
  t.match(texts(limited)[0], /^AH_ERR_RATE_LIMITED: .*agent "echo"/)
})

t.test('rich results: the showcase agent\'s sources, data and media are MCP content the SDK client accepts', async (t) => {
  const { url } = await listen(t)
  const { client } = await connect(t, url)
  // the SDK's client checks the result against MCP's schema: content it did not know would throw here
  const result = await client.callTool({ name: 'showcase', arguments: { topic: 'CAP' } }) as CallToolResult
  t.notOk(result.isError)
  t.match(result.content, [
    { type: 'text', text: /## CAP[\s\S]*Streams carry text deltas\./ },
    { type: 'resource_link', uri: 'https://example.org/cap', name: 'cap', title: 'Coreason Agent Protocol', description: 'One envelope, two delivery modes.' },
    { type: 'resource_link', uri: 'https://html.spec.whatwg.org/multipage/server-sent-events.html', name: 'sse' },
    { type: 'resource', resource: { mimeType: 'application/json', text: JSON.stringify({ topic: 'CAP', words: 1, modes: ['request_response', 'server_sent_events'] }) }, _meta: { title: 'Facts', view_hint: 'TABLE' } },
    { type: 'resource_link', uri: 'https://example.org/diagram.png', name: 'A diagram of CAP', mimeType: 'image/png' }
  ], 'the text, then the sources, the data and the media, in the order the agent made them')
})

t.test('cancellation: the client\'s notifications/cancelled aborts the run, which is recorded as cancelled', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { client } = await connect(t, url)
  const controller = new AbortController()
  const started: Progress[] = []
  const call = client.callTool({ name: 'scripted', arguments: { script: [{ op: 'progress', label: 'started', percent: 0.1 }, { op: 'wait_abort' }] } }, undefined,
    { signal: controller.signal, onprogress: (p) => { started.push(p) } })
  await until('the run started', () => started.length > 0)
  const sessionId = observed.started.at(-1) as string
  controller.abort('the user changed their mind')
  await t.rejects(call, /changed their mind|abort/i, 'the client gives up the call')
  await until('the agent was aborted', () => observed.aborts.some((a) => a.sessionId === sessionId))
  t.match(observed.aborts.find((a) => a.sessionId === sessionId)?.reason, { kind: 'cancelled' }, 'by a cancel, not a disconnect')
  await until('the run is recorded', async () => ((await app.sessions.history(sessionId, 10, 0))[0]?.status) !== undefined)
  t.match(await app.sessions.history(sessionId, 10, 0), [{ status: 'cancelled' }], 'recorded as cancelled')
  t.match(await app.audit.list({ action: 'assist.cancel', limit: 10 }), [{ actor: 'anonymous', resource: SCRIPTED, success: true }], 'the cancel is audited')
  t.notOk((await client.callTool({ name: 'scripted', arguments: { script: [{ op: 'markdown', content: 'still here' }] } })).isError, 'the session goes on')
})

// Regression (issue 35): after a notifications/cancelled the SDK answers nothing to the call (the
// specification's rule), and the call's SSE stream stayed open for ever, waiting for that answer
t.test('cancellation: the stream of a cancelled call ends; nothing is answered to it', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { transport } = await connect(t, url)
  const session = { 'mcp-session-id': transport.sessionId as string }
  const before = observed.started.length
  const response = await post(url, { jsonrpc: '2.0', id: 'cancel-me', method: 'tools/call', params: { name: 'scripted', arguments: { script: [{ op: 'wait_abort' }] } } }, session)
  t.match(response.headers.get('content-type'), /text\/event-stream/)
  let body = ''
  let ended = false
  const reading = (async () => {
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) body += Buffer.from(chunk).toString('utf8')
    ended = true
  })()
  await until('the run started', () => observed.started.length > before)
  const sessionId = observed.started.at(-1) as string
  const cancelled = await post(url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'cancel-me', reason: 'changed my mind' } }, session)
  t.equal(cancelled.status, 202)
  await until('the agent was aborted', () => observed.aborts.some((a) => a.sessionId === sessionId))
  await until('the call\'s stream ended', () => ended)
  await reading
  t.notMatch(body, /"id":"cancel-me"/, 'no answer to the cancelled call')
  t.notOk((await connect(t, url)).transport.sessionId === undefined, 'the server goes on')
})

t.test('cancellation: the HTTP request of a tool call of a client before MCP 2025-11-25 (whose stream cannot be resumed) going away cancels its run', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const old = { 'mcp-protocol-version': '2025-06-18' }
  const init = await post(url, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'old', version: '1' } } }, old)
  const sessionId = init.headers.get('mcp-session-id') as string
  t.match(await init.text(), /"protocolVersion":"2025-06-18"/, 'an older version, as the client asked')
  const before = observed.started.length
  const controller = new AbortController()
  const response = await post(url, { jsonrpc: '2.0', id: 'gone-1', method: 'tools/call', params: { name: 'scripted', arguments: { script: [{ op: 'wait_abort' }] } } },
    { 'mcp-session-id': sessionId, ...old }, controller.signal)
  t.equal(response.status, 200)
  t.match(response.headers.get('content-type'), /text\/event-stream/)
  await until('the run started', () => observed.started.length > before)
  const runSession = observed.started.at(-1) as string
  controller.abort()
  await until('the agent was aborted', () => observed.aborts.some((a) => a.sessionId === runSession))
  t.match(observed.aborts.find((a) => a.sessionId === runSession)?.reason, { kind: 'cancelled' })
})

t.test('shutdown: a tool call running when the server closes answers with shutting_down, then the session closes', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { client } = await connect(t, url)
  const started: Progress[] = []
  const call = client.callTool({ name: 'scripted', arguments: { script: [{ op: 'progress', label: 'started', percent: 0.1 }, { op: 'wait_abort' }] } }, undefined,
    { onprogress: (p) => { started.push(p) } })
  await until('the run started', () => started.length > 0)
  const closed = app.close()
  const result = await call
  t.equal(result.isError, true)
  t.match(texts(result).at(-1), /^shutting_down: /)
  await closed
  await t.rejects(post(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }), 'the server is gone')
})

t.test('/mcp in the OpenAPI document: its three methods, pointing at MCP', async (t) => {
  const { app } = await listen(t)
  const doc = (await app.inject({ url: '/openapi.json' })).json()
  const item = doc.paths['/mcp']
  t.match(item.post, { operationId: 'mcpPost', description: /Model Context Protocol/, security: [{ bearerAuth: [] }] })
  t.same(Object.keys(item.post.responses['200'].content), ['text/event-stream', 'application/json'])
  t.match(item.post.requestBody.content['application/json'].examples, { example1: { value: { method: 'initialize' } } })
  t.match(item.get, { operationId: 'mcpStream' })
  t.match(item.delete, { operationId: 'mcpDeleteSession' })
  t.ok(item.post.responses['404'].content['application/json'].examples.AH_ERR_MCP_SESSION_NOT_FOUND, 'errors have examples')
})

t.test('an unknown tool error reaches the SDK client as an McpError', async (t) => {
  const { url } = await listen(t)
  const { client } = await connect(t, url)
  const err = await client.callTool({ name: 'scripted', arguments: {} }).catch((e: unknown) => e)
  t.ok(err instanceof McpError, 'a JSON-RPC error')
})

t.test('a batch: every request of it is answered on its one stream, a notification in it is taken', async (t) => {
  const { url } = await listen(t)
  const { transport } = await connect(t, url)
  const res = await post(url, [
    { jsonrpc: '2.0', id: 'list', method: 'tools/list' },
    { jsonrpc: '2.0', id: 'call', method: 'tools/call', params: { name: 'echo', arguments: { query: 'batched' } } },
    { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'nothing-running' } }
  ], { 'mcp-session-id': transport.sessionId as string })
  t.equal(res.status, 200)
  const messages = (await res.text()).split('\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as { id: string, result: Record<string, unknown> })
  t.ok((messages.find((m) => m.id === 'list')?.result as { tools: Array<{ name: string }> }).tools.some((tool) => tool.name === 'cli-agent'))
  t.match(messages.find((m) => m.id === 'call')?.result, { structuredContent: { echo: 'batched', calls: 1 } })
})

t.test('with tracing on, a tool call\'s run is a span of the trace of the HTTP request that carried it', async (t) => {
  const exporter = new InMemorySpanExporter()
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  t.teardown(async () => { await provider.shutdown() })
  const app = await buildApp(testConfig(t), { tracerProvider: provider })
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
  const { client } = await connect(t, url, { headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } })
  const result = await client.callTool({ name: 'echo', arguments: { query: 'traced' } })
  t.notOk(result.isError)
  await until('the run\'s span ended', () => exporter.getFinishedSpans().some((s) => s.name === 'assist.run'))
  const run = exporter.getFinishedSpans().find((s) => s.name === 'assist.run')
  t.equal(run?.spanContext().traceId, traceId, 'in the caller\'s trace')
  t.match(await app.audit.list({ action: 'assist', limit: 1 }), [{ request_id: runOf(result).requestId, trace_id: traceId.replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5') }], 'the envelope carries the same trace')
})
