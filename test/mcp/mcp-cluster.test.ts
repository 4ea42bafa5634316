import t from 'tap'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema, LoggingMessageNotificationSchema, type LoggingMessageNotification } from '@modelcontextprotocol/sdk/types.js'
import { observed } from '../fixtures/agents/scripted/index.js'
import { build, FIXTURE_AGENTS_DIR, listen, tempDataDir, type Teardown } from '../helper.js'
import { pgDatabase } from '../pg.js'
import { until } from '../socket.js'
import { connect, post } from './client.js'

type Message = { method?: string, id?: unknown, result?: unknown, params?: Record<string, unknown> }

/** Which instance (0 or 1) a request goes to, by its HTTP method and JSON-RPC body. */
type Pick = (method: string, body: Message | undefined) => 0 | 1

/**
 * An SDK client of one session whose requests go to two instances, each to the one `pick` says
 * (a load balancer without affinity, made exact): what went where, and the tool calls' streams that ended.
 */
function twoInstanceClient (t: Teardown, urls: readonly [string, string], pick: Pick, capabilities: Record<string, unknown> = {}): { client: Client, transport: StreamableHTTPClientTransport, routed: string[], ended: Set<unknown>, logs: Array<LoggingMessageNotification['params']> } {
  const routed: string[] = []
  const ended = new Set<unknown>()
  const transport = new StreamableHTTPClientTransport(new URL(`${urls[0]}/mcp`), {
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 },
    fetch: async (input, init) => {
      const method = init?.method ?? 'GET'
      const body = typeof init?.body === 'string' ? JSON.parse(init.body) as Message : undefined
      const to = pick(method, body)
      const url = new URL(String(input))
      url.host = new URL(urls[to]).host
      routed.push(`${to} ${method}${body?.method !== undefined ? ` ${body.method}` : body?.result !== undefined ? ' answer' : ''}`)
      const response = await fetch(url, init)
      if (body?.method !== 'tools/call' || response.body === null) return response
      return new Response(response.body.pipeThrough(new TransformStream({ flush: () => { ended.add(body.id) } })), { status: response.status, headers: response.headers })
    }
  })
  const client = new Client({ name: 'agent-host-tests', version: '1.0.0' }, { capabilities })
  const logs: Array<LoggingMessageNotification['params']> = []
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n.params) })
  t.teardown(async () => { await client.close() })
  return { client, transport, routed, ended, logs }
}

/** Two instances of the host on one PostgreSQL database, or undefined when there is no PostgreSQL here. */
async function twoInstances (t: Teardown, env: Record<string, string> = {}): Promise<readonly [string, string] | undefined> {
  const database = await pgDatabase(t as never)
  if (database === undefined) return undefined
  const settings = { DATABASE_URL: database, AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0', ...env }
  const a = await listen(t, settings)
  const b = await listen(t, settings)
  return [a.url, b.url]
}

/** The SSE events of a response body as they come: their `id:` and JSON data (a priming event's data is undefined). */
async function * sseEvents (body: ReadableStream<Uint8Array>): AsyncGenerator<{ id?: string, data?: Message }> {
  const decoder = new TextDecoder()
  let buffer = ''
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true })
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const lines = buffer.slice(0, end).split('\n')
      buffer = buffer.slice(end + 2)
      const id = lines.find((l) => l.startsWith('id: '))?.slice(4)
      const data = lines.find((l) => l.startsWith('data: '))?.slice(6)
      if (id === undefined && data === undefined) continue
      yield { ...(id !== undefined ? { id } : {}), ...(data !== undefined && data !== '' ? { data: JSON.parse(data) as Message } : {}) }
    }
  }
}

t.test('no sticky sessions (PostgreSQL): initialize on one instance; list, set the log level and call on the other; DELETE on the other ends the session on both', async (t) => {
  const urls = await twoInstances(t)
  if (urls === undefined) return
  let target: 0 | 1 = 1
  const { client, transport, routed, logs } = twoInstanceClient(t, urls, (_method, body) => body?.method === 'initialize' ? 0 : target)
  await client.connect(transport)
  const tools = await client.listTools()
  t.ok(tools.tools.some((tool) => tool.name === 'scripted'), 'tools/list on the instance that did not initialize')
  const called = await client.callTool({ name: 'scripted', arguments: { script: [{ op: 'markdown', content: 'across' }] } })
  t.match(called.content, [{ type: 'text', text: 'across' }])

  await client.setLoggingLevel('warning')
  target = 0
  await client.callTool({ name: 'scripted', arguments: { script: [{ op: 'log', level: 'info', message: 'quiet' }, { op: 'log', level: 'error', message: 'loud' }] } })
  t.same(logs.map((l) => (l.data as { message: string }).message), ['loud'], 'the level set on one instance holds on the other')
  t.match(routed, ['0 POST initialize', '1 POST notifications/initialized', '1 GET', '1 POST tools/list', '1 POST tools/call', '1 POST logging/setLevel', '0 POST tools/call'])

  const sessionId = transport.sessionId as string
  target = 1
  await transport.terminateSession()
  for (const url of urls) {
    const after = await post(url, { jsonrpc: '2.0', id: 9, method: 'tools/list' }, { 'mcp-session-id': sessionId })
    t.equal(after.status, 404, `the session is gone on ${url === urls[0] ? 'the instance that initialized it' : 'the other'}`)
  }
})

t.test('a cancellation sent to another instance than the one running the call stops its run (through the engine) and ends the call\'s stream', async (t) => {
  const urls = await twoInstances(t)
  if (urls === undefined) return
  const { client, transport, routed, ended } = twoInstanceClient(t, urls, (_method, body) => body?.method === 'tools/call' ? 0 : 1)
  await client.connect(transport)
  const before = observed.started.length
  const controller = new AbortController()
  const call = client.callTool({ name: 'scripted', arguments: { script: [{ op: 'wait_abort' }] } }, undefined, { signal: controller.signal })
  await until('the run started', () => observed.started.length > before)
  const sessionId = observed.started.at(-1) as string
  controller.abort('changed my mind')
  await t.rejects(call)
  await until('the agent was aborted', () => observed.aborts.some((a) => a.sessionId === sessionId))
  t.match(observed.aborts.find((a) => a.sessionId === sessionId)?.reason, { kind: 'cancelled' }, 'cancelled, as a CAP cancel does')
  await until('the call\'s stream ended', () => ended.size === 1)
  t.ok(routed.includes('1 POST notifications/cancelled'), 'the cancellation went to the other instance')
})

t.test('elicitation across instances: the call runs on one, the client\'s answer reaches the other and is sent on to the one that asked', async (t) => {
  const urls = await twoInstances(t, { AGENTS_DIR: '' })
  if (urls === undefined) return
  const { client, transport, routed } = twoInstanceClient(t, urls, (_method, body) => body?.method === 'tools/call' ? 0 : 1, { elicitation: {} })
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { answer: 'teal' } }))
  await client.connect(transport)
  await client.listTools()
  const result = await client.callTool({ name: 'ask', arguments: { question: 'Which colour?' } })
  t.notOk(result.isError)
  t.same(result.structuredContent, { question: 'Which colour?', answer: 'teal' })
  t.ok(routed.includes('1 POST answer'), 'the answer went to the instance that did not ask')
})

t.test('a dropped tools/call stream resumes with Last-Event-ID on the other instance: the events since, then the rest, to the answer; then it has ended', async (t) => {
  const urls = await twoInstances(t)
  if (urls === undefined) return
  const [a, b] = urls
  const init = await post(a, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } })
  const session = init.headers.get('mcp-session-id') as string
  await init.text()
  await (await post(a, { jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': session })).text()
  const before = observed.started.length
  const gate = `resume-${session}`
  const controller = new AbortController()
  const script = [{ op: 'progress', label: 'first', status: 'running', percent: 0.1 }, { op: 'wait', name: gate }, { op: 'progress', label: 'second', status: 'running', percent: 0.6 }, { op: 'markdown', content: 'done' }]
  const response = await post(a, { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'scripted', arguments: { script }, _meta: { progressToken: 'p' } } }, { 'mcp-session-id': session }, controller.signal)
  t.match(response.headers.get('content-type'), /text\/event-stream/)
  let last: string | undefined
  const seen: Message[] = []
  for await (const event of sseEvents(response.body as ReadableStream<Uint8Array>)) {
    last = event.id ?? last
    if (event.data !== undefined) seen.push(event.data)
    if (seen.some((m) => m.method === 'notifications/progress')) break
  }
  controller.abort()
  t.ok(last, 'the events carry ids')
  t.match(seen, [{ method: 'notifications/progress', params: { progressToken: 'p', message: 'first' } }])
  await until('the run started', () => observed.started.length > before)
  const runSession = observed.started.at(-1) as string
  observed.released.add(gate)

  const resumed = await fetch(`${b}/mcp`, { headers: { accept: 'text/event-stream', 'mcp-session-id': session, 'mcp-protocol-version': '2025-11-25', 'last-event-id': last as string } })
  t.equal(resumed.status, 200)
  const rest: Message[] = []
  let answerId: string | undefined
  for await (const event of sseEvents(resumed.body as ReadableStream<Uint8Array>)) {
    if (event.data !== undefined) rest.push(event.data)
    if (event.data?.id === 7) answerId = event.id
  }
  t.notOk(observed.aborts.some((x) => x.sessionId === runSession), 'the connection going away did not cancel the call (a 2025-11-25 client resumes)')
  t.match(rest, [{ method: 'notifications/progress', params: { message: 'second' } }, { id: 7, result: { content: [{ type: 'text', text: 'done' }] } }], 'the rest, none twice, to the answer')
  t.ok(answerId)

  const again = await fetch(`${b}/mcp`, { headers: { accept: 'text/event-stream', 'mcp-session-id': session, 'last-event-id': answerId as string } })
  t.equal(again.status, 404)
  t.match(await again.json(), { error: { data: { code: 'AH_ERR_MCP_STREAM_ENDED' } } }, 'nothing left: the client stops trying')
  const unknown = await fetch(`${a}/mcp`, { headers: { accept: 'text/event-stream', 'mcp-session-id': session, 'last-event-id': '999999999' } })
  t.equal(unknown.status, 404)
  t.match(await unknown.json(), { error: { data: { code: 'AH_ERR_MCP_EVENT_NOT_FOUND' } } })
})

t.test('a cancelled call\'s stream ends, and a client that resumes it is told it has ended (it does not wait for an answer that will not come)', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const init = await post(url, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } })
  const session = init.headers.get('mcp-session-id') as string
  await init.text()
  const before = observed.started.length
  const response = await post(url, { jsonrpc: '2.0', id: 11, method: 'tools/call', params: { name: 'scripted', arguments: { script: [{ op: 'wait_abort' }] } } }, { 'mcp-session-id': session })
  const events = sseEvents(response.body as ReadableStream<Uint8Array>)
  const priming = (await events.next()).value as { id?: string }
  t.ok(priming.id, 'the priming event')
  await until('the run started', () => observed.started.length > before)
  const cancel = await post(url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 11, reason: 'no longer needed' } }, { 'mcp-session-id': session })
  t.equal(cancel.status, 202)
  const rest: unknown[] = []
  for await (const event of events) rest.push(event)
  t.same(rest, [], 'the stream ended, with no answer')
  await until('the end is stored', async () => {
    const resumed = await fetch(`${url}/mcp`, { headers: { accept: 'text/event-stream', 'mcp-session-id': session, 'last-event-id': priming.id as string } })
    if (resumed.status === 200) { await resumed.body?.cancel(); return false }
    t.match(await resumed.json(), { error: { data: { code: 'AH_ERR_MCP_STREAM_ENDED' } } })
    return true
  })
})

t.test('SQLite: a session outlives a restart of its server; the SDK client goes on with it', async (t) => {
  const dataDir = tempDataDir(t)
  const first = await listen(t, { DATA_DIR: dataDir })
  const { client, transport } = await connect(t, first.url)
  const sessionId = transport.sessionId as string
  await client.setLoggingLevel('error')
  await first.app.close()
  const second = { app: await build(t, { DATA_DIR: dataDir }) }
  await second.app.listen({ host: '127.0.0.1', port: first.port })
  const echoed = await client.callTool({ name: 'echo', arguments: { query: 'again' } })
  t.match(echoed.structuredContent, { echo: 'again' }, 'the same client and session, after the restart')
  t.equal(transport.sessionId, sessionId)
  t.equal((await second.app.stores.mcp.get(sessionId))?.level, 'error', 'with its log level')
})
