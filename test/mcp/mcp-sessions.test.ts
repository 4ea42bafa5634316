import t from 'tap'
import { discoverOAuthProtectedResourceMetadata, extractResourceMetadataUrl } from '@modelcontextprotocol/sdk/client/auth.js'
import { request as httpRequest } from 'node:http'
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { buildApp } from '../../src/app.js'
import { observed } from '../fixtures/agents/scripted/index.js'
import { FIXTURE_AGENTS_DIR, listen, testConfig } from '../helper.js'
import { until } from '../socket.js'
import { checkRpcError, connect, mcpClient, post } from './client.js'

const KEY_A = 'mcp-key-a-0123456789abcdefghijklmn'
const KEY_B = 'mcp-key-b-0123456789abcdefghijklmn'
const ECHO_ONLY = 'mcp-key-echo-0123456789abcdefghijk'
const READ_ONLY = 'mcp-key-read-0123456789abcdefghijk'
const API_KEYS = JSON.stringify([
  { name: 'a', key: KEY_A, scopes: ['assist:invoke'] },
  { name: 'b', key: KEY_B, scopes: ['assist:invoke'] },
  { name: 'echo-only', key: ECHO_ONLY, scopes: ['assist:invoke'], agents: ['echo'] },
  { name: 'reader', key: READ_ONLY, scopes: ['agents:read'] }
])
const apikey = { AUTH_MODE: 'apikey', API_KEYS, AUTH_FAILURE_MAX: '0' }
const bearer = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` })
const toolsList = { jsonrpc: '2.0', id: 1, method: 'tools/list' }

// MCP authorization (issue 35): a client that gets a 401 finds the resource's metadata (RFC 9728) and
// in it the authorization server that issues the JWTs /mcp takes; the SDK's own discovery reads both
t.test('AUTH_MODE=jwt: the 401 names the protected resource metadata, which names the JWT issuer as its authorization server', async (t) => {
  const issuer = 'https://id.example.test'
  const { url } = await listen(t, { AUTH_MODE: 'jwt', JWT_SECRET: 's'.repeat(32), JWT_ISSUER: issuer, JWT_AUDIENCE: 'agent-host', AUTH_FAILURE_MAX: '0' })
  const res = await post(url, toolsList)
  t.equal(res.status, 401)
  t.equal(extractResourceMetadataUrl(res)?.href, `${url}/.well-known/oauth-protected-resource/mcp`, 'WWW-Authenticate names the metadata')
  t.match(res.headers.get('www-authenticate'), /^Bearer realm="agent-host", resource_metadata="/)
  const metadata = await discoverOAuthProtectedResourceMetadata(new URL(`${url}/mcp`))
  t.same(metadata, { resource: `${url}/mcp`, authorization_servers: [issuer], bearer_methods_supported: ['header'], scopes_supported: ['assist:invoke'], resource_name: 'agent-host' }, 'found as the SDK looks for it')
  const root = await fetch(`${url}/.well-known/oauth-protected-resource`)
  t.equal(root.status, 200, 'at the origin\'s well-known path too, without a token')
})

t.test('API keys: no protected resource metadata (nothing to discover), and the 401 names none', async (t) => {
  const { url } = await listen(t, apikey)
  t.equal((await post(url, toolsList)).headers.get('www-authenticate'), 'Bearer realm="agent-host"')
  t.equal((await fetch(`${url}/.well-known/oauth-protected-resource/mcp`)).status, 404, 'not there')
})

t.test('unauthenticated: 401 with the usual body and WWW-Authenticate: Bearer; the SDK client cannot connect; a key without assist:invoke is 403', async (t) => {
  const { url } = await listen(t, apikey)
  const res = await post(url, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'x', version: '1' } } })
  t.equal(res.status, 401)
  t.equal(res.headers.get('www-authenticate'), 'Bearer realm="agent-host"')
  t.match(checkRpcError(await res.json()).error.data, { code: 'AH_ERR_AUTH_REQUIRED' })
  const anonymous = mcpClient(t, url)
  await t.rejects(anonymous.client.connect(anonymous.transport), { code: 401 }, 'the SDK client is refused')
  const wrongKey = mcpClient(t, url, { key: 'not-a-key-0123456789abcdefghijklmnop' })
  await t.rejects(wrongKey.client.connect(wrongKey.transport), { code: 401 })
  const reader = await post(url, toolsList, bearer(READ_ONLY))
  t.equal(reader.status, 403)
  t.match(checkRpcError(await reader.json()).error.data, { code: 'AH_ERR_FORBIDDEN', message: /assist:invoke/ })
  t.notOk(reader.headers.get('www-authenticate'), 'only a 401 says how to authenticate')
  const { client } = await connect(t, url, { key: KEY_A })
  t.ok((await client.listTools()).tools.length > 0, 'with a key it works')
})

t.test('a session is its key\'s: a second key gets 404 for it on POST, GET and DELETE, and the session goes on', async (t) => {
  const { url } = await listen(t, apikey)
  const a = await connect(t, url, { key: KEY_A })
  const sessionId = a.transport.sessionId as string
  t.match(sessionId, /^[0-9a-f-]{36}$/)

  const b = mcpClient(t, url, { key: KEY_B, sessionId })
  await b.client.connect(b.transport)
  const err = await b.client.listTools().catch((e: unknown) => e)
  t.ok(err instanceof StreamableHTTPError, 'the SDK client is refused')
  t.equal((err as StreamableHTTPError).code, 404)

  const raw = await post(url, toolsList, { ...bearer(KEY_B), 'mcp-session-id': sessionId })
  t.equal(raw.status, 404)
  t.match(checkRpcError(await raw.json()).error.data, { code: 'AH_ERR_MCP_SESSION_NOT_FOUND', message: new RegExp(sessionId) })
  for (const method of ['GET', 'DELETE']) {
    const res = await fetch(`${url}/mcp`, { method, headers: { ...bearer(KEY_B), 'mcp-session-id': sessionId, accept: 'text/event-stream' } })
    t.equal(res.status, 404, `${method} with the other key`)
    t.equal(checkRpcError(await res.json()).error.data.code, 'AH_ERR_MCP_SESSION_NOT_FOUND')
  }
  t.ok((await a.client.listTools()).tools.length > 0, 'the first key\'s session is untouched')
})

t.test('a key limited to some agents lists and calls only those', async (t) => {
  const { url } = await listen(t, apikey)
  const { client } = await connect(t, url, { key: ECHO_ONLY })
  t.same((await client.listTools()).tools.map((tool) => tool.name), ['echo'])
  t.same((await client.callTool({ name: 'echo', arguments: { query: 'ok' } })).structuredContent, { echo: 'ok', calls: 1 })
  await t.rejects(client.callTool({ name: 'echo-stream', arguments: { query: 'no' } }), { code: -32602, message: /Unknown tool: echo-stream/ }, 'as if it did not exist')
})

t.test('requests without a session, or with one that does not exist: 400 and 404, JSON-RPC errors like every refusal of /mcp (bad JSON, too large); notifications are answered 202; GET is the session\'s stream', async (t) => {
  const { url } = await listen(t)
  for (const [method, body] of [['POST', toolsList], ['GET', undefined], ['DELETE', undefined]] as const) {
    const res = await fetch(`${url}/mcp`, {
      method,
      headers: { accept: 'application/json, text/event-stream', ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {})
    })
    t.equal(res.status, 400, `${method} without Mcp-Session-Id`)
    t.match(checkRpcError(await res.json()).error, { code: -32000, data: { code: 'AH_ERR_REQUEST_INVALID', message: /Mcp-Session-Id/ } })
  }
  const unknown = await post(url, toolsList, { 'mcp-session-id': 'no-such-session' })
  t.equal(unknown.status, 404)
  t.match(checkRpcError(await unknown.json()).error, { code: -32001, data: { code: 'AH_ERR_MCP_SESSION_NOT_FOUND' } }, 'the MCP transport\'s code for an unknown session')
  const notRpc = await post(url, { jsonrpc: '1.0', method: 'x' })
  t.equal(notRpc.status, 400, 'a body that is not a JSON-RPC message')
  t.match(checkRpcError(await notRpc.json()).error, { code: -32600, data: { code: 'AH_ERR_VALIDATION' } })
  const notJson = await fetch(`${url}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: '{"jsonrpc": "2.0", ' })
  t.equal(notJson.status, 400, 'a body that is not JSON')
  t.match(checkRpcError(await notJson.json()).error, { code: -32700, data: { code: 'AH_ERR_BODY_MALFORMED' } }, 'a JSON-RPC parse error')
  const tooLarge = await post(url, { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { pad: 'x'.repeat(1024 * 1024) } })
  t.equal(tooLarge.status, 413)
  t.match(checkRpcError(await tooLarge.json()).error, { code: -32000, data: { code: 'AH_ERR_BODY_TOO_LARGE' } })

  const { transport, errors } = await connect(t, url)
  const session = { 'mcp-session-id': transport.sessionId as string }
  const note = await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, session)
  t.equal(note.status, 202, 'a notification is accepted')
  const stream = await fetch(`${url}/mcp`, { headers: { ...session, accept: 'text/event-stream' } })
  t.equal(stream.status, 409, 'the SDK client holds the session\'s one GET stream already')
  await stream.body?.cancel()
  t.same(errors, [])
})

t.test('an initialize the transport refuses opens no session', async (t) => {
  const { url } = await listen(t)
  const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'x', version: '1' } } }
  const res = await post(url, initialize, { accept: 'application/json' })
  t.equal(res.status, 406, 'the MCP transport wants both media types')
  t.match(await res.json(), { jsonrpc: '2.0', error: { code: -32000, message: /Not Acceptable/ } })
  t.notOk(res.headers.get('mcp-session-id'))
  const ok = await post(url, initialize)
  t.equal(ok.status, 200)
  t.match(ok.headers.get('mcp-session-id'), /^[0-9a-f-]{36}$/)
  await ok.body?.cancel()
})

t.test('DELETE ends the session: its running tool call\'s run is cancelled, and its id is gone', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { client, transport } = await connect(t, url)
  const sessionId = transport.sessionId as string
  const before = observed.started.length
  const call = client.callTool({ name: 'scripted', arguments: { script: [{ op: 'wait_abort' }] } }).catch((err: unknown) => err)
  await until('the run started', () => observed.started.length > before)
  const capSession = observed.started.at(-1) as string
  await transport.terminateSession()
  await until('the agent was aborted', () => observed.aborts.some((a) => a.sessionId === capSession))
  t.match(observed.aborts.find((a) => a.sessionId === capSession)?.reason, { kind: 'cancelled' })
  const after = await post(url, toolsList, { 'mcp-session-id': sessionId })
  t.equal(after.status, 404, 'the id is not valid any more')
  await client.close()
  t.ok(await call, 'the call ended without an answer')
})

t.test('DNS rebinding: bound to loopback, a foreign Host or Origin is refused with 403; the request\'s own origin and CORS_ORIGINS pass', async (t) => {
  const { url, port } = await listen(t, { CORS_ORIGINS: 'http://localhost:5173' })
  const status = async (host: string): Promise<{ status: number, body: string }> => await new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/mcp', method: 'POST', headers: { host, 'content-type': 'application/json', accept: 'application/json, text/event-stream' } }, (res) => {
      let body = ''
      res.on('data', (chunk: Buffer) => { body += chunk.toString() })
      res.on('end', () => { resolve({ status: res.statusCode as number, body }) })
    })
    req.on('error', reject)
    req.end(JSON.stringify(toolsList))
  })
  const rebound = await status(`attacker.example:${port}`)
  t.equal(rebound.status, 403, 'a name that was rebound to 127.0.0.1')
  t.match(checkRpcError(JSON.parse(rebound.body)).error.data, { code: 'AH_ERR_HOST_REFUSED', message: /attacker\.example/ })
  for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]) t.equal((await status(host)).status, 400, `${host} passes the guard (then wants a session)`)

  const evil = mcpClient(t, url, { headers: { origin: 'http://attacker.example' } })
  await t.rejects(evil.client.connect(evil.transport), { code: 403 }, 'a page of another origin')
  const own = await connect(t, url, { headers: { origin: url } })
  t.ok((await own.client.listTools()).tools.length > 0, 'the server\'s own origin')
  const listed = await connect(t, url, { headers: { origin: 'http://localhost:5173' } })
  t.ok((await listed.client.listTools()).tools.length > 0, 'an origin of CORS_ORIGINS')
})

t.test('an idle session is closed after MCP_SESSION_IDLE_MS; a principal past MCP_MAX_SESSIONS loses its least recently used', async (t) => {
  const lines: string[] = []
  const app = await buildApp(testConfig(t, { MCP_SESSION_IDLE_MS: '1000', MCP_MAX_SESSIONS: '2', LOG_LEVEL: 'info' }), { logStream: { write: (line) => { lines.push(line) } } })
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`

  const idle = await connect(t, url)
  const idleId = idle.transport.sessionId as string
  await idle.client.close()
  await until('the idle session was closed', () => lines.some((line) => line.includes(idleId) && line.includes('MCP session closed')), 10_000)
  t.equal((await post(url, toolsList, { 'mcp-session-id': idleId })).status, 404, 'its id is gone')

  const first = await connect(t, url)
  const second = await connect(t, url)
  await second.client.listTools()
  const third = await connect(t, url)
  t.equal((await post(url, toolsList, { 'mcp-session-id': first.transport.sessionId as string })).status, 404, 'the least recently used went')
  t.ok((await second.client.listTools()).tools.length > 0, 'the others stay')
  t.ok((await third.client.listTools()).tools.length > 0)
})

t.test('before any session was initialized (the MCP SDK not yet loaded), a session id names nothing: 404 on POST, GET and DELETE, and the server closes cleanly', async (t) => {
  const { url } = await listen(t, apikey)
  const id = '6f1b7c1e-2d3a-4b5c-8d9e-0a1b2c3d4e5f'
  const res = await post(url, toolsList, { ...bearer(KEY_A), 'mcp-session-id': id })
  t.equal(res.status, 404)
  t.match(checkRpcError(await res.json()).error.data, { code: 'AH_ERR_MCP_SESSION_NOT_FOUND', message: new RegExp(id) })
  for (const method of ['GET', 'DELETE']) {
    const other = await fetch(`${url}/mcp`, { method, headers: { ...bearer(KEY_A), 'mcp-session-id': id, accept: 'text/event-stream' } })
    t.equal(other.status, 404, method)
    t.equal(checkRpcError(await other.json()).error.data.code, 'AH_ERR_MCP_SESSION_NOT_FOUND', method)
  }
  const missing = await post(url, toolsList, bearer(KEY_A))
  t.equal(missing.status, 400, 'no session id and no initialize')
  t.equal(checkRpcError(await missing.json()).error.data.code, 'AH_ERR_REQUEST_INVALID')
})
