import { randomUUID } from 'node:crypto'
import { EventEmitter } from 'node:events'
import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { WebStandardStreamableHTTPServerTransport, type EventStore } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js'
import type { JSONRPCMessage, MessageExtraInfo, RequestId } from '@modelcontextprotocol/sdk/types.js'
import type { RunLogger } from '../assist/run.js'
import type { McpSessionRecord, McpSessionStore, McpSignal } from '../storage/mcp-sessions.js'
import type { McpCall, McpServerOptions } from './server.js'

/** What {@link McpSessions} needs to make, restore and expire sessions. */
export interface McpSessionSettings {
  /** Where sessions, their streams' events and the instances' signals are kept (`Stores.mcp`). */
  store: McpSessionStore
  /** This process's name (`app.instanceId`): the answers to its own server requests come back to it. */
  instance: string
  /** MCP_SESSION_IDLE_MS: a session no request used for this long is closed, on every instance. */
  idleMs: number
  /** MCP_MAX_SESSIONS: sessions one principal may hold; its least recently used goes when it opens one more. */
  maxPerOwner: number
  /** SSE_HEARTBEAT_MS: the keep-alive comment on SSE responses. */
  keepAliveMs: number
  /** SSE_RETRY_MS: the `retry:` of a stream's priming event, how long a client waits before resuming it (0: none). */
  retryMs: number
  /** Make the MCP server of a session (the SDK's, with this host's handlers). */
  createServer: (session: Pick<McpServerOptions, 'sessionId' | 'callOf' | 'track' | 'closing' | 'endStream' | 'level' | 'setLevel'>) => Server
  log: RunLogger
}

/** The level of logging notifications before a client sets one: thoughts, progress steps and warnings, not an agent's debug lines. */
export const DEFAULT_LEVEL = 'info'

/** How long a stream's events are kept for resumption, at least (the session's idle time when longer). */
const MIN_RETENTION_MS = 3_600_000

/** The SDK's id of a session's standalone stream (`GET /mcp`), whose events always tell the instances. */
const STANDALONE_STREAM = '_GET_stream'

/**
 * Messages sent through the transport only to learn which stream a request's messages go on: the
 * SDK names the stream to the event store, which tells the asker and stops the message there.
 */
const probes = new WeakMap<object, (stream: string) => void>()
const PROBED = new Error('an MCP stream probe goes no further than the event store')

/** A server request's id as it goes on the wire: `<the server's id>@<instance>`, so that the client's answer finds the instance that asked. */
const ANSWER_ID = /^(\d+)@(.+)$/

/**
 * The transport the SDK's `Server` is connected to: the SDK's Streamable HTTP transport, with the
 * ids of the server's own requests (elicitation, sampling) made this instance's, so that a client's
 * answer arriving at another instance is sent on to this one; and a way in for messages that
 * reached the session elsewhere (a cancellation, an answer).
 */
class SessionRelay implements Transport {
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void
  onclose?: () => void
  onerror?: (error: Error) => void
  readonly #inner: WebStandardStreamableHTTPServerTransport
  readonly #instance: string
  readonly #forward: (instance: string, message: JSONRPCMessage) => void
  readonly #sending = new Set<Promise<void>>()

  constructor (inner: WebStandardStreamableHTTPServerTransport, instance: string, forward: (instance: string, message: JSONRPCMessage) => void) {
    this.#inner = inner
    this.#instance = instance
    this.#forward = forward
    inner.onmessage = (message, extra) => { this.receive(message, extra) }
    inner.onclose = () => { this.onclose?.() }
    inner.onerror = (error) => { this.onerror?.(error) }
  }

  get sessionId (): string | undefined { return this.#inner.sessionId }

  async start (): Promise<void> { await this.#inner.start() }
  async close (): Promise<void> { await this.#inner.close() }

  async send (message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    const sending = this.#inner.send(this.#outgoing(message), options)
    this.#sending.add(sending)
    try {
      await sending
    } finally {
      this.#sending.delete(sending)
    }
  }

  /** Resolves once every message being sent now is written (or failed): its event stored first, then on its stream. */
  async sent (): Promise<void> {
    await Promise.allSettled([...this.#sending])
  }

  /** A server request (and the server's cancellation of one) with the request's id made this instance's. */
  #outgoing (message: JSONRPCMessage): JSONRPCMessage {
    if (!('method' in message)) return message
    if ('id' in message) return { ...message, id: `${String(message.id)}@${this.#instance}` }
    const params = message.params as { requestId?: unknown } | undefined
    if (message.method === 'notifications/cancelled' && params?.requestId !== undefined) return { ...message, params: { ...params, requestId: `${String(params.requestId)}@${this.#instance}` } }
    return message
  }

  /** A message from the client, through this instance's transport or sent on by another instance. */
  receive (message: JSONRPCMessage, extra?: MessageExtraInfo): void {
    if (!('method' in message) && 'id' in message && typeof message.id === 'string') {
      const answer = ANSWER_ID.exec(message.id)
      if (answer !== null) {
        if (answer[2] === this.#instance) this.onmessage?.({ ...message, id: Number(answer[1]) }, extra)
        else this.#forward(answer[2] as string, message)
        return
      }
    }
    this.onmessage?.(message, extra)
  }
}

/**
 * One MCP session on this instance: the SDK's Streamable HTTP transport and server, for the session
 * every instance knows from the store. Made when the session is initialized here, or restored (its
 * client's `initialize` replayed to a new server) the first time a request of it reaches this
 * instance; closed on every instance when the session ends.
 */
export class McpSession {
  /** The session's record (its id, owner, CAP session) as it was when this copy was made. */
  readonly record: McpSessionRecord
  readonly transport: WebStandardStreamableHTTPServerTransport
  readonly relay: SessionRelay
  readonly server: Server
  /** `logging/setLevel`'s level, as the store had it at the last request. */
  level: string
  /** True while the client's `initialize` is replayed: nothing of it is stored. */
  restoring = false
  /** The exchange that carried each JSON-RPC request still being handled. */
  readonly #calls = new Map<RequestId, McpCall>()
  /** The tool calls this copy runs, by JSON-RPC request id, whether or not their HTTP exchange is still open. */
  readonly #running = new Map<RequestId, Promise<unknown>>()
  /** The streams whose client went away before their end: a client that resumes one follows its events from the store. */
  readonly #detached = new Set<string>()
  readonly #closing = new AbortController()
  readonly #store: McpSessionStore
  #open = 0
  #closed: Promise<void> | undefined

  constructor (record: McpSessionRecord, settings: McpSessionSettings, isNew: (id: string) => Promise<void>) {
    this.record = record
    this.level = record.level ?? DEFAULT_LEVEL
    this.#store = settings.store
    this.transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => record.id,
      keepAliveMs: settings.keepAliveMs,
      ...(settings.retryMs > 0 ? { retryInterval: settings.retryMs } : {}),
      eventStore: this.#eventStore(),
      onsessioninitialized: async (id) => { if (!this.restoring) await isNew(id) }
    })
    this.relay = new SessionRelay(this.transport, settings.instance, (instance, message) => {
      Promise.resolve(settings.store.signal({ kind: 'answer', session: record.id, instance, message: JSON.stringify(message) }))
        .catch((err: unknown) => { settings.log.warn({ err, mcpSession: record.id }, 'an MCP client\'s answer could not be sent on to the instance that asked') })
    })
    this.server = settings.createServer({
      sessionId: record.capSessionId,
      closing: this.#closing.signal,
      callOf: (id) => this.#calls.get(id),
      level: () => this.level,
      setLevel: async (level) => {
        this.level = level
        await settings.store.setLevel(record.id, level)
      },
      endStream: (id) => { this.#endStream(id) },
      track: (call, id) => {
        this.#running.set(id, call)
        const done = (): void => { if (this.#running.get(id) === call) this.#running.delete(id) }
        call.then(done, done)
      }
    })
  }

  get id (): string { return this.record.id }
  get owner (): string { return this.record.owner }

  /** The SDK's event store over the session store: every message of the session's streams is kept, for a client that resumes. */
  #eventStore (): EventStore {
    return {
      storeEvent: async (stream, message) => {
        const probe = probes.get(message)
        if (probe !== undefined) {
          probe(stream)
          throw PROBED
        }
        if (this.restoring) return '0'
        const tell = this.#detached.has(stream) || stream === STANDALONE_STREAM
        if (tell && 'id' in message && !('method' in message)) this.#detached.delete(stream)
        return await this.#store.append(this.id, stream, JSON.stringify(message), tell)
      },
      // resumption is the route's (`routes/mcp.ts`, from the store on any instance): the transport never replays
      replayEventsAfter: async () => { throw new Error('MCP streams are resumed by the route') }
    }
  }

  /** Hand one HTTP request (and its parsed body) to the session's transport: its response (an SSE stream, JSON, or a status). */
  async handle (request: Request, body: unknown): Promise<Response> {
    return await this.transport.handleRequest(request, body === undefined ? {} : { parsedBody: body })
  }

  /** The stream (the SDK's id) the messages of request `id` go on, if the transport still has it. */
  async #streamOf (id: RequestId): Promise<string | undefined> {
    let found: string | undefined
    const probe: JSONRPCMessage = { jsonrpc: '2.0', method: 'notifications/agent-host/probe' }
    probes.set(probe, (stream) => { found = stream })
    await this.transport.send(probe, { relatedRequestId: id }).catch(() => {})
    return found
  }

  /** An HTTP exchange begins: the session is in use until the returned function is called. */
  enter (ids: readonly RequestId[], call: McpCall): () => void {
    this.#open++
    for (const id of ids) this.#calls.set(id, call)
    return () => {
      this.#open--
      for (const id of ids) if (this.#calls.get(id) === call) this.#calls.delete(id)
    }
  }

  /** Whether an exchange is open or a tool call runs here (the session is in use, though no request may have come lately). */
  get busy (): boolean { return this.#open > 0 || this.#running.size > 0 }

  /**
   * The HTTP exchange that carried requests `ids` ended before their answers: their stream's events
   * from now on tell the instances (a client resuming it on any of them follows them from the store).
   */
  detach (ids: readonly RequestId[]): void {
    for (const id of ids) {
      this.#streamOf(id).then((stream) => { if (stream !== undefined) this.#detached.add(stream) }, () => {})
    }
  }

  /** Whether this copy runs the tool call of JSON-RPC request `id`. */
  runs (id: RequestId): boolean { return this.#running.has(id) }

  /** Cancel the request `id` as if its `notifications/cancelled` had come to this instance. */
  cancel (id: RequestId, reason?: string): void {
    this.relay.receive({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, ...(reason !== undefined ? { reason } : {}) } })
  }

  /** A cancelled request gets no answer: its stream ends, and its stored events say so (a client that resumes it is told it ended). */
  #endStream (id: RequestId): void {
    this.transport.closeSSEStream(id)
    this.#streamOf(id).then(async (stream) => {
      if (stream !== undefined) await this.#store.append(this.id, stream, '', this.#detached.delete(stream))
    }).catch(() => {})
  }

  /**
   * Close this copy: its open requests end and its tool calls' runs are cancelled; resolves (never
   * rejects) once those calls have returned. `drain` (shutdown, once the engine has ended every
   * run): let the tool calls answer first, then close. A call waiting for a person's answer (an
   * elicitation) stops waiting first.
   */
  async close (drain = false): Promise<void> {
    this.#closed ??= (async () => {
      this.#closing.abort()
      const running = [...this.#running.values()]
      if (drain && running.length > 0) {
        await Promise.allSettled(running)
        // the SDK sends a handler's answer a few promise turns after it returns (its event is stored first), and closing the transport drops an answer not sent yet
        await new Promise((resolve) => { setImmediate(resolve) })
        await this.relay.sent()
      }
      await this.transport.close()
      await Promise.allSettled(running)
    })()
    await this.#closed
  }
}

/**
 * The MCP sessions of the deployment, as this instance serves them. A session is in the store
 * (`Stores.mcp`): any instance answers any of its requests, restoring its own copy of the session
 * the first time; it belongs to the principal that initialized it (for anyone else it does not
 * exist), closes on every instance after `idleMs` unused, on `DELETE /mcp` or when its owner opens
 * one past `maxPerOwner`. A cancellation or a client's answer that reaches another instance than
 * the one it is for is sent on to it.
 */
export class McpSessions {
  readonly #local = new Map<string, McpSession>()
  readonly #restoring = new Map<string, Promise<McpSession>>()
  readonly #settings: McpSessionSettings
  readonly #timer: NodeJS.Timeout
  readonly #stopSignals: () => void
  /** Resumed streams waiting for their next event, by `<session> <stream>`. */
  readonly #followers = new EventEmitter()

  constructor (settings: McpSessionSettings) {
    this.#settings = settings
    this.#followers.setMaxListeners(0)
    this.#timer = setInterval(() => { this.sweep().catch((err: unknown) => { settings.log.warn({ err }, 'expiring idle MCP sessions failed; the next sweep tries again') }) },
      Math.max(100, Math.min(60_000, Math.floor(settings.idleMs / 2)))).unref()
    this.#stopSignals = settings.store.onSignal((signal) => { this.#signal(signal) })
  }

  get store (): McpSessionStore { return this.#settings.store }

  /** The session `id` if it exists and belongs to `owner`: this instance's copy, restored if it has none. */
  async find (id: string, owner: string): Promise<McpSession | undefined> {
    const record = await this.#settings.store.get(id)
    if (record?.owner !== owner) return undefined
    const now = Date.now()
    // a tenth of the idle time is close enough for expiry, and spares a write per request
    if (now - record.lastSeen > this.#settings.idleMs / 10) await this.#settings.store.touch(id, now)
    const session = this.#local.get(id) ?? await this.#restore(record)
    session.level = record.level ?? DEFAULT_LEVEL
    return session
  }

  /**
   * A new session for `owner` (its client's `initialize` params), not yet initialized: it is stored
   * when the transport accepts its `initialize` (the owner's sessions past the limit are closed then).
   */
  async create (owner: string, initialize: Record<string, unknown>): Promise<McpSession> {
    const record: McpSessionRecord = { id: randomUUID(), owner, capSessionId: randomUUID(), initialize, level: null, lastSeen: Date.now() }
    const session = new McpSession(record, this.#settings, async (id) => {
      const over = await this.#settings.store.create(record, this.#settings.maxPerOwner)
      this.#local.set(id, session)
      this.#settings.log.info({ mcpSession: id }, 'MCP session initialized')
      if (over.length > 0) this.#settings.log.info({ mcpSessions: over }, 'closed the least recently used MCP sessions of a principal past MCP_MAX_SESSIONS')
    })
    await session.server.connect(session.relay)
    return session
  }

  /** This instance's copy of a session made elsewhere (or before a restart): a new server, given its client's `initialize` again. */
  async #restore (record: McpSessionRecord): Promise<McpSession> {
    let restoring = this.#restoring.get(record.id)
    if (restoring === undefined) {
      restoring = (async () => {
        const session = new McpSession(record, this.#settings, async () => {})
        await session.server.connect(session.relay)
        session.restoring = true
        try {
          const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
          const init = await session.transport.handleRequest(new Request('http://localhost/mcp', { method: 'POST', headers }),
            { parsedBody: { jsonrpc: '2.0', id: 0, method: 'initialize', params: record.initialize } })
          await init.text()
          const version = String(record.initialize.protocolVersion ?? '')
          await session.transport.handleRequest(new Request('http://localhost/mcp', { method: 'POST', headers: { ...headers, 'mcp-session-id': record.id, 'mcp-protocol-version': version } }),
            { parsedBody: { jsonrpc: '2.0', method: 'notifications/initialized' } })
        } finally {
          session.restoring = false
        }
        this.#local.set(record.id, session)
        this.#settings.log.info({ mcpSession: record.id }, 'MCP session restored on this instance')
        return session
      })()
      this.#restoring.set(record.id, restoring)
      restoring.finally(() => { this.#restoring.delete(record.id) }).catch(() => {})
    }
    return await restoring
  }

  /** End session `id` on every instance: its tool calls are cancelled; false when it did not exist. */
  async remove (id: string): Promise<boolean> {
    const removed = await this.#settings.store.remove([id])
    // this instance's copy closes before the answer (the others when told)
    await this.#closeLocal(id)
    return removed.length > 0
  }

  /** A request cancelled at this instance that runs elsewhere: the instance running it is told. */
  async cancelElsewhere (session: McpSession, request: RequestId, reason?: string): Promise<void> {
    await this.#settings.store.signal({ kind: 'cancelled', session: session.id, request, ...(reason !== undefined ? { reason } : {}) })
  }

  /** Call `wake` when stream `stream` of session `session` has a new event (on any instance); returns the function that stops it. */
  follow (session: string, stream: string, wake: () => void): () => void {
    const key = `${session} ${stream}`
    this.#followers.on(key, wake)
    return () => { this.#followers.off(key, wake) }
  }

  #signal (signal: McpSignal): void {
    switch (signal.kind) {
      case 'closed':
        this.#closeLocal(signal.session).catch(() => {})
        this.#followers.emit(`${signal.session} closed`)
        return
      case 'cancelled': {
        const session = this.#local.get(signal.session)
        if (session?.runs(signal.request) === true) session.cancel(signal.request, signal.reason)
        return
      }
      case 'answer':
        if (signal.instance === this.#settings.instance) this.#local.get(signal.session)?.relay.receive(JSON.parse(signal.message) as JSONRPCMessage)
        return
      case 'event':
        this.#followers.emit(`${signal.session} ${signal.stream}`)
    }
  }

  async #closeLocal (id: string): Promise<void> {
    const session = this.#local.get(id)
    if (session === undefined) return
    this.#local.delete(id)
    this.#settings.log.info({ mcpSession: id }, 'MCP session closed')
    await session.close()
  }

  /** Keep the sessions in use here alive, close every session unused for `idleMs` (on every instance), and drop old events. */
  async sweep (now = Date.now()): Promise<void> {
    const store = this.#settings.store
    for (const session of this.#local.values()) if (session.busy) await store.touch(session.id, now)
    const idle = await store.idle(now - this.#settings.idleMs)
    if (idle.length > 0) {
      const closed = await store.remove(idle)
      if (closed.length > 0) this.#settings.log.info({ mcpSessions: closed }, 'closed MCP sessions idle for MCP_SESSION_IDLE_MS')
    }
    await store.prune(now - Math.max(MIN_RETENTION_MS, this.#settings.idleMs))
  }

  /** Close this instance's copies (shutdown, once the engine has ended every run): their tool calls answer first. The sessions live on in the store. */
  async close (): Promise<void> {
    clearInterval(this.#timer)
    this.#stopSignals()
    await Promise.all([...this.#local.values()].map(async (session) => { await session.close(true) }))
    this.#local.clear()
  }
}
