import type { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import type { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js'

/** The parts of the MCP SDK's client side that the host's tool calls use. */
export interface McpClientSdk {
  Client: typeof Client
  StdioClientTransport: typeof StdioClientTransport
  StreamableHTTPClientTransport: typeof StreamableHTTPClientTransport
  StreamableHTTPError: typeof StreamableHTTPError
  McpError: typeof McpError
  ErrorCode: typeof ErrorCode
}

let loaded: McpClientSdk | undefined
let loading: Promise<McpClientSdk> | undefined

/**
 * The MCP SDK's client side, loaded when the host first starts a client of an MCP server (a tool is
 * called), not when the host boots: a host whose tools nobody calls does not load the SDK and its
 * schemas (some 450 modules, a third of a second of CPU at each start).
 */
export async function mcpClientSdk (): Promise<McpClientSdk> {
  loading ??= Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/stdio.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    import('@modelcontextprotocol/sdk/types.js')
  ]).then(([client, stdio, http, types]) => {
    loaded = { Client: client.Client, StdioClientTransport: stdio.StdioClientTransport, StreamableHTTPClientTransport: http.StreamableHTTPClientTransport, StreamableHTTPError: http.StreamableHTTPError, McpError: types.McpError, ErrorCode: types.ErrorCode }
    return loaded
  })
  return await loading
}

/** The SDK if {@link mcpClientSdk} has loaded it: until then no value can be one of its classes. */
export function loadedMcpClientSdk (): McpClientSdk | undefined {
  return loaded
}
