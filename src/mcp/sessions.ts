import { randomUUID } from 'node:crypto'
import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import type { RequestId } from '@modelcontextprotocol/sdk/types.js'
import type { RunLogger } from '../assist/run.js'
import type { McpCall, McpServerOptions } from './server.js'

/** What {@link McpSessions} needs to make and expire sessions. */
export interface McpSessionSettings {
  /** MCP_SESSION_IDLE_MS: a session with no open request for this long is closed. */
  idleMs: number
  /** MCP_MAX_SESSIONS: sessions one principal may hold; its least recently used goes when it opens one more. */
  maxPerOwner: number
  /** SSE_HEARTBEAT_MS: the keep-alive comment on the transport's SSE responses. */
  keepAliveMs: number
  /** Make the MCP server of a new session (the SDK's, with this host's handlers). */
  createServer: (session: Pick<McpServerOptions, 'sessionId' | 'callOf' | 'track' | 'closing' | 'endStream'>) => Server
  log: RunLogger
}

/**
 * One MCP session: the SDK's Streamable HTTP transport in stateful mode and the server on it, bound
 * to the principal that initialized it, with its own CAP session for the runs of its tool calls.
 */
export class McpSession {
  /** The principal (key or token subject) that initialized it: nobody else may use it. */
  readonly owner: string
  /** The CAP session of its tool calls' runs. */
  readonly capSessionId = randomUUID()
  readonly transport: StreamableHTTPServerTransport
  readonly server: Server
  /** The exchange that carried each JSON-RPC request still being handled. */
  readonly #calls = new Map<RequestId, McpCall>()
  readonly #running = new Set<Promise<unknown>>()
  readonly #closing = new AbortController()
  #open = 0
  #lastSeen = Date.now()

  constructor (owner: string, transport: StreamableHTTPServerTransport, createServer: McpSessionSettings['createServer']) {
    this.owner = owner
    this.transport = transport
    this.server = createServer({
      sessionId: this.capSessionId,
      closing: this.#closing.signal,
      callOf: (id) => this.#calls.get(id),
      endStream: (id) => { this.transport.closeSSEStream(id) },
      track: (call) => {
        this.#running.add(call)
        const done = (): void => { this.#running.delete(call) }
        call.then(done, done)
      }
    })
  }

  /** The transport's session id (`Mcp-Session-Id`), once initialized. */
  get id (): string | undefined { return this.transport.sessionId }

  /**
   * An HTTP exchange begins: the session is in use until the returned function is called, and the
   * JSON-RPC requests it carries (`ids`) are answered for `call`'s caller.
   */
  enter (ids: readonly RequestId[], call: McpCall): () => void {
    this.#open++
    this.#lastSeen = Date.now()
    for (const id of ids) this.#calls.set(id, call)
    return () => {
      this.#open--
      this.#lastSeen = Date.now()
      for (const id of ids) if (this.#calls.get(id) === call) this.#calls.delete(id)
    }
  }

  /** Whether nothing has used the session since `before` (epoch ms) and no exchange is open. */
  idleSince (before: number): boolean {
    return this.#open === 0 && this.#lastSeen < before
  }

  /** When a request on it last began or ended (epoch ms). */
  get lastSeen (): number { return this.#lastSeen }

  /**
   * Close it: its open requests end and its tool calls' runs are cancelled; resolves (never rejects)
   * once those calls have returned. `drain` (shutdown, once the engine has ended every run): let the tool calls
   * answer first, then close. A call waiting for a person's answer (an elicitation) stops waiting first.
   */
  async close (drain = false): Promise<void> {
    this.#closing.abort()
    if (drain && this.#running.size > 0) {
      await Promise.allSettled(this.#running)
      // the SDK sends a handler's answer a few promise turns after it returns, and closing the transport drops an answer not sent yet
      await new Promise((resolve) => { setImmediate(resolve) })
    }
    await this.transport.close()
    await Promise.allSettled(this.#running)
  }
}

/**
 * The MCP sessions of this server, by `Mcp-Session-Id`. A session belongs to the principal that
 * initialized it (for anyone else it does not exist), closes after `idleMs` unused, and a principal
 * holds at most `maxPerOwner` (opening one more closes its least recently used). Closing all of them
 * is the owner plugin's job on shutdown.
 */
export class McpSessions {
  readonly #sessions = new Map<string, McpSession>()
  readonly #settings: McpSessionSettings
  readonly #timer: NodeJS.Timeout

  constructor (settings: McpSessionSettings) {
    this.#settings = settings
    this.#timer = setInterval(() => { this.sweep() }, Math.max(100, Math.min(60_000, Math.floor(settings.idleMs / 2)))).unref()
  }

  /** The session with this id, if it exists and belongs to `owner`. */
  get (id: string, owner: string): McpSession | undefined {
    const session = this.#sessions.get(id)
    return session?.owner === owner ? session : undefined
  }

  /**
   * A new session for `owner`, not yet initialized: it joins the map when its `initialize` request
   * is accepted (the transport makes its id then), and leaves it when it closes.
   */
  async create (owner: string): Promise<McpSession> {
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      keepAliveMs: this.#settings.keepAliveMs,
      onsessioninitialized: (id) => {
        this.#sessions.set(id, session)
        this.#settings.log.info({ mcpSession: id }, 'MCP session initialized')
        this.#limit(owner, session)
      }
    })
    const session = new McpSession(owner, transport, this.#settings.createServer)
    transport.onclose = () => {
      const id = session.id
      // a session whose initialize was refused never joined the map
      if (id !== undefined) {
        this.#sessions.delete(id)
        this.#settings.log.info({ mcpSession: id }, 'MCP session closed')
      }
    }
    // after onclose is set: the server wraps it
    await session.server.connect(transport)
    return session
  }

  /** Close the owner's least recently used sessions past its limit (never `opened`, the one it just initialized). */
  #limit (owner: string, opened: McpSession): void {
    const others = [...this.#sessions.values()].filter((s) => s.owner === owner && s !== opened)
    others.sort((a, b) => a.lastSeen - b.lastSeen)
    for (const session of others.slice(0, Math.max(0, others.length + 1 - this.#settings.maxPerOwner))) {
      this.#settings.log.info({ mcpSession: session.id }, 'closing the least recently used MCP session of a principal past MCP_MAX_SESSIONS')
      session.close()
    }
  }

  /** Close every session unused for `idleMs`. */
  sweep (now = Date.now()): void {
    for (const session of this.#sessions.values()) {
      if (session.idleSince(now - this.#settings.idleMs)) session.close()
    }
  }

  /** Close every session (shutdown, once the engine has ended every run): their tool calls answer first. */
  async close (): Promise<void> {
    clearInterval(this.#timer)
    await Promise.all([...this.#sessions.values()].map(async (session) => { await session.close(true) }))
  }
}
