import { randomUUID } from 'node:crypto'
import type { RunLedger } from '../storage/run-ledger.js'
import { cutText } from '../storage/audit-text.js'
import type { ToolLog } from './mcp-connection.js'
import type { ToolCallRecord, ToolRunContext } from './tool-caller.js'

/** Where tool calls are recorded. */
export interface ToolRecordStores {
  /** Where the call's event and audit row are written, in one transaction. */
  ledger: Pick<RunLedger, 'record'>
  log: ToolLog
}

/** How much of a failure's text the audit row keeps (the event keeps it whole). */
const AUDIT_ERROR_CHARS = 512

/**
 * Record one tool call, refused or made, in one commit: a `tool.call` CloudEvent in the run's
 * events (its request, session and trace; `GET /v1/events?type=tool.call`) and a `tool.call` audit
 * row whose resource is `<tool>.<action>` and whose actor is the run's caller (the agent beside it).
 * A task's call is the same, with the task where a run's names its request: the event's `task_id`
 * (`GET /v1/tasks/:id/events`), the audit row's `details.task`, the task's owner as actor.
 * A record that cannot be stored is logged; the agent still gets its answer.
 */
export async function recordToolCall (stores: ToolRecordStores, run: ToolRunContext, call: ToolCallRecord): Promise<void> {
  const id = randomUUID()
  const time = new Date().toISOString()
  const resource = `${call.tool}.${call.action}`
  const ids = { requestId: run.requestId, taskId: run.taskId }
  if (call.success) stores.log.debug({ ...ids, agent: run.agent, tool: call }, 'tool call')
  else stores.log.info({ ...ids, agent: run.agent, tool: call }, 'tool call refused or failed')
  try {
    await stores.ledger.record({
      kind: 'cloudevent',
      id,
      type: 'tool.call',
      source: 'agent-host/tools',
      time,
      session_id: run.sessionId,
      request_id: run.requestId,
      trace_id: run.traceId,
      task_id: run.taskId,
      owner_key: run.owner,
      event: { specversion: '1.0', id, source: 'agent-host/tools', type: 'tool.call', subject: resource, time, datacontenttype: 'application/json', data: { agent: run.agent, ...call } }
    }, {
      actor: run.owner,
      action: 'tool.call',
      resource,
      success: call.success,
      claimed_user: run.user ?? null,
      request_id: run.requestId ?? null,
      root_request_id: run.rootRequestId ?? null,
      trace_id: run.traceId ?? null,
      details: {
        by: `agent:${run.agent}`,
        ...(run.taskId !== undefined ? { task: run.taskId } : {}),
        attempts: call.attempts,
        duration_ms: call.duration_ms,
        ...(call.error !== undefined ? { error: cutText(call.error, AUDIT_ERROR_CHARS) } : {})
      }
    })
  } catch (err) {
    stores.log.warn({ err, ...ids, tool: call }, 'a tool call could not be recorded')
  }
}
