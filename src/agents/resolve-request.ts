import { randomUUID } from 'node:crypto'
import { AH_ERR_VALIDATION, withDetails } from '../errors.js'
import type { ResolvedAgentRequest, ServiceRequest } from '../protocol/envelope.js'

function invalid (path: string, message: string): Error {
  return withDetails(new AH_ERR_VALIDATION(`Invalid request: ${path} ${message}`), { errors: [{ path, message }] })
}

/**
 * Apply CAP.md §2's rules the schema cannot express, and its defaults: the two session ids agree;
 * `parent_request_id` needs `root_request_id`; `request_id` defaults to a new UUID,
 * `root_request_id` to `request_id`, `timestamp` to now, `metadata` to `{}`.
 * @throws `AH_ERR_VALIDATION` naming the failing path
 */
export function resolveAgentRequest (envelope: ServiceRequest): ResolvedAgentRequest {
  const { payload, context } = envelope
  if (payload.session_id.toLowerCase() !== context.session_id.toLowerCase()) {
    throw invalid('/payload/session_id', 'must equal /context/session_id')
  }
  if (payload.parent_request_id !== undefined && payload.root_request_id === undefined) {
    throw invalid('/payload/root_request_id', 'is required when parent_request_id is present')
  }
  const requestId = payload.request_id ?? randomUUID()
  const resolved: ResolvedAgentRequest = {
    session_id: payload.session_id,
    payload: payload.payload,
    request_id: requestId,
    root_request_id: payload.root_request_id ?? requestId,
    timestamp: payload.timestamp ?? new Date().toISOString(),
    metadata: payload.metadata ?? {},
    capabilities: payload.capabilities ?? { supported_events: [], prefers_markdown: true },
    context
  }
  if (payload.parent_request_id !== undefined) resolved.parent_request_id = payload.parent_request_id
  return resolved
}
