import { setTimeout as sleep } from 'node:timers/promises'
import type { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import type { Tool } from '@modelcontextprotocol/sdk/types.js'
import { loadedMcpClientSdk, mcpClientSdk, type McpClientSdk } from './mcp-sdk.js'
import { HostOAuthProvider } from './oauth-provider.js'
import type { ToolServerSpec } from './servers-file.js'

/** Where a server is in its life: never asked for yet, starting, answering, or down (crashed, or could not start). */
export type ServerStatus = 'not_started' | 'starting' | 'running' | 'failed'

/** The logger the tools write to (pino's shape). */
export interface ToolLog {
  debug(obj: object, msg?: string): void
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
}

export interface ConnectionOptions {
  /** What a stdio server gets of the host's environment (SUBPROCESS_ENV_ALWAYS), before its entry's own `env`. */
  baseEnv: Readonly<Record<string, string>>
  /** How the host names itself to servers (`initialize`'s `clientInfo`). */
  clientInfo: { name: string, version: string }
  log: ToolLog
}

/** The last lines a server wrote on stderr that its failure message quotes. */
const STDERR_LINES = 5
const STDERR_LINE_CHARS = 300
/** How long closing waits for an HTTP server to end the session. */
const TERMINATE_MS = 2000

/** An error as a failure message says it: its message, with the HTTP status of an HTTP error (an OAuth failure is the server's 401) and the cause of a failed fetch. */
export function describeError (err: unknown): string {
  const e = err as { message?: unknown, code?: unknown, cause?: { message?: unknown, code?: unknown } } | undefined
  let text = String(e?.message ?? err)
  const StreamableHTTPError = loadedMcpClientSdk()?.StreamableHTTPError
  if (StreamableHTTPError !== undefined && err instanceof StreamableHTTPError && typeof e?.code === 'number' && e.code > 0) text = `HTTP ${e.code}: ${text}`
  const cause = e?.cause?.code ?? e?.cause?.message
  return cause !== undefined ? `${text} (${String(cause)})` : text
}

/**
 * One MCP server and the host's client of it (the official SDK's `Client` over its stdio or
 * Streamable HTTP transport). Started on first use: a server nobody calls costs nothing, and a
 * server that is down does not stop the host from booting. A server whose process exits (or whose
 * connection is lost) fails the calls in flight (the SDK rejects them: "Connection closed") and is
 * `failed` until the next call starts it again. Closing it stops its process: stdin closed, then
 * SIGTERM, then SIGKILL (the SDK's order). An HTTP server whose entry has `oauth` gets the access
 * token of its {@link HostOAuthProvider}, which lives as long as this connection (its tokens survive
 * a reconnection); an OAuth failure fails the call as the server's 401, saying which step failed.
 */
export class McpConnection {
  readonly spec: ToolServerSpec
  readonly #o: ConnectionOptions
  readonly #oauth: HostOAuthProvider | undefined
  #client: Client | undefined
  #starting: Promise<Client> | undefined
  /** The client of a start in progress: closing closes it too, so that shutdown does not wait for a slow start. */
  #connecting: Client | undefined
  #status: ServerStatus = 'not_started'
  #error: string | undefined
  #stderr: string[] = []
  #closed = false

  constructor (spec: ToolServerSpec, options: ConnectionOptions) {
    this.spec = spec
    this.#o = options
    const t = spec.transport
    this.#oauth = t.kind === 'streamable_http' && t.oauth !== undefined ? new HostOAuthProvider(t.oauth, { server: t.url }) : undefined
  }

  get status (): ServerStatus { return this.#status }
  /** Why it is `failed`: the last start or crash, with what the server said on stderr. */
  get error (): string | undefined { return this.#error }

  /** The connected client: the running one, or one made by starting the server (concurrent callers share one start). */
  async client (): Promise<Client> {
    if (this.#client !== undefined) return this.#client
    this.#starting ??= this.#start().finally(() => { this.#starting = undefined })
    return await this.#starting
  }

  /**
   * Drop `client` after a transport failure (an HTTP server that went away, a lost session): the
   * next call connects again. A client already replaced is left alone.
   */
  lost (client: Client, reason: string): void {
    if (this.#client !== client) return
    this.#client = undefined
    this.#fail(reason)
    client.close().catch(() => {})
  }

  /** Every tool the server lists (all pages). */
  async listTools (timeoutMs: number): Promise<Tool[]> {
    const client = await this.client()
    const tools: Tool[] = []
    let cursor: string | undefined
    do {
      const page = await client.listTools(cursor !== undefined ? { cursor } : undefined, { timeout: timeoutMs })
      tools.push(...page.tools)
      cursor = page.nextCursor
    } while (cursor !== undefined)
    return tools
  }

  /** Stop the server (a start in progress included) and refuse to start it again. */
  async close (): Promise<void> {
    this.#closed = true
    const client = this.#client ?? this.#connecting
    this.#client = undefined
    // the specification asks a client that is done with an HTTP session to end it (DELETE); a server that cannot is not waited for
    const StreamableHTTPClientTransport = loadedMcpClientSdk()?.StreamableHTTPClientTransport
    if (StreamableHTTPClientTransport !== undefined && client?.transport instanceof StreamableHTTPClientTransport) {
      await Promise.race([client.transport.terminateSession().catch(() => {}), sleep(TERMINATE_MS, undefined, { ref: false })])
    }
    await client?.close()
    await this.#starting?.catch(() => {})
  }

  async #start (): Promise<Client> {
    if (this.#closed) throw new Error('the host is shutting down')
    this.#status = 'starting'
    this.#stderr = []
    const sdk = await mcpClientSdk()
    const client = new sdk.Client(this.#o.clientInfo, { capabilities: {} })
    client.onclose = () => {
      if (this.#client !== client) return
      this.#client = undefined
      this.#fail(this.spec.transport.kind === 'stdio' ? 'the server\'s process exited' : 'the connection to the server was closed')
    }
    // an authorization server's error may quote what it was sent: with OAuth, the error is logged as text, masked
    client.onerror = (err) => { this.#o.log.debug({ tool: this.spec.name, ...(this.#oauth !== undefined ? { error: this.#oauth.redact(describeError(err)) } : { err }) }, 'MCP transport error') }
    this.#connecting = client
    try {
      await client.connect(this.#transport(sdk), { timeout: this.spec.startupTimeoutS * 1000 })
      // closed while connecting: close() closed this client, but its answer may have been on its way
      if (this.#closed) throw new Error('the host is shutting down')
    } catch (err) {
      this.#fail(`the server did not start: ${describeError(err)}`)
      await client.close().catch(() => {})
      throw err
    } finally {
      this.#connecting = undefined
    }
    this.#client = client
    this.#status = 'running'
    this.#error = undefined
    this.#o.log.info({ tool: this.spec.name, server: client.getServerVersion() }, 'MCP server started')
    return client
  }

  #fail (reason: string): void {
    if (this.#closed) { this.#status = 'not_started'; return }
    this.#status = 'failed'
    this.#error = this.#stderr.length > 0 ? `${reason} (stderr: ${this.#stderr.join(' | ')})` : reason
    this.#o.log.warn({ tool: this.spec.name, error: this.#error }, 'MCP server failed')
  }

  #transport (sdk: McpClientSdk): Transport {
    const t = this.spec.transport
    if (t.kind === 'streamable_http') {
      const oauth = this.#oauth
      const transport = new sdk.StreamableHTTPClientTransport(t.url, { requestInit: { headers: { ...t.headers } }, ...(oauth !== undefined ? { authProvider: oauth } : {}) })
      if (oauth === undefined) return transport
      // the SDK's auth() runs inside send (on the server's 401) and throws what failed as is: the tool call's rules see the server's 401 instead, saying which OAuth step failed
      const send = transport.send.bind(transport)
      transport.send = async (message, options) => {
        try {
          await send(message, options)
        } catch (err) {
          const failure = oauth.failure(err, describeError(err))
          throw failure !== undefined ? new sdk.StreamableHTTPError(401, failure) : err
        }
      }
      return transport
    }
    const transport = new sdk.StdioClientTransport({
      command: t.command,
      args: [...t.args],
      env: { ...this.#o.baseEnv, ...t.env },
      ...(t.cwd !== undefined ? { cwd: t.cwd } : {}),
      stderr: 'pipe'
    })
    let partial = ''
    transport.stderr?.on('data', (chunk: Buffer) => {
      const lines = (partial + chunk.toString()).split('\n')
      partial = lines.pop() ?? ''
      for (const line of lines.map((l) => l.trim()).filter((l) => l !== '')) {
        this.#o.log.debug({ tool: this.spec.name, stderr: line }, 'MCP server stderr')
        this.#stderr = [...this.#stderr, line.slice(0, STDERR_LINE_CHARS)].slice(-STDERR_LINES)
      }
    })
    return transport
  }
}
