import { Type, type Static } from 'typebox'
import { ErrorBody } from './response.js'

// JSON-RPC messages are MCP's (its schema is the specification's): only their envelope is checked
// here, and nothing is dropped (`additionalProperties` stays open), so the SDK's transport sees them whole.

/** A request or notification id: a string or an integer (never null in MCP). */
const JsonRpcId = Type.Union([Type.String(), Type.Integer()])

/** One JSON-RPC 2.0 message of MCP: a request (`method`, `id`), a notification (`method`), or a response (`id`, `result` or `error`). */
export const McpMessage = Type.Object({
  jsonrpc: Type.Literal('2.0'),
  /** A request's or a response's id. */
  id: Type.Optional(JsonRpcId),
  /** A request's or a notification's method, for example `initialize`, `tools/list`, `tools/call`, `notifications/cancelled`. */
  method: Type.Optional(Type.String({ minLength: 1 })),
  params: Type.Optional(Type.Object({}, { additionalProperties: true })),
  result: Type.Optional(Type.Object({}, { additionalProperties: true })),
  error: Type.Optional(Type.Object({ code: Type.Integer(), message: Type.String() }, { additionalProperties: true }))
}, { additionalProperties: true, description: 'A JSON-RPC 2.0 message of the Model Context Protocol' })
export type McpMessage = Static<typeof McpMessage>

/**
 * The most messages a JSON-RPC batch to `/mcp` may hold (the MCP SDK's transport takes 100). Each
 * request of a batch counts against its caller's rate limit and each tool call takes a stream slot,
 * as if sent alone; this bounds what one HTTP request may ask at once.
 */
export const MCP_MAX_BATCH = 32

/** The body of `POST /mcp`: one JSON-RPC message, or a batch of at most {@link MCP_MAX_BATCH}. */
export const McpBody = Type.Union([McpMessage, Type.Array(McpMessage, { minItems: 1, maxItems: MCP_MAX_BATCH })])
export type McpBody = Static<typeof McpBody>

/** The headers `/mcp` reads itself (the SDK's transport checks them further). */
export const McpHeaders = Type.Object({
  /** The session `initialize` opened; required on every later request. */
  'mcp-session-id': Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  /** The protocol version `initialize` agreed on. */
  'mcp-protocol-version': Type.Optional(Type.String({ maxLength: 40 })),
  /** `GET /mcp`: resume the stream this event (an SSE `id:`) was sent on, after it. */
  'last-event-id': Type.Optional(Type.String({ minLength: 1, maxLength: 40 }))
})
export type McpHeaders = Static<typeof McpHeaders>

/** An example `initialize` request (what an MCP client sends first). */
export const MCP_INITIALIZE_EXAMPLE: McpMessage = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'curl', version: '1.0.0' } }
}

/** An example `tools/call` of the echo agent. */
export const MCP_TOOLS_CALL_EXAMPLE: McpMessage = {
  jsonrpc: '2.0',
  id: 3,
  method: 'tools/call',
  params: { name: 'echo', arguments: { query: 'hello' }, _meta: { progressToken: 3 } }
}

/**
 * How `/mcp` answers a refusal at the HTTP level (authentication, scopes, limits, the body, the
 * session): a JSON-RPC error object with no id, as the MCP transport answers its own refusals, under
 * the HTTP status every other route would give. `error.data` is the error body those routes answer,
 * with its stable `AH_ERR_*` code.
 */
export const McpErrorAnswer = Type.Object({
  jsonrpc: Type.Literal('2.0'),
  id: Type.Null(),
  error: Type.Object({
    /** -32700 the body is not JSON; -32600 it is not a JSON-RPC message (or batch); -32001 no such session (the MCP SDK's code); -32603 a failure of the server; -32000 any other refusal. */
    code: Type.Integer(),
    /** The error's message, as `data.message`. */
    message: Type.String(),
    data: ErrorBody
  })
}, { description: 'A JSON-RPC 2.0 error answer of the Model Context Protocol endpoint; `error.data` is the host\'s error body' })
export type McpErrorAnswer = Static<typeof McpErrorAnswer>
