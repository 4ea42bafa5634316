import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import type { RequestId } from '@modelcontextprotocol/sdk/types.js'
import pkg from '../../package.json' with { type: 'json' }
import { AH_ERR_BODY_MALFORMED, AH_ERR_BODY_TOO_LARGE, AH_ERR_HOST_REFUSED, AH_ERR_MCP_EVENT_NOT_FOUND, AH_ERR_MCP_SESSION_NOT_FOUND, AH_ERR_MCP_STREAM_ENDED, AH_ERR_REQUEST_INVALID, AH_ERR_TOO_MANY_STREAMS, errorBody } from '../errors.js'
import { sendResponse, webRequestOf } from '../http/fetch-bridge.js'
import { jsonRpcError } from '../mcp/json-rpc-error.js'
import type { McpCall } from '../mcp/server.js'
import type { McpSession, McpSessions } from '../mcp/sessions.js'
import { ToolCatalogue } from '../mcp/tools.js'
import { MCP_INITIALIZE_EXAMPLE, MCP_MAX_BATCH, MCP_TOOLS_CALL_EXAMPLE, McpBody, McpErrorAnswer, McpHeaders, McpMessage } from '../protocol/mcp.js'
import { documented, genericErrorResponses, validationError, type ErrorExample } from '../protocol/openapi.js'
import type { ErrorBody } from '../protocol/response.js'

const EXAMPLE_SESSION = '6f1b7c1e-2d3a-4b5c-8d9e-0a1b2c3d4e5f'

const DESCRIPTION = [
  'The [Model Context Protocol](https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#streamable-http) endpoint (Streamable HTTP, stateful): every hosted agent is a tool (one per capability: `<agent>`, or `<agent>.<capability>` for an agent with several), and `tools/call` runs it like `POST /v1/assist` does.',
  '',
  'An MCP client does all of this itself: `initialize` (no `Mcp-Session-Id`; the answer carries one), then every later request with that `Mcp-Session-Id` header, `Accept: application/json, text/event-stream`, and the same key as `initialize` (a session is its key\'s: any other gets 404). Answers to requests are `text/event-stream` (progress and logging notifications, then the JSON-RPC response); notifications and responses are answered 202.',
  '',
  'Every refusal is a JSON-RPC error object with `id` null, under its HTTP status: the MCP transport\'s own (an `Accept` without both media types: 406; an unsupported `MCP-Protocol-Version`: 400; a session already initialized: 400), and the host\'s (authentication, scopes, limits, the body, the session), whose `error.data` is the error body every other route answers, with its `AH_ERR_*` code. See docs/mcp.md, "Errors".'
].join('\n')

/** A refusal of `/mcp` for one status: what it means, and the errors that answer it, as JSON-RPC errors. */
function errorResponse (description: string, ...errors: ErrorExample[]): ReturnType<typeof documented<typeof McpErrorAnswer>> {
  return documented(McpErrorAnswer, { description, examples: errors.map((error) => jsonRpcError(errorBody(error))) })
}

/** The answers every scoped route may give (401, 403, 429), as `/mcp` gives them. */
const genericErrors = Object.fromEntries(Object.entries(genericErrorResponses('assist:invoke')).map(([status, schema]) => {
  const { description, examples } = schema as unknown as { description: string, examples: ErrorBody[] }
  return [status, documented(McpErrorAnswer, { description, examples: examples.map(jsonRpcError) })]
}))

const sessionNotFound = errorResponse('The `Mcp-Session-Id` names no open MCP session of this key (closed, expired, or another key\'s): initialize again', new AH_ERR_MCP_SESSION_NOT_FOUND(EXAMPLE_SESSION))
const hostRefused = errorResponse('The DNS-rebinding guard refused the `Host` or `Origin` header (`AH_ERR_HOST_REFUSED`)', new AH_ERR_HOST_REFUSED('Host "attacker.example:3000" is not a name of this server (add it to ALLOWED_HOSTS)'))
const noSession = (what: string): ReturnType<typeof errorResponse> => errorResponse(`${what} without \`Mcp-Session-Id\` (\`AH_ERR_REQUEST_INVALID\`)`, new AH_ERR_REQUEST_INVALID('send the Mcp-Session-Id header that initialize answered with (or initialize first)'))

/**
 * The MCP SDK's server side and this host's server and sessions on it, loaded by the first request to
 * `/mcp` rather than at boot: a server nobody calls over MCP does not load the SDK and its schemas
 * (some 450 modules, a third of a second of CPU at each start).
 */
async function loadMcp (): Promise<{ isInitializeRequest: (value: unknown) => boolean, createMcpServer: typeof import('../mcp/server.js').createMcpServer, McpSessions: typeof McpSessions, resumeStream: typeof import('../mcp/resume.js').resumeStream }> {
  const [types, server, sessions, resume] = await Promise.all([import('@modelcontextprotocol/sdk/types.js'), import('../mcp/server.js'), import('../mcp/sessions.js'), import('../mcp/resume.js')])
  return { isInitializeRequest: types.isInitializeRequest, createMcpServer: server.createMcpServer, McpSessions: sessions.McpSessions, resumeStream: resume.resumeStream }
}

/** The JSON-RPC requests in a body (notifications and responses ask for no answer). */
function requestsOf (body: McpBody | undefined): McpMessage[] {
  if (body === undefined) return []
  return (Array.isArray(body) ? body : [body]).filter((m) => m.method !== undefined && m.id !== undefined)
}

/** The MCP version whose clients take a priming event (an SSE id with empty data) and resume a stream from it (SEP-1699). */
const RESUMABLE_SINCE = '2025-11-25'
const VERSION = /^\d{4}-\d{2}-\d{2}$/

/** Text frames as bytes, for a web stream. */
async function * encoded (frames: AsyncIterable<string>): AsyncIterable<Uint8Array> {
  const encoder = new TextEncoder()
  for await (const frame of frames) yield encoder.encode(frame)
}

/** Where `/mcp`'s protected resource metadata is (RFC 9728), with `AUTH_MODE=jwt`. */
const RESOURCE_METADATA_PATH = '/.well-known/oauth-protected-resource/mcp'

/**
 * `/mcp`: the MCP server binding (Streamable HTTP, the SDK's transport in stateful mode, one MCP
 * server per session: `src/mcp/`). Sessions are this plugin's: bound to the principal that
 * initialized them, closed when idle (`MCP_SESSION_IDLE_MS`), past `MCP_MAX_SESSIONS` per principal,
 * on `DELETE /mcp`, and on shutdown. The DNS-rebinding guard (`plugins/dns-rebinding.ts`), authentication,
 * scopes and rate limits are every route's; `/mcp` also checks `Origin` when not bound to loopback.
 */
const mcpRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const config = app.config
  const catalogue = new ToolCatalogue(app.agents.list())
  let loading: ReturnType<typeof loadMcp> | undefined
  const mcp = async (): ReturnType<typeof loadMcp> => await (loading ??= loadMcp())
  // made with the first request to /mcp (sessions live in the store: one may have begun on another instance, or before a restart)
  let sessions: McpSessions | undefined
  const opened = async (): Promise<McpSessions> => {
    const { McpSessions, createMcpServer } = await mcp()
    sessions ??= new McpSessions({
      store: app.stores.mcp,
      instance: app.instanceId,
      idleMs: config.MCP_SESSION_IDLE_MS,
      maxPerOwner: config.MCP_MAX_SESSIONS,
      keepAliveMs: config.SSE_HEARTBEAT_MS,
      retryMs: config.SSE_RETRY_MS,
      log: app.log,
      createServer: (session) => createMcpServer({ engine: app.assist, catalogue, events: app.events, version: pkg.version, log: app.log, tasks: { runs: app.ledger, interrupts: app.stores.interrupts, retentionMs: config.JOURNAL_RETENTION_MS }, ...session })
    })
    return sessions
  }
  // after the engine's own preClose (a parent's hook runs first): every run has ended, so tool calls answer, then this instance's copies of the sessions close (the sessions go on in the store)
  app.addHook('preClose', async () => { await sessions?.close() })

  // one error shape per protocol: the host's refusals here are JSON-RPC errors, as the MCP transport's own are
  // (sent as text: the routes' response schemas would otherwise serialize them)
  app.setErrorHandler((err: FastifyError, request, reply) => {
    const body = app.errorAnswer(err, request, reply)
    return reply.code(body.statusCode).type('application/json; charset=utf-8').send(JSON.stringify(jsonRpcError(body)))
  })

  // MCP authorization (RFC 9728): with JWTs, a client finds here which authorization server issues
  // the tokens /mcp takes; API keys come from this server, so there is nothing to discover
  const jwt = config.AUTH_MODE === 'jwt'
  const origin = (request: FastifyRequest): string => `${request.protocol}://${request.host}`
  if (jwt) {
    const metadata = {
      schema: {
        hide: true,
        response: { 200: Type.Object({ resource: Type.String(), authorization_servers: Type.Array(Type.String()), bearer_methods_supported: Type.Array(Type.String()), scopes_supported: Type.Array(Type.String()), resource_name: Type.String() }) }
      }
    }
    // the path-suffixed document first (RFC 9728 §3.1, which MCP clients ask for first), then the origin's
    for (const path of [RESOURCE_METADATA_PATH, '/.well-known/oauth-protected-resource']) {
      app.get(path, metadata, async (request) => ({
        resource: `${origin(request)}/mcp`,
        authorization_servers: [config.JWT_ISSUER],
        bearer_methods_supported: ['header'],
        scopes_supported: ['assist:invoke'],
        resource_name: 'agent-host'
      }))
    }
  }

  // RFC 6750: a refusal for want of a bearer token says which scheme to use (and, with JWTs, where
  // the resource's metadata is: MCP's authorization discovery)
  app.addHook('onSend', async (request, reply) => {
    if (reply.statusCode === 401) reply.header('www-authenticate', `Bearer realm="agent-host"${jwt ? `, resource_metadata="${origin(request)}${RESOURCE_METADATA_PATH}"` : ''}`)
  })

  /** The caller's session `id` (this instance's copy); for anyone else, or once closed, it does not exist. */
  const sessionOf = async (request: FastifyRequest, id: string | undefined, what: string): Promise<McpSession> => {
    if (id === undefined) throw new AH_ERR_REQUEST_INVALID(`${what}: send the Mcp-Session-Id header that initialize answered with (or initialize first)`)
    const session = await (await opened()).find(id, request.identity.id)
    if (session === undefined) throw new AH_ERR_MCP_SESSION_NOT_FOUND(id)
    return session
  }

  /** The headers the hooks set (trace, rate limit, CORS), which go out with the transport's answer. */
  const hookHeaders = (reply: FastifyReply): Record<string, number | string | string[]> =>
    Object.fromEntries(Object.entries(reply.getHeaders()).filter((entry): entry is [string, number | string | string[]] => entry[1] !== undefined))

  /**
   * Hand one HTTP exchange to the session's transport: its JSON-RPC requests are answered for this
   * request's caller, and the client going away (one whose stream cannot be resumed) aborts what the exchange carries. A batch is
   * limited as its requests would be one by one, all of it or none before anything runs: each
   * request counts against the caller's rate limit (the HTTP request paid for the first), and each
   * tool call (and each `tasks/result`, which waits on a run) takes one of the caller's stream slots (as a CAP stream does) until the answer ends.
   */
  const exchange = async (request: FastifyRequest, reply: FastifyReply, session: McpSession, body: McpBody | undefined): Promise<FastifyReply> => {
    const requests = requestsOf(body)
    await app.limits.callerRequests(request, reply, requests.length - 1)
    // a task's tasks/result waits on its run as a call does
    const streams = requests.filter((m) => m.method === 'tools/call' || m.method === 'tasks/result').length
    const release = streams > 0 ? await app.limits.openStream(request, reply, streams) : undefined
    const gone = new AbortController()
    const call: McpCall = {
      identity: request.identity,
      traceId: request.traceId,
      gone: gone.signal,
      log: request.log,
      admit: async (agent) => { await app.limits.agentRun(request, reply, agent) },
      runTrace: (trace) => request.runTrace(trace)
    }
    const ids = requests.map((m) => m.id as RequestId)
    const leave = session.enter(ids, call)
    // a client of MCP 2025-11-25 or later gets its stream's events stored and may resume it: its
    // connection going away is not a cancellation (the specification: it sends notifications/cancelled)
    // (the version the session's client asked for at initialize: a client of 2025-11-25 that names an
    // older version in a request's header, as the conformance suite does, still takes a priming event)
    const negotiated = String(session.record.initialize.protocolVersion ?? '')
    const named = request.headers['mcp-protocol-version'] as string | undefined
    const headers = named !== undefined && VERSION.test(named) && named < negotiated ? { ...request.headers, 'mcp-protocol-version': negotiated } : request.headers
    const resumable = (headers['mcp-protocol-version'] ?? negotiated) >= RESUMABLE_SINCE
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) {
        if (resumable) session.detach(ids)
        else gone.abort()
      }
      leave()
      release?.()
    })
    // a cancellation of a call another instance runs is sent on to it (the SDK here knows nothing of it)
    for (const message of Array.isArray(body) ? body : body === undefined ? [] : [body]) {
      const params = message.params as { requestId?: RequestId, reason?: string } | undefined
      if (message.method === 'notifications/cancelled' && params?.requestId !== undefined && !session.runs(params.requestId)) {
        await sessions?.cancelElsewhere(session, params.requestId, params.reason)
      }
    }
    reply.hijack()
    const response = await session.handle(webRequestOf(request.method, request.url, headers), body)
    await sendResponse(reply.raw, response, hookHeaders(reply))
    return reply
  }

  const schema = {
    tags: ['assist'],
    headers: McpHeaders
  }
  // the MCP specification: servers validate Origin on every connection, wherever they are bound
  const routeConfig = { originGuard: true }

  app.post('/mcp', {
    config: routeConfig,
    schema: {
      ...schema,
      operationId: 'mcpPost',
      summary: 'MCP: send JSON-RPC messages (initialize, tools/list, tools/call, notifications)',
      description: DESCRIPTION,
      body: documented(McpBody, { examples: [MCP_INITIALIZE_EXAMPLE, MCP_TOOLS_CALL_EXAMPLE] }),
      produces: ['text/event-stream', 'application/json'],
      response: {
        ...genericErrors,
        200: documented(McpMessage, { description: 'For a body with requests: `text/event-stream` whose events (`event: message`) are JSON-RPC messages (notifications, then the responses), or the JSON-RPC response itself; `initialize`\'s answer carries the `Mcp-Session-Id` header' }),
        202: documented(Type.Null(), { description: 'A body of notifications and responses only: accepted' }),
        400: errorResponse(`The body is not JSON (\`AH_ERR_BODY_MALFORMED\`, JSON-RPC -32700), not a JSON-RPC message or a batch of at most ${MCP_MAX_BATCH} (\`AH_ERR_VALIDATION\`, -32600), or a request other than \`initialize\` came without \`Mcp-Session-Id\` (\`AH_ERR_REQUEST_INVALID\`)`,
          new AH_ERR_BODY_MALFORMED('Unexpected end of JSON input'), validationError('/jsonrpc', 'must be equal to constant'), new AH_ERR_REQUEST_INVALID('POST /mcp: send the Mcp-Session-Id header that initialize answered with (or initialize first)')),
        403: hostRefused,
        404: sessionNotFound,
        413: errorResponse('The body is larger than `BODY_LIMIT`', new AH_ERR_BODY_TOO_LARGE(1048576)),
        429: errorResponse('The caller is past its rate limit (each request of a batch counts), or its `MAX_STREAMS_PER_CALLER` streams cannot hold one more per `tools/call` (`AH_ERR_TOO_MANY_STREAMS`): a batch is refused whole, before any of it runs', new AH_ERR_TOO_MANY_STREAMS('this caller holds 20 open already'))
      }
    }
  }, async (request, reply) => {
    const body = request.body
    const id = request.headers['mcp-session-id']
    if (id !== undefined) return await exchange(request, reply, await sessionOf(request, id, 'POST /mcp'), body)
    const { isInitializeRequest } = await mcp()
    const initialize = (Array.isArray(body) ? body : [body]).find((m) => isInitializeRequest(m))
    if (initialize === undefined) return await exchange(request, reply, await sessionOf(request, id, 'POST /mcp'), body)
    const session = await (await opened()).create(request.identity.id, (initialize.params ?? {}) as Record<string, unknown>)
    try {
      await exchange(request, reply, session, body)
    } finally {
      // initialize was refused (a batch, a bad Accept, a limit): the session never began
      if (session.transport.sessionId === undefined) await session.close()
    }
    return reply
  })

  app.get('/mcp', {
    config: routeConfig,
    schema: {
      ...schema,
      operationId: 'mcpStream',
      summary: 'MCP: open the session\'s stream of server messages',
      description: [
        'An MCP client opens it after `initialize` (with `Mcp-Session-Id` and `Accept: text/event-stream`); it stays open while the session lives, one per session and instance (a second is a 409 from the MCP transport).',
        '',
        'With `Last-Event-ID` (the `id:` of an event the client received), it resumes the stream that event was sent on instead, on any instance: the events sent since, then the rest as they come, until the request\'s answer. Every stream of a client of MCP 2025-11-25 or later is kept this way (its first event is a priming event with an id), and such a client\'s connection going away does not cancel its call.'
      ].join('\n'),
      produces: ['text/event-stream'],
      response: {
        ...genericErrors,
        200: documented(McpMessage, { description: '`text/event-stream` of JSON-RPC messages the server sends outside any request (`: keepalive` comments keep it open)' }),
        400: noSession('GET /mcp'),
        403: hostRefused,
        404: errorResponse('The `Mcp-Session-Id` names no open MCP session of this key (initialize again), or the `Last-Event-ID` names no stored event of it, or its stream has ended (its answer was sent, or its request cancelled)',
          new AH_ERR_MCP_SESSION_NOT_FOUND(EXAMPLE_SESSION), new AH_ERR_MCP_EVENT_NOT_FOUND('42'), new AH_ERR_MCP_STREAM_ENDED('42'))
      }
    }
  }, async (request, reply) => {
    const session = await sessionOf(request, request.headers['mcp-session-id'], 'GET /mcp')
    const from = request.headers['last-event-id']
    // one per session, and a principal's sessions are bounded (MCP_MAX_SESSIONS): it takes no stream slot
    if (from === undefined) return await exchange(request, reply, session, undefined)
    const { resumeStream } = await mcp()
    const gone = new AbortController()
    const resumed = await resumeStream(sessions as McpSessions, session, from, { signal: gone.signal, keepAliveMs: config.SSE_HEARTBEAT_MS })
    if (resumed === 'unknown') throw new AH_ERR_MCP_EVENT_NOT_FOUND(from)
    if (resumed === 'ended') throw new AH_ERR_MCP_STREAM_ENDED(from)
    // the rest of a tool call's stream: a stream slot, as the call's was
    const release = await app.limits.openStream(request, reply, 1)
    reply.raw.on('close', () => { gone.abort(); release() })
    reply.hijack()
    await sendResponse(reply.raw, new Response(ReadableStream.from(encoded(resumed)), {
      headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no', 'mcp-session-id': session.id }
    }), hookHeaders(reply))
    return reply
  })

  app.delete('/mcp', {
    config: routeConfig,
    schema: {
      ...schema,
      operationId: 'mcpDeleteSession',
      summary: 'MCP: end the session',
      description: 'Closes the session named by `Mcp-Session-Id`: its tool calls\' runs are cancelled, and the id is not valid any more.',
      response: {
        ...genericErrors,
        200: documented(Type.Null(), { description: 'The session is closed' }),
        400: noSession('DELETE /mcp'),
        403: hostRefused,
        404: sessionNotFound
      }
    }
  }, async (request, reply) => {
    const session = await sessionOf(request, request.headers['mcp-session-id'], 'DELETE /mcp')
    // on every instance: the store tells the others, this one closes its copy before answering
    if (!await (sessions as McpSessions).remove(session.id)) throw new AH_ERR_MCP_SESSION_NOT_FOUND(session.id)
    return await reply.code(200).send(null)
  })
}

export default mcpRoutes
