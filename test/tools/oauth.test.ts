import t from 'tap'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import type { IncomingMessage, Server as HttpServer, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { dirname, join } from 'node:path'
// @ts-expect-error express ships no types of its own, and @types/express is not a dependency: only its app, use() and the handlers' shapes are needed here
import express from 'express'
import type { FastifyInstance } from 'fastify'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { tokenHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/token.js'
import { metadataHandler } from '@modelcontextprotocol/sdk/server/auth/handlers/metadata.js'
import { authenticateClient } from '@modelcontextprotocol/sdk/server/auth/middleware/clientAuth.js'
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js'
import { createOAuthMetadata, mcpAuthMetadataRouter } from '@modelcontextprotocol/sdk/server/auth/router.js'
import { InvalidGrantError, InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js'
import type { OAuthServerProvider } from '@modelcontextprotocol/sdk/server/auth/provider.js'
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js'
import type { OAuthClientInformationFull, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { buildApp } from '../../src/app.js'
import { HostOAuthProvider } from '../../src/tools/oauth-provider.js'
import { loadToolServers, type OAuthSpec } from '../../src/tools/servers-file.js'
import type { ToolRunContext } from '../../src/tools/tool-caller.js'
import { docBlocks } from '../docs/doc-blocks.js'
import { build, testConfig, type Teardown } from '../helper.js'
import { ref, serversFile, tempDir } from '../fixtures/tools/servers.js'

// An OAuth-protected MCP server, started here with the SDK's own server-side auth helpers: an
// authorization server on one port (its metadata, and its token endpoint: the SDK's client
// authentication and refresh token grant, plus the client credentials grant, which the SDK leaves to
// the server), and the MCP server on another (the SDK's bearer token check, its 401 naming the
// protected resource metadata, served at a path only that 401 tells), with one tool, `echo`.

type Req = IncomingMessage & { path: string, body?: Record<string, string>, client?: OAuthClientInformationFull, auth?: AuthInfo }
type Res = ServerResponse & { json: (body: unknown) => void }

interface TokenRequest { grant: string, client: string, resource?: string, scope?: string, refresh?: string }

interface OAuthMcpServer {
  /** The MCP endpoint. */
  url: string
  /** The authorization server's issuer. */
  issuer: string
  /** The confidential client's id and secret (client credentials). */
  client: { id: string, secret: string }
  /** The public client's id and the refresh token it was given (refresh token grant). */
  publicClient: { id: string, refreshToken: string }
  /** Every token request, in order (refused ones included). */
  tokenRequests: TokenRequest[]
  /** Every tool call the MCP server answered: the client and the access token it came with. */
  calls: Array<{ client: string, token: string }>
  /** `METHOD path` of every request to the MCP server's port. */
  resourceRequests: string[]
  /** Every access and refresh token issued. */
  issued: string[]
  /** The MCP server stops accepting every access token issued so far (they expire). */
  expireAccessTokens(): void
  /** The authorization server stops accepting every refresh token issued so far. */
  revokeRefreshTokens(): void
}

async function listen (app: { listen: (port: number, host: string) => HttpServer }, t: Teardown): Promise<string> {
  const http = app.listen(0, '127.0.0.1')
  await once(http, 'listening')
  t.teardown(async () => {
    http.closeAllConnections()
    await new Promise<void>((resolve) => { http.close(() => { resolve() }) })
  })
  return `http://127.0.0.1:${(http.address() as AddressInfo).port}`
}

async function startOAuthMcpServer (t: Teardown): Promise<OAuthMcpServer> {
  const client = { id: 'host-cc', secret: `cc-secret-${randomUUID()}` }
  const publicClient = { id: 'host-public', refreshToken: `rt-${randomUUID()}` }
  const clients = new Map<string, OAuthClientInformationFull>([
    [client.id, { client_id: client.id, client_secret: client.secret, redirect_uris: [] }],
    [publicClient.id, { client_id: publicClient.id, redirect_uris: [] }]
  ])
  const access = new Map<string, AuthInfo>()
  const refresh = new Map<string, string>([[publicClient.refreshToken, publicClient.id]])
  const tokenRequests: TokenRequest[] = []
  const calls: OAuthMcpServer['calls'] = []
  const resourceRequests: string[] = []
  const issued: string[] = [publicClient.refreshToken]

  /** An access token (an hour's, unless the test expires it) and, for the refresh token grant, the next refresh token: the last one is used up (rotation). */
  const issue = (clientId: string, resource: string | undefined, scope: string | undefined, rotate: boolean): OAuthTokens => {
    const token = `at-${randomUUID()}`
    access.set(token, { token, clientId, scopes: scope?.split(' ') ?? [], expiresAt: Math.floor(Date.now() / 1000) + 3600, ...(resource !== undefined ? { resource: new URL(resource) } : {}) })
    issued.push(token)
    const tokens: OAuthTokens = { access_token: token, token_type: 'Bearer', expires_in: 3600, ...(scope !== undefined ? { scope } : {}) }
    if (!rotate) return tokens
    const next = `rt-${randomUUID()}`
    refresh.set(next, clientId)
    issued.push(next)
    return { ...tokens, refresh_token: next }
  }
  const provider: OAuthServerProvider = {
    clientsStore: { getClient: (id: string) => clients.get(id) },
    authorize: async () => { throw new Error('no person signs in here') },
    challengeForAuthorizationCode: async () => { throw new InvalidGrantError('no authorization codes here') },
    exchangeAuthorizationCode: async () => { throw new InvalidGrantError('no authorization codes here') },
    exchangeRefreshToken: async (c, refreshToken, scopes, resource) => {
      if (refresh.get(refreshToken) !== c.client_id) throw new InvalidGrantError('unknown or used refresh token')
      refresh.delete(refreshToken)
      return issue(c.client_id, resource?.href, scopes?.join(' '), true)
    },
    verifyAccessToken: async (token) => {
      const info = access.get(token)
      if (info === undefined) throw new InvalidTokenError('Token has expired')
      return info
    }
  }

  const as = express()
  const asUrl = await listen(as, t)
  const metadata = createOAuthMetadata({ provider, issuerUrl: new URL(asUrl) })
  metadata.grant_types_supported = [...(metadata.grant_types_supported ?? []), 'client_credentials']
  as.use('/.well-known/oauth-authorization-server', metadataHandler(metadata))
  as.post('/token', express.urlencoded({ extended: false }), (req: Req, _res: Res, next: () => void) => {
    const body = req.body ?? {}
    tokenRequests.push({ grant: String(body.grant_type), client: String(body.client_id), ...(body.resource !== undefined ? { resource: body.resource } : {}), ...(body.scope !== undefined ? { scope: body.scope } : {}), ...(body.refresh_token !== undefined ? { refresh: body.refresh_token } : {}) })
    next()
  }, authenticateClient({ clientsStore: provider.clientsStore }), (req: Req, res: Res, next: () => void) => {
    if (req.body?.grant_type !== 'client_credentials' || req.client === undefined) { next(); return }
    res.setHeader('cache-control', 'no-store')
    res.json(issue(req.client.client_id, req.body.resource, req.body.scope, false))
  })
  as.use('/token', tokenHandler({ provider, rateLimit: false }))

  const rs = express()
  rs.use((req: Req, _res: Res, next: () => void) => { resourceRequests.push(`${String(req.method)} ${req.path}`); next() })
  const rsUrl = await listen(rs, t)
  const url = `${rsUrl}/mcp`
  // the protected resource metadata under /meta: only the 401's WWW-Authenticate leads there
  rs.use('/meta', mcpAuthMetadataRouter({ oauthMetadata: metadata, resourceServerUrl: new URL(url), scopesSupported: ['tools'] }))
  const sessions = new Map<string, StreamableHTTPServerTransport>()
  rs.all('/mcp', requireBearerAuth({ verifier: provider, resourceMetadataUrl: `${rsUrl}/meta/.well-known/oauth-protected-resource/mcp` }), (req: Req, res: Res) => {
    const sid = req.headers['mcp-session-id'] as string | undefined
    const serve = async (): Promise<void> => {
      let transport = sid !== undefined ? sessions.get(sid) : undefined
      if (transport === undefined) {
        const fresh = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (id) => { sessions.set(id, fresh) } })
        const server = new Server({ name: 'oauth-fixture', version: '1.0.0' }, { capabilities: { tools: {} } })
        server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [{ name: 'echo', description: 'Echoes text', inputSchema: { type: 'object' } }] }))
        server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
          calls.push({ client: String(extra.authInfo?.clientId), token: String(extra.authInfo?.token) })
          return { content: [{ type: 'text', text: String(request.params.arguments?.text) }], structuredContent: { client: extra.authInfo?.clientId } }
        })
        await server.connect(fresh)
        transport = fresh
      }
      await transport.handleRequest(req, res)
    }
    serve().catch(() => { if (!res.headersSent) res.writeHead(500).end() })
  })
  t.teardown(async () => { for (const transport of sessions.values()) await transport.close() })

  return {
    url,
    issuer: metadata.issuer,
    client,
    publicClient,
    tokenRequests,
    calls,
    resourceRequests,
    issued,
    expireAccessTokens: () => { access.clear() },
    revokeRefreshTokens: () => { refresh.clear() }
  }
}

const runOf = (): ToolRunContext => ({ agent: 'tool-user', owner: 'owner-1', requestId: randomUUID(), sessionId: randomUUID(), traceId: randomUUID(), signal: new AbortController().signal })

/** A servers file of `servers` (each an entry of the test server with these `oauth` and more), with `files` written beside it; returns its path. */
function oauthServers (t: Teardown, server: OAuthMcpServer, servers: Record<string, Record<string, unknown>>, files: Record<string, string> = {}): string {
  const file = serversFile(t, Object.fromEntries(Object.entries(servers).map(([name, entry]) => [name, { url: server.url, actions: ['echo'], timeout: 20, ...entry }])))
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dirname(file), name), text)
  return file
}

t.test('client credentials: the host finds the authorization server by the 401 and the protected resource metadata, gets a token for the server and calls the tool; a secret from a file does too', async (t) => {
  const server = await startOAuthMcpServer(t)
  const app = await build(t, {
    WORKERS_PER_TYPE: '0',
    MCP_CC_SECRET: server.client.secret,
    MCP_SERVERS_FILE: oauthServers(t, server, {
      cc: { oauth: { grant: 'client_credentials', client_id: server.client.id, client_secret: ref('MCP_CC_SECRET'), scope: 'tools' } },
      filed: { oauth: { grant: 'client_credentials', client_id: server.client.id, client_secret_file: 'cc.secret' } }
    }, { 'cc.secret': `${server.client.secret}\n` })
  })
  const tools = app.tools.caller(runOf())
  t.match(await tools.call({ tool: 'cc', action: 'echo', args: { text: 'hello' } }), { success: true, result: { content: [{ type: 'text', text: 'hello' }], structuredContent: { client: server.client.id } } })
  t.same(server.tokenRequests, [{ grant: 'client_credentials', client: server.client.id, resource: server.url, scope: 'tools' }], 'one token request: the grant, the scope asked for, the server as the resource indicator (RFC 8707)')
  t.ok(server.resourceRequests.includes('GET /meta/.well-known/oauth-protected-resource/mcp'), 'the protected resource metadata was found where the 401 said')
  t.match(await tools.call({ tool: 'cc', action: 'echo', args: { text: 'again' } }), { success: true })
  t.equal(server.tokenRequests.length, 1, 'the token is kept for the next call')
  t.equal(server.calls[0]?.token, server.calls[1]?.token)

  t.match(await tools.call({ tool: 'filed', action: 'echo', args: { text: 'from a file' } }), { success: true, result: { structuredContent: { client: server.client.id } } })
  t.equal(server.tokenRequests.length, 2, 'a connection of its own, with its own token')
})

t.test('client credentials: the token expires between two calls of one run, and the second call gets a new one without noticing', async (t) => {
  const server = await startOAuthMcpServer(t)
  const app = await build(t, {
    WORKERS_PER_TYPE: '0',
    MCP_SERVERS_FILE: oauthServers(t, server, { cc: { oauth: { grant: 'client_credentials', client_id: server.client.id, client_secret_file: 'secret' } } }, { secret: server.client.secret })
  })
  const run = runOf()
  const tools = app.tools.caller(run)
  t.match(await tools.call({ tool: 'cc', action: 'echo', args: { text: 'one' } }), { success: true })
  server.expireAccessTokens()
  t.match(await tools.call({ tool: 'cc', action: 'echo', args: { text: 'two' } }), { success: true, result: { content: [{ text: 'two' }] } })
  t.equal(server.tokenRequests.length, 2, 'a second token request')
  t.not(server.calls[1]?.token, server.calls[0]?.token, 'the second call came with the new token')
  t.match(await app.events.list({ request_id: run.requestId, type: 'tool.call' }), [{ event: { data: { success: true, attempts: 1 } } }, { event: { data: { success: true, attempts: 1 } } }], 'one attempt each: the call was not retried, its request was')
})

t.test('a refresh token: the pre-registered public client gets an access token with it; the token expires mid-run, and the next call refreshes with the rotated refresh token', async (t) => {
  const server = await startOAuthMcpServer(t)
  const app = await build(t, {
    WORKERS_PER_TYPE: '0',
    MCP_RT: server.publicClient.refreshToken,
    MCP_SERVERS_FILE: oauthServers(t, server, { rt: { oauth: { grant: 'refresh_token', client_id: server.publicClient.id, refresh_token: ref('MCP_RT') } } })
  })
  const tools = app.tools.caller(runOf())
  t.match(await tools.call({ tool: 'rt', action: 'echo', args: { text: 'one' } }), { success: true, result: { structuredContent: { client: server.publicClient.id } } })
  t.match(server.tokenRequests, [{ grant: 'refresh_token', client: server.publicClient.id, refresh: server.publicClient.refreshToken, resource: server.url }])
  server.expireAccessTokens()
  t.match(await tools.call({ tool: 'rt', action: 'echo', args: { text: 'two' } }), { success: true, result: { content: [{ text: 'two' }] } })
  t.equal(server.tokenRequests.length, 2)
  const rotated = server.issued.find((token) => token.startsWith('rt-') && token !== server.publicClient.refreshToken)
  t.equal(server.tokenRequests[1]?.refresh, rotated, 'the refresh token the authorization server gave replaced the configured one (which it used up)')
  t.not(server.calls[1]?.token, server.calls[0]?.token)

  server.expireAccessTokens()
  server.revokeRefreshTokens()
  t.match(await tools.call({ tool: 'rt', action: 'echo', args: { text: 'three' }, retry_on_failure: false }), {
    success: false,
    error: /^connection_lost: the connection to the MCP server of tool "rt" failed \(HTTP 401: .*OAuth token request \(refresh_token grant\) to http:\/\/127\.0\.0\.1:\d+\/token failed: invalid_grant \(unknown or used refresh token\)\)$/
  }, 'a refresh token no longer accepted mid-session: the server refused the host, and why')
})

t.test('a wrong client secret fails the call, naming the server, the token request and invalid_client; no secret and no token is ever logged', async (t) => {
  const server = await startOAuthMcpServer(t)
  const wrong = `wrong-secret-${randomUUID()}`
  const lines: string[] = []
  const app: FastifyInstance = await buildApp(testConfig(t, {
    LOG_LEVEL: 'debug',
    WORKERS_PER_TYPE: '0',
    MCP_CC_SECRET: server.client.secret,
    MCP_WRONG_SECRET: wrong,
    MCP_SERVERS_FILE: oauthServers(t, server, {
      cc: { oauth: { grant: 'client_credentials', client_id: server.client.id, client_secret: ref('MCP_CC_SECRET') } },
      wrong: { oauth: { grant: 'client_credentials', client_id: server.client.id, client_secret: ref('MCP_WRONG_SECRET') }, retries: 0 },
      rt: { oauth: { grant: 'refresh_token', client_id: server.publicClient.id, refresh_token_file: 'rt' } }
    }, { rt: server.publicClient.refreshToken })
  }), { logStream: { write: (line: string) => { lines.push(line) } } })
  t.teardown(async () => { await app.close() })
  const tools = app.tools.caller(runOf())
  t.match(await tools.call({ tool: 'cc', action: 'echo', args: { text: 'ok' } }), { success: true })
  t.match(await tools.call({ tool: 'rt', action: 'echo', args: { text: 'ok' } }), { success: true })

  const failed = await tools.call({ tool: 'wrong', action: 'echo', args: { text: 'no' } })
  const expected = /^server_unavailable: the MCP server of tool "wrong" could not be started or reached \(HTTP 401: .*OAuth token request \(client_credentials grant\) to http:\/\/127\.0\.0\.1:\d+\/token failed: invalid_client \(Invalid client_secret\)\)$/
  t.match(failed, { success: false, error: expected })
  t.match((await app.tools.describe()).find((tool) => tool.name === 'wrong'), { status: 'failed', error: /the server did not start: .*OAuth token request .* failed: invalid_client/ })
  t.equal(server.tokenRequests.filter((r) => r.client === server.client.id).length, 3, 'the good client once, the wrong secret twice (the SDK tries again once after invalid_client)')

  await app.close()
  const log = lines.join('')
  t.match(log, /"tool":"wrong","error":"the server did not start: .*invalid_client.*"msg":"MCP server failed"/, 'the failure is logged')
  for (const secret of [server.client.secret, wrong, ...server.issued]) t.notOk(log.includes(secret), 'no secret or token in the log')
})

t.test('the entry\'s authorization_server: credentials go to that one only; its resource: the resource indicator asked for', async (t) => {
  const server = await startOAuthMcpServer(t)
  const cc = { grant: 'client_credentials', client_id: server.client.id, client_secret_file: 'secret' }
  const app = await build(t, {
    WORKERS_PER_TYPE: '0',
    MCP_SERVERS_FILE: oauthServers(t, server, {
      bound: { oauth: { ...cc, authorization_server: server.issuer, resource: 'https://tools.example.com/mcp' } },
      elsewhere: { oauth: { ...cc, authorization_server: 'https://login.example.com/' }, retries: 0 }
    }, { secret: server.client.secret })
  })
  const tools = app.tools.caller(runOf())
  t.match(await tools.call({ tool: 'bound', action: 'echo', args: { text: 'ok' } }), { success: true })
  t.same(server.tokenRequests.map((r) => r.resource), ['https://tools.example.com/mcp'])
  t.match(await tools.call({ tool: 'elsewhere', action: 'echo', args: { text: 'no' } }), {
    success: false,
    error: new RegExp(`^server_unavailable: .*OAuth discovery for ${server.url.replaceAll('.', '\\.')} failed: .*bound to authorization server https://login\\.example\\.com/ and is not presented to ${server.issuer.replaceAll('.', '\\.')}`)
  })
  t.equal(server.tokenRequests.length, 1, 'the authorization server never saw the credentials bound to another')
})

t.test('the provider: a token about to expire is not sent, a rotated refresh token is used next, nobody can be asked to sign in, a failure names its step and masks secrets', async (t) => {
  let now = 1_000_000
  const spec: OAuthSpec = { grant: 'refresh_token', clientId: 'c', clientSecret: 'client-secret-1', refreshToken: 'refresh-1' }
  const provider = new HostOAuthProvider(spec, { server: new URL('http://127.0.0.1:1/mcp'), now: () => now })
  t.equal(provider.tokens(), undefined, 'no token before the first request')
  t.equal(provider.failure(new Error('x'), 'x'), undefined, 'no OAuth run under way: not an OAuth failure')
  provider.saveTokens({ access_token: 'access-1', token_type: 'Bearer', expires_in: 600 })
  t.equal(provider.tokens()?.access_token, 'access-1')
  now += 569_000
  t.equal(provider.tokens()?.access_token, 'access-1', 'sent until 30 s before its end')
  now += 2000
  t.equal(provider.tokens(), undefined, 'then no longer: the server\'s 401 gets a new one')
  t.equal(provider.prepareTokenRequest('tools').toString(), 'grant_type=refresh_token&refresh_token=refresh-1&scope=tools')
  provider.saveTokens({ access_token: 'access-2', token_type: 'Bearer', expires_in: 10, refresh_token: 'refresh-2' })
  now += 8999
  t.equal(provider.tokens()?.access_token, 'access-2', 'a short life: a tenth of it is kept back')
  now += 2
  t.equal(provider.tokens(), undefined)
  t.equal(provider.prepareTokenRequest().get('refresh_token'), 'refresh-2', 'the rotated refresh token')
  provider.saveTokens({ access_token: 'access-3', token_type: 'Bearer' })
  now += 1e12
  t.equal(provider.tokens()?.access_token, 'access-3', 'no expires_in: sent until the server refuses it')
  t.equal(provider.prepareTokenRequest().get('refresh_token'), 'refresh-2', 'an answer without a refresh token keeps the last one')
  provider.invalidateCredentials('all')
  t.equal(provider.tokens(), undefined, 'invalidated')
  t.match(provider.clientInformation(), { client_id: 'c', client_secret: 'client-secret-1' }, 'the client stays')

  t.throws(() => provider.redirectToAuthorization(), { message: /asks for a person to sign in .* which the host cannot do: give the server's entry a client_credentials or a refresh_token grant/ })
  t.throws(() => provider.saveCodeVerifier())

  provider.discoveryState()
  t.equal(provider.failure(new Error('HTTP 500'), 'HTTP 500 trying to load OAuth metadata'), 'OAuth discovery for http://127.0.0.1:1/mcp failed: HTTP 500 trying to load OAuth metadata')
  provider.discoveryState()
  provider.saveDiscoveryState({ authorizationServerUrl: 'http://127.0.0.1:2/' })
  provider.prepareTokenRequest()
  const invalid = Object.assign(new Error('refresh-2 is not client-secret-1'), { errorCode: 'invalid_grant' })
  t.equal(provider.failure(invalid, invalid.message), 'OAuth token request (refresh_token grant) to http://127.0.0.1:2/token failed: invalid_grant ([redacted] is not [redacted])', 'the guessed token endpoint, the error code, no secret')
})

t.test('the guide\'s example entry loads', async (t) => {
  const [example] = docBlocks('docs/mcp.md', '#### Servers behind OAuth', 'json')
  t.ok(example, 'the guide has an example')
  const dir = tempDir(t)
  const file = join(dir, 'servers.json')
  writeFileSync(file, example as string)
  writeFileSync(join(dir, 'crm-refresh-token'), 'a-refresh-token\n')
  const [tickets, crm] = loadToolServers(file, { TICKETS_MCP_SECRET: 'a-secret' })
  t.match(tickets?.transport, { kind: 'streamable_http', oauth: { grant: 'client_credentials', clientSecret: 'a-secret' } })
  t.match(crm?.transport, { kind: 'streamable_http', oauth: { grant: 'refresh_token', refreshToken: 'a-refresh-token' } })
})
