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
 * The `payload.metadata` key that marks the run of a task-augmented `tools/call` (an MCP task: the
 * run is the task, its request id the task id), with the task's {@link TaskMark}.
 */
export const TASK_MARK = 'mcp_task'

/** What a task's run carries under {@link TASK_MARK}: what the task was created with, kept with the run rather than beside it. */
export interface TaskMark {
  /** The task's `ttl` (ms from its creation), as granted. */
  ttl: number
}

/**
 * The CAP envelope of a `tools/call`, as a CAP client would send it: a fresh request id, the MCP
 * session's CAP session, the caller as `context.user`, the request's trace, the tool's arguments as
 * `payload.payload` and its capability as `payload.metadata.capability`. A run of a task (`task`)
 * goes on whoever follows it (`on_disconnect: continue`), and the task's own (its first) is marked
 * as the task (`metadata.mcp_task`: `task.mark`).
 */
export function toolCallEnvelope (args: Record<string, unknown>, origin: ToolCallOrigin, task?: { mark?: TaskMark }): ServiceRequest {
  const taskRun = task === undefined ? {} : { on_disconnect: 'continue', ...(task.mark !== undefined ? { [TASK_MARK]: { ttl: task.mark.ttl } } : {}) }
  return bindingEnvelope('mcp', origin, {
    requestId: randomUUID(),
    sessionId: origin.sessionId,
    payload: args,
    metadata: { capability: origin.capability, ...taskRun },
    capabilities: { supported_events: [], prefers_markdown: true }
  })
}
