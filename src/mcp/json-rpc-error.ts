import type { McpErrorAnswer } from '../protocol/mcp.js'
import type { ErrorBody } from '../protocol/response.js'

/** The JSON-RPC error code of a host error on `/mcp`, as the MCP SDK's transport codes its own answers of the same kind. */
function rpcCode (body: ErrorBody): number {
  switch (body.code) {
    case 'AH_ERR_BODY_MALFORMED': return -32700
    case 'AH_ERR_VALIDATION': return -32600
    case 'AH_ERR_MCP_SESSION_NOT_FOUND': return -32001
  }
  return body.statusCode >= 500 ? -32603 : -32000
}

/** A host error body as `/mcp` answers it: a JSON-RPC error with no id, the body whole in `error.data` (see {@link McpErrorAnswer}). */
export function jsonRpcError (body: ErrorBody): McpErrorAnswer {
  return { jsonrpc: '2.0', id: null, error: { code: rpcCode(body), message: body.message, data: body } }
}
