import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { LoggingMessageNotificationSchema, type LoggingMessageNotification } from '@modelcontextprotocol/sdk/types.js'
import type { ErrorBody } from '../../src/protocol/response.js'
import type { Teardown } from '../helper.js'
import { checkErrorBody } from '../sse.js'

/** An MCP client (the official SDK's) connected to a test server's `/mcp`, with what it was told. */
export interface Connected {
  client: Client
  transport: StreamableHTTPClientTransport
  /** The logging notifications it received, in order. */
  logs: Array<LoggingMessageNotification['params']>
  /** Errors its transport reported (a refused GET stream, a failed reconnect). */
  errors: Error[]
}

/** A client for `url`'s `/mcp` (not connected), closed after the test. */
export function mcpClient (t: Teardown, url: string, options: { key?: string, headers?: Record<string, string>, sessionId?: string } = {}): Connected {
  const headers = { ...options.headers, ...(options.key !== undefined ? { authorization: `Bearer ${options.key}` } : {}) }
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers },
    ...(options.sessionId !== undefined ? { sessionId: options.sessionId } : {}),
    // a stream the server ends is not retried: a test's server goes away with the test
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 }
  })
  const client = new Client({ name: 'agent-host-tests', version: '1.0.0' })
  const connected: Connected = { client, transport, logs: [], errors: [] }
  client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => { connected.logs.push(notification.params) })
  client.onerror = (err) => { connected.errors.push(err) }
  t.teardown(async () => { await client.close() })
  return connected
}

/** {@link mcpClient}, connected (initialized). */
export async function connect (t: Teardown, url: string, options: Parameters<typeof mcpClient>[2] = {}): Promise<Connected> {
  const connected = mcpClient(t, url, options)
  await connected.client.connect(connected.transport)
  return connected
}

/** A raw JSON-RPC POST to `/mcp` (what a client the SDK does not cover would send). */
export async function post (url: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', ...headers },
    body: JSON.stringify(body),
    ...(signal !== undefined ? { signal } : {})
  })
}

/** A JSON-RPC error answer of `/mcp`, its `error.data` the host's error body. */
export interface RpcErrorAnswer {
  jsonrpc: '2.0'
  id: null
  error: { code: number, message: string, data: ErrorBody }
}

/**
 * `body` as `/mcp` answers an HTTP-level refusal: a JSON-RPC error object (`id` null, as the MCP
 * transport's own), whose `error.data` is the error body every other route answers (its stable code).
 * Throws if it is not one.
 */
export function checkRpcError (body: unknown): RpcErrorAnswer {
  const answer = body as RpcErrorAnswer
  if (answer?.jsonrpc !== '2.0' || answer.id !== null || typeof answer.error?.code !== 'number' || typeof answer.error.message !== 'string') {
    throw new Error(`not a JSON-RPC error answer: ${JSON.stringify(body)}`)
  }
  checkErrorBody(answer.error.data)
  if (answer.error.message !== answer.error.data.message) throw new Error(`the JSON-RPC message is not the error's: ${JSON.stringify(body)}`)
  return answer
}
