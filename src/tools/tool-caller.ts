import type { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import { lazySchema, toIssues } from '../agents/json-schema.js'
import type { HostCallContext, JsonObject, ToolCaller } from '../backends/protocol.js'
import { AH_ERR_TOOL_CALL_INVALID } from '../errors.js'
import { ToolCall, type ToolResponse } from '../protocol/tools.js'
import type { BranchScope } from './branch-scope.js'
import { describeError, type McpConnection, type ToolLog } from './mcp-connection.js'
import { mcpClientSdk } from './mcp-sdk.js'
import type { PathScope } from './path-scope.js'
import { requiresApproval } from './servers-file.js'

/**
 * Why a call failed, the first word of `ToolResponse.error`. Refused before the server is asked:
 * `forbidden` (the task's owner may not have this agent call on its behalf: `HostCallContext.forbidden`), `unknown_tool`, `agent_not_allowed`, `action_not_allowed`, `approval_rejected` (a person said no),
 * `approval_required` (the action waits for an approval this run cannot ask), `scope_violation`, `aborted`. Failed
 * on the way: `timeout`, `server_unavailable` (it could not be started or reached), `server_exited`
 * (its process exited during the call), `connection_lost`, `server_error` (it answered with a
 * protocol error), `tool_error` (the tool ran and reported an error: `result` holds what it said).
 */
export type ToolFailure = 'forbidden' | 'unknown_tool' | 'agent_not_allowed' | 'action_not_allowed' | 'approval_rejected' | 'approval_required' | 'scope_violation' | 'aborted' | 'timeout' |
  'server_unavailable' | 'server_exited' | 'connection_lost' | 'server_error' | 'tool_error'

/** A registered tool as a call needs it: its server and the scopes that hold before the server is asked. */
export interface RegisteredTool {
  connection: McpConnection
  paths?: PathScope
  branches?: BranchScope
}

/** The registered tools, by name. */
export interface ToolLookup {
  get(name: string): RegisteredTool | undefined
  names(): string[]
}

/** The run or task a caller serves (`HostCallContext`). */
export type ToolRunContext = HostCallContext

/**
 * One run's caller of the registered tools, with what a person's approval of a call needs (the
 * engine lends the agent only `call`; `assist/replay.ts:RunReplay.host` asks the person). `call`
 * refuses (`approval_required`) a call whose action waits for an approval: only `approved` makes one.
 */
export interface RunToolCaller extends ToolCaller {
  /** Whether `call` waits for a person's approval: a well-formed call the rules let through (the tool, this agent, the action) of an action its server's `require_approval` names. */
  needsApproval(call: unknown): call is ToolCall
  /** Whether `call`'s arguments hold its tool's scopes (paths, branch) now: a call outside them is refused as any, without asking anyone. */
  inScope(call: ToolCall): Promise<boolean>
  /** Make `call`, which a person approved, as `call` makes any. */
  approved(call: ToolCall): Promise<ToolResponse>
  /** Answer `call`, which a person rejected: refused (`approval_rejected: <reason>`) before the server sees it, and recorded as every refusal. */
  rejected(call: ToolCall, reason: string): Promise<ToolResponse>
}

/** What the engine needs: a caller of the registered tools for each run (`host.tools`). */
export interface ToolCallers {
  caller(context: ToolRunContext): RunToolCaller
}

/** One call as it is recorded: the `data` of its `tool.call` event. */
export interface ToolCallRecord {
  tool: string
  action: string
  /** The server's tool the action named (absent when the call was refused before that was known). */
  server_tool?: string
  success: boolean
  error?: string
  /** Attempts made on the server (0: refused before it was asked). */
  attempts: number
  duration_ms: number
}

export interface ToolCallerOptions {
  tools: ToolLookup
  /** Record a call (the run's event, the audit row); a record that cannot be stored is logged by it, never thrown. */
  record: (run: ToolRunContext, call: ToolCallRecord) => Promise<void>
  log: ToolLog
}

type Outcome =
  | { ok: true, result: JsonObject, serverTool: string, attempts: number }
  | { ok: false, failure: ToolFailure, message: string, result?: JsonObject, serverTool?: string, attempts: number }
type Attempt =
  | { ok: true, result: JsonObject }
  | { ok: false, failure: ToolFailure, message: string, result?: JsonObject, retryable: boolean }

const validCall = lazySchema<ToolCall>(ToolCall)
/** How much of a tool's own error text `ToolResponse.error` quotes. */
const ERROR_CHARS = 2000

/** A person's answer to a call that waits for one: approved, or rejected and why. */
type Approval = { approved: true } | { approved: false, reason: string }

/** A {@link RunToolCaller} for one run: every call checked against the rules, timed, retried, recorded. */
export function toolCaller (options: ToolCallerOptions, run: ToolRunContext): RunToolCaller {
  return {
    call: async (call) => await callTool(options, run, call),
    needsApproval: (call): call is ToolCall => {
      if (!validCall(call)) return false
      const spec = options.tools.get(call.tool)?.connection.spec
      return spec !== undefined && (spec.agents === undefined || spec.agents.includes(run.agent)) && spec.actions.has(call.action) && requiresApproval(spec, call.action)
    },
    inScope: async (call) => {
      const tool = options.tools.get(call.tool)
      return tool !== undefined && (await scopeCheck(tool, call.args)).ok
    },
    approved: async (call) => await callTool(options, run, call, { approved: true }),
    rejected: async (call, reason) => await callTool(options, run, call, { approved: false, reason })
  }
}

/**
 * One call: the rules first (the tool exists, the agent may use it, the action is allowed, the run
 * is not aborted, the scopes hold), then the server, within `timeout` seconds (starting it
 * included), once more after a transport failure when `retry_on_failure` allows. A refusal or a
 * failure is a `ToolResponse` with `success: false`; only a malformed call throws.
 */
async function callTool (options: ToolCallerOptions, run: ToolRunContext, call: ToolCall, approval?: Approval): Promise<ToolResponse> {
  if (!validCall(call)) {
    throw new AH_ERR_TOOL_CALL_INVALID(toIssues(validCall.errors).map((i) => `${i.path} ${i.message}`).join('; '))
  }
  const started = performance.now()
  const outcome = await perform(options, run, call, approval)
  const response: ToolResponse = {
    tool: call.tool,
    action: call.action,
    success: outcome.ok,
    result: outcome.result ?? null,
    ...(outcome.ok ? {} : { error: `${outcome.failure}: ${outcome.message}` }),
    duration_ms: Math.round(performance.now() - started)
  }
  await options.record(run, {
    tool: response.tool,
    action: response.action,
    ...(outcome.serverTool !== undefined ? { server_tool: outcome.serverTool } : {}),
    success: response.success,
    ...(response.error !== undefined && response.error !== null ? { error: response.error } : {}),
    attempts: outcome.attempts,
    duration_ms: response.duration_ms
  })
  return response
}

/** A call's arguments against its tool's scopes (branch, then paths): the arguments to send (paths resolved), or why not. */
async function scopeCheck (tool: RegisteredTool, args: ToolCall['args']): Promise<{ ok: true, args: ToolCall['args'] } | { ok: false, reason: string }> {
  const branch = tool.branches?.refusal(args)
  if (branch !== undefined) return { ok: false, reason: branch }
  if (tool.paths === undefined) return { ok: true, args }
  const decision = await tool.paths.check(args)
  return decision.ok ? { ok: true, args: decision.args } : { ok: false, reason: decision.reason }
}

async function perform ({ tools, log }: ToolCallerOptions, run: ToolRunContext, call: ToolCall, approval: Approval | undefined): Promise<Outcome> {
  const refuse = (failure: ToolFailure, message: string, serverTool?: string): Outcome => ({ ok: false, failure, message, attempts: 0, ...(serverTool !== undefined ? { serverTool } : {}) })
  if (run.forbidden !== undefined) return refuse('forbidden', run.forbidden)
  const tool = tools.get(call.tool)
  if (tool === undefined) {
    const names = tools.names()
    return refuse('unknown_tool', `no tool "${call.tool}" is registered${names.length > 0 ? ` (there are: ${names.join(', ')})` : ''}`)
  }
  const spec = tool.connection.spec
  if (spec.agents !== undefined && !spec.agents.includes(run.agent)) return refuse('agent_not_allowed', `agent "${run.agent}" may not use tool "${call.tool}"`)
  const serverTool = spec.actions.get(call.action)
  if (serverTool === undefined) return refuse('action_not_allowed', `"${call.action}" is not an action of tool "${call.tool}" (its actions: ${[...spec.actions.keys()].join(', ')})`)
  if (run.signal.aborted) return refuse('aborted', abortMessage(run.signal), serverTool)
  // the scopes before the approval: a call outside them is refused without asking anyone
  const scoped = await scopeCheck(tool, call.args)
  if (!scoped.ok) return refuse('scope_violation', scoped.reason, serverTool)
  const args = scoped.args
  if (approval?.approved === false) return refuse('approval_rejected', approval.reason, serverTool)
  if (approval === undefined && requiresApproval(spec, call.action)) {
    return refuse('approval_required', `calls of "${call.action}" of tool "${call.tool}" wait for a person's approval (require_approval), which this ${run.taskId !== undefined ? 'task' : 'run'} cannot ask`, serverTool)
  }

  const timeoutS = call.timeout ?? spec.timeoutS
  const deadline = AbortSignal.timeout(timeoutS * 1000)
  const signal = AbortSignal.any([run.signal, deadline])
  const end = performance.now() + timeoutS * 1000
  const retries = call.retry_on_failure === false ? 0 : spec.retries
  let attempts = 0
  let again = false
  let attempt: Attempt
  do {
    if (again) log.info({ requestId: run.requestId, taskId: run.taskId, tool: call.tool, action: call.action, attempt: attempts }, 'tool call failed in transport: trying again')
    attempts++
    attempt = await once(tool.connection, serverTool, args, { run: run.signal, deadline, signal, remainingMs: end - performance.now(), timeoutS })
    if (attempt.ok) return { ok: true, result: attempt.result, serverTool, attempts }
    again = attempt.retryable && attempts <= retries && !signal.aborted
  } while (again)
  const message = attempts > 1 ? `${attempt.message} (after ${attempts} attempts)` : attempt.message
  return { ok: false, failure: attempt.failure, message, serverTool, attempts, ...(attempt.result !== undefined ? { result: attempt.result } : {}) }
}

/** One attempt: the client (the server started if need be), then `tools/call` with the signal and what is left of the timeout. */
async function once (connection: McpConnection, name: string, args: JsonObject, o: { run: AbortSignal, deadline: AbortSignal, signal: AbortSignal, remainingMs: number, timeoutS: number }): Promise<Attempt> {
  const tool = JSON.stringify(connection.spec.name)
  const late = `the call took longer than its timeout of ${o.timeoutS} s (it was cancelled)`
  const stopped = (timeout: string): Attempt | undefined => {
    if (o.run.aborted) return { ok: false, failure: 'aborted', message: abortMessage(o.run), retryable: false }
    if (o.deadline.aborted) return { ok: false, failure: 'timeout', message: timeout, retryable: false }
    return undefined
  }
  let client: Client
  try {
    client = await untilAborted(connection.client(), o.signal)
  } catch (err) {
    return stopped(`the MCP server of tool ${tool} was not started within the call's timeout of ${o.timeoutS} s`) ??
      { ok: false, failure: 'server_unavailable', message: `the MCP server of tool ${tool} could not be started or reached (${describeError(err)})`, retryable: true }
  }
  try {
    const result = await client.callTool({ name, arguments: args }, undefined, { signal: o.signal, timeout: Math.max(1, Math.floor(o.remainingMs)) }) as CallToolResult
    const answer: JsonObject = { content: result.content, ...(result.structuredContent !== undefined ? { structuredContent: result.structuredContent } : {}) }
    if (result.isError !== true) return { ok: true, result: answer }
    const text = result.content.flatMap((c) => c.type === 'text' ? [c.text] : []).join('\n').slice(0, ERROR_CHARS)
    return { ok: false, failure: 'tool_error', message: text === '' ? 'the tool reported an error' : text, result: answer, retryable: false }
  } catch (err) {
    const done = stopped(late)
    if (done !== undefined) return done
    // loaded already: a client was made
    const { ErrorCode, McpError, StreamableHTTPError } = await mcpClientSdk()
    if (err instanceof McpError && err.code === ErrorCode.RequestTimeout) return { ok: false, failure: 'timeout', message: late, retryable: false }
    if (err instanceof McpError && err.code !== ErrorCode.ConnectionClosed) return { ok: false, failure: 'server_error', message: err.message, retryable: false }
    if (!(err instanceof McpError || err instanceof StreamableHTTPError || err instanceof TypeError || (err as Error).message === 'Not connected')) {
      return { ok: false, failure: 'server_error', message: `the server's answer was not understood (${(err as Error).message})`, retryable: false }
    }
    const stdio = connection.spec.transport.kind === 'stdio'
    connection.lost(client, stdio ? 'the server\'s process exited during a call' : `the connection was lost: ${describeError(err)}`)
    return stdio
      ? { ok: false, failure: 'server_exited', message: `the MCP server of tool ${tool} exited during the call`, retryable: true }
      : { ok: false, failure: 'connection_lost', message: `the connection to the MCP server of tool ${tool} failed (${describeError(err)})`, retryable: true }
  }
}

/** `promise`, or the signal's reason as soon as it fires (what `promise` does is not stopped: a server being started goes on starting). */
async function untilAborted<T> (promise: Promise<T>, signal: AbortSignal): Promise<T> {
  signal.throwIfAborted()
  return await new Promise<T>((resolve, reject) => {
    const abort = (): void => { reject(signal.reason) }
    signal.addEventListener('abort', abort, { once: true })
    promise.then(resolve, reject).finally(() => { signal.removeEventListener('abort', abort) })
  })
}

function abortMessage (signal: AbortSignal): string {
  const kind = (signal.reason as { kind?: unknown } | undefined)?.kind
  return `the run was aborted${typeof kind === 'string' ? ` (${kind})` : ''}`
}
