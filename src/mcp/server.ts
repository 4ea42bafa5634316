import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import {
  CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, LoggingLevelSchema, McpError, SetLevelRequestSchema,
  type CallToolResult, type LoggingLevel, type RequestId, type ServerNotification
} from '@modelcontextprotocol/sdk/types.js'
import type { JsonObject } from '../agents/contract.js'
import type { AssistEngine, RunTrace, SubmitOptions } from '../assist/engine.js'
import type { RunLogger } from '../assist/run.js'
import type { Identity } from '../storage/api-keys.js'
import type { TraceContext } from '../protocol/envelope.js'
import type { StreamPacket } from '../protocol/packets.js'
import type { EventLog } from '../storage/events.js'
import { CallResultBuilder, mcpLogLevel, META_REQUEST_ID, META_SESSION_ID, type LogUpdate } from './call-result.js'
import { toolCallEnvelope } from './envelope.js'
import type { ToolCatalogue } from './tools.js'

/** The HTTP exchange that carried one JSON-RPC request: who sent it, and how it goes away. */
export interface McpCall {
  /** The caller, as the auth plugin named them. */
  identity: Identity
  /** The request's W3C trace id (32 hex digits). */
  traceId: string
  /** Aborted when the HTTP request goes away before it is answered. */
  gone: AbortSignal
  /** The request's logger. */
  log: NonNullable<SubmitOptions['log']>
  /** The per-agent rate limit (`RATE_LIMIT_AGENT_MAX`): throws to refuse a new run. */
  admit: (agent: { id: string, name: string }) => Promise<void>
  /** With tracing on: where a run's span goes, given its envelope's trace. */
  runTrace?: (trace: TraceContext) => RunTrace | undefined
}

/** What one MCP session's server is built from. */
export interface McpServerOptions {
  /** The run engine (the only way a tool call runs). */
  engine: Pick<AssistEngine, 'prepare' | 'begin' | 'follow' | 'cancel'>
  catalogue: ToolCatalogue
  /** The event log, where an agent's `log()` lines are stored (they become logging notifications). */
  events: Pick<EventLog, 'list' | 'appended'>
  /** This host's version (the server's `serverInfo`). */
  version: string
  /** The CAP session of this MCP session: every tool call's runs share it. */
  sessionId: string
  /** The exchange that carried JSON-RPC request `id` (set by the route before the transport sees it). */
  callOf: (id: RequestId) => McpCall | undefined
  /** Told of every tool call while it runs, so that closing waits for it. */
  track: (call: Promise<unknown>) => void
  log: RunLogger
}

/** RFC 5424's levels, lowest first (MCP's `LoggingLevel`). */
const SEVERITY: readonly LoggingLevel[] = LoggingLevelSchema.options

/** Before a client sets a level: thoughts, progress steps and warnings, not an agent's debug lines. */
const DEFAULT_LEVEL: LoggingLevel = 'info'

const INSTRUCTIONS = 'Each tool runs one agent hosted by agent-host (a capability of it). The arguments are the agent\'s input; ' +
  'the result\'s text is what the agent wrote, and its structuredContent the agent\'s result, when it gave one. ' +
  'Progress and the agent\'s thoughts arrive as progress and logging notifications while it runs.'

/** A catalogue error's code, status, message and details, if `err` is one. */
function hostError (err: unknown): { code: string, message: string, details?: { errors?: Array<{ path: string, message: string }> } } | undefined {
  const e = err as { code?: unknown }
  return typeof e.code === 'string' && e.code.startsWith('AH_ERR_') ? err as never : undefined
}

/**
 * Why the engine refused to start a tool's run, as a tool error the model can read: invalid
 * arguments, a rate limit, a backend that is not configured, a server shutting down (a catalogue
 * error's message never carries internals). Anything else is rethrown.
 */
function refusal (err: unknown, meta: JsonObject): CallToolResult {
  const e = hostError(err)
  if (e === undefined) throw err
  const issues = e.code === 'AH_ERR_VALIDATION' ? e.details?.errors : undefined
  // the CAP paths point into the envelope; the model sent only the arguments
  const text = issues !== undefined
    ? `Invalid arguments: ${issues.map((i) => `${i.path.replace(/^\/payload\/payload/, '') || '/'} ${i.message}`).join('; ')}`
    : `${e.code}: ${e.message}`
  return { content: [{ type: 'text', text }], isError: true, _meta: meta }
}

/**
 * Send the agent's `log()` lines of one run (stored in the event log as `agent.log` events) as they
 * are stored: woken by this process's appends of the session, read by request id after the write.
 */
function watchAgentLogs (events: McpServerOptions['events'], run: { requestId: string, sessionId: string, owner: string }, send: (data: JsonObject) => void): { drain: () => Promise<void>, stop: () => void } {
  let cursor = 0
  let pending: NodeJS.Immediate | undefined
  // one read at a time, each after the one before: no line sent twice or out of order
  let reading: Promise<void> = Promise.resolve()
  const read = async (): Promise<void> => {
    for (let rows = await events.list({ request_id: run.requestId, type: 'agent.log', owner_key: run.owner, after: cursor }); rows.length > 0;
      rows = await events.list({ request_id: run.requestId, type: 'agent.log', owner_key: run.owner, after: cursor })) {
      for (const row of rows) {
        cursor = row.seq
        send(row.event)
      }
    }
  }
  const drain = async (): Promise<void> => {
    reading = reading.then(read, read)
    await reading
  }
  const wake = (event: { type: string, session_id?: string }): void => {
    if (event.type !== 'agent.log' || event.session_id !== run.sessionId || pending !== undefined) return
    // after the write that stored it has committed
    pending = setImmediate(() => { pending = undefined; drain().catch(() => {}) })
  }
  events.appended.on('event', wake)
  return { drain, stop: () => { events.appended.off('event', wake); clearImmediate(pending) } }
}

/**
 * The MCP server of one session (the SDK's low-level `Server`, with the agents' JSON Schemas as
 * they are): `tools/list` is the catalogue as the caller may see it; `tools/call` builds a CAP
 * envelope and runs it through the engine (`submit`, then `follow`), turning its packets into
 * progress and logging notifications and its end into the tool result. A client's
 * `notifications/cancelled`, its HTTP request going away, or the session closing cancels the run.
 * `logging/setLevel` sets the least level of this session's logging notifications.
 */
export function createMcpServer (options: McpServerOptions): Server {
  const { engine, catalogue, sessionId } = options
  // the SDK's low-level Server: McpServer would want zod schemas, and the agents' are JSON Schema already
  const server = new Server({ name: 'agent-host', version: options.version }, {
    capabilities: { tools: { listChanged: false }, logging: {} },
    instructions: INSTRUCTIONS
  })
  let level = DEFAULT_LEVEL
  server.onerror = (err) => { options.log.debug({ err }, 'MCP transport error') }

  // the route registers every request of a body before the transport dispatches it
  const callOf = (id: RequestId): McpCall => options.callOf(id) as McpCall

  server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    level = request.params.level
    return {}
  })

  server.setRequestHandler(ListToolsRequestSchema, async (_request, extra) => ({ tools: catalogue.list(callOf(extra.requestId).identity) }))

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const call = callOf(extra.requestId)
    const running = callTool(request.params.name, request.params.arguments ?? {}, call, extra)
    options.track(running)
    try {
      return await running
    } catch (err) {
      if (err instanceof McpError) throw err
      // the SDK would send the message as it is: say nothing of internals
      call.log.error({ err }, 'an MCP tool call failed')
      throw new McpError(ErrorCode.InternalError, 'Internal error')
    }
  })

  async function callTool (name: string, args: Record<string, unknown>, call: McpCall, extra: { signal: AbortSignal, _meta?: { progressToken?: string | number }, sendNotification: (n: ServerNotification) => Promise<void> }): Promise<CallToolResult> {
    const { identity } = call
    const tool = catalogue.find(name, identity)
    // an agent the caller may not invoke is not there for them
    if (tool === undefined) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`)
    const envelope = toolCallEnvelope(args, { agentId: tool.agent.id, capability: tool.capability, sessionId, userId: identity.id, traceId: call.traceId })
    const meta = { [META_REQUEST_ID]: envelope.request_id, [META_SESSION_ID]: sessionId }
    const notify = async (notification: ServerNotification): Promise<void> => {
      await extra.sendNotification(notification).catch((err: unknown) => { call.log.debug({ err }, 'an MCP notification could not be sent') })
    }
    const log = async (update: LogUpdate): Promise<void> => {
      if (SEVERITY.indexOf(update.level) >= SEVERITY.indexOf(level)) await notify({ method: 'notifications/message', params: update })
    }

    let submission
    const trace = call.runTrace?.(envelope.context.trace)
    try {
      const prepared = await engine.prepare(envelope, { identity, delivery: 'own' })
      if (prepared.outcome === 'start') await call.admit(prepared.agent)
      submission = await engine.begin(prepared, { log: call.log, ...(trace !== undefined ? { trace } : {}) })
    } catch (err) {
      return refusal(err, meta)
    }
    const signal = AbortSignal.any([extra.signal, call.gone])
    const cancel = (): void => {
      engine.cancel(envelope.request_id, identity).then(
        () => { call.log.info({ requestId: envelope.request_id }, 'MCP tool call cancelled') },
        (err: unknown) => { call.log.debug({ err, requestId: envelope.request_id }, 'cancelling the run of an MCP tool call failed (it had ended)') })
    }
    if (signal.aborted) cancel()
    else signal.addEventListener('abort', cancel, { once: true })
    const logs = watchAgentLogs(options.events, { requestId: envelope.request_id, sessionId, owner: identity.id }, (event) => {
      const data = event.data as { level: string, message: string, metadata?: JsonObject }
      // an absent metadata is left out of the JSON
      log({ level: mcpLogLevel(data.level), logger: tool.agent.name, data: { message: data.message, metadata: data.metadata } })
    })
    const progressToken = extra._meta?.progressToken
    const result = new CallResultBuilder(tool.agent.name)
    try {
      for await (const frames of engine.follow(submission.requestId)) {
        for (const frame of frames) {
          const update = result.add(JSON.parse(frame.json) as StreamPacket, frame.final)
          if (update.progress !== undefined && progressToken !== undefined) await notify({ method: 'notifications/progress', params: { progressToken, ...update.progress } })
          if (update.log !== undefined) await log(update.log)
        }
      }
      await logs.drain()
    } finally {
      logs.stop()
      signal.removeEventListener('abort', cancel)
    }
    return result.build(meta, tool.tool.outputSchema !== undefined)
  }

  return server
}
