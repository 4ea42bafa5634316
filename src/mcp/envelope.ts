import { randomUUID } from 'node:crypto'
import { bindingEnvelope } from '../protocol/binding-envelope.js'
import type { ServiceRequest } from '../protocol/envelope.js'

/** What a tool call's envelope is made from, besides the arguments. */
export interface ToolCallOrigin {
  /** The hosted agent's manifest id. */
  agentId: string
  /** The capability the tool stands for. */
  capability: string
  /** The CAP session of the MCP session (one per MCP session). */
  sessionId: string
  /** The caller's principal id (`context.user.user_id`, as for A2A). */
  userId: string
  /** The W3C trace id of the HTTP request that carried the call (32 hex digits). */
  traceId: string
}

/**
 * The CAP envelope of a `tools/call`, as a CAP client would send it: a fresh request id, the MCP
 * session's CAP session, the caller as `context.user`, the request's trace, the tool's arguments as
 * `payload.payload` and its capability as `payload.metadata.capability`.
 */
export function toolCallEnvelope (args: Record<string, unknown>, origin: ToolCallOrigin): ServiceRequest {
  return bindingEnvelope('mcp', origin, {
    requestId: randomUUID(),
    sessionId: origin.sessionId,
    payload: args,
    metadata: { capability: origin.capability },
    capabilities: { supported_events: [], prefers_markdown: true }
  })
}
