import { randomUUID } from 'node:crypto'
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

/** A W3C trace id (32 hex digits) in a CAP envelope's UUID form. */
function traceUuid (traceId: string): string {
  return `${traceId.slice(0, 8)}-${traceId.slice(8, 12)}-${traceId.slice(12, 16)}-${traceId.slice(16, 20)}-${traceId.slice(20, 32)}`
}

/**
 * The CAP envelope of a `tools/call`, as a CAP client would send it: a fresh request id, the MCP
 * session's CAP session, the caller as `context.user`, the request's trace, the tool's arguments as
 * `payload.payload` and its capability as `payload.metadata.capability`.
 */
export function toolCallEnvelope (args: Record<string, unknown>, origin: ToolCallOrigin): ServiceRequest {
  const requestId = randomUUID()
  return {
    request_id: requestId,
    context: {
      session_id: origin.sessionId,
      agent_id: origin.agentId,
      user: { user_id: origin.userId, tier: 'mcp', locale: 'en' },
      trace: { trace_id: traceUuid(origin.traceId), span_id: randomUUID() },
      permissions: [],
      created_at: new Date().toISOString()
    },
    payload: {
      session_id: origin.sessionId,
      payload: args,
      request_id: requestId,
      metadata: { capability: origin.capability },
      capabilities: { supported_events: [], prefers_markdown: true }
    }
  }
}
