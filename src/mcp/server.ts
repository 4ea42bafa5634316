import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import {
  CallToolRequestSchema, ElicitRequestFormParamsSchema, ErrorCode, ListToolsRequestSchema, LoggingLevelSchema, McpError, SetLevelRequestSchema,
  type CallToolResult, type LoggingLevel, type RequestId, type ServerNotification
} from '@modelcontextprotocol/sdk/types.js'
import type { JsonObject } from '../agents/contract.js'
import type { AssistEngine, RunTrace, SubmitOptions } from '../assist/engine.js'
import { packetOf } from '../assist/frame-queue.js'
import type { Interrupt, ResumeAnswer } from '../protocol/interrupts.js'
import type { RunLogger } from '../assist/run.js'
import type { Identity } from '../storage/api-keys.js'
import type { TraceContext } from '../protocol/envelope.js'
import type { EventLog } from '../storage/events.js'
import { CallResultBuilder, mcpLogLevel, META_REQUEST_ID, META_SESSION_ID, type LogUpdate } from './call-result.js'
import { elicitationForm, type FormFits } from './elicitation.js'
import { toolCallEnvelope } from './envelope.js'
import { inputRequiredResult } from './input-required.js'
import { MCP_SAMPLING, SamplingProtocol } from './sampling.js'
import { registerToolTasks, TASKS_CAPABILITY, type McpTaskStores } from './tasks.js'
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
  engine: Pick<AssistEngine, 'prepare' | 'begin' | 'follow' | 'cancel' | 'answer'>
  catalogue: ToolCatalogue
  /** The event log, where an agent's `log()` lines are stored (they become logging notifications). */
  events: Pick<EventLog, 'list' | 'appended'>
  /** This host's version (the server's `serverInfo`). */
  version: string
  /** The CAP session of this MCP session: every tool call's runs share it. */
  sessionId: string
  /** The exchange that carried JSON-RPC request `id` (set by the route before the transport sees it). */
  callOf: (id: RequestId) => McpCall | undefined
  /** Told of every tool call (with its JSON-RPC request id) while it runs, so that closing waits for it and a cancellation finds it. */
  track: (call: Promise<unknown>, id: RequestId) => void
  /** The session's least level of logging notifications (`logging/setLevel`, shared by every instance of the session). */
  level: () => string
  /** Set it for the session (on every instance). */
  setLevel: (level: LoggingLevel) => Promise<void>
  /** Aborted when the session closes: a call waiting for an elicitation's answer stops waiting (and ends its run). */
  closing?: AbortSignal
  /** End the HTTP response (its SSE stream) that carries JSON-RPC request `id`: a cancelled call's, which the SDK answers nothing. */
  endStream?: (id: RequestId) => void
  log: RunLogger
  /** What MCP's tasks (durable tool calls, `src/mcp/tasks.ts`) read: the run ledger and the waiting runs, and their settings. */
  tasks: McpTaskStores
}

/** RFC 5424's levels, lowest first (MCP's `LoggingLevel`). */
const SEVERITY: readonly LoggingLevel[] = LoggingLevelSchema.options

const INSTRUCTIONS = 'Each tool runs one agent hosted by agent-host (a capability of it). The arguments are the agent\'s input; ' +
  'the result\'s text is what the agent wrote, and its structuredContent the agent\'s result, when it gave one. ' +
  'Progress and the agent\'s thoughts arrive as progress and logging notifications while it runs. ' +
  'An agent that needs a person\'s answer asks through elicitation when the client supports it; otherwise the result says input is required ' +
  'and how to answer: call the same tool again, in this session, with the arguments { "resume": [{ "interrupt_id": ..., "value": ... }] }.'

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

/** The refusal of a resume's answer (`AH_ERR_INTERRUPT_ANSWER_INVALID`), with the index of the answer it refused, if `err` is one. */
function answerRefusal (err: unknown): { code: string, message: string, index: number } | undefined {
  const e = hostError(err)
  if (e?.code !== 'AH_ERR_INTERRUPT_ANSWER_INVALID') return undefined
  const index = /^\/payload\/payload\/resume\/(\d+)/.exec(e.details?.errors?.[0]?.path ?? '')?.[1]
  return { code: e.code, message: e.message, index: index === undefined ? 0 : Number(index) }
}

/** How a call that asked ends without an answer: the person declined or cancelled, or the elicitation failed. */
interface Ending {
  end: 'declined' | 'cancelled' | 'failed' | 'closed'
  interrupt: Interrupt
  reason?: string
}

/** What the SDK gives a `tools/call` handler that it uses. */
interface CallExtra {
  signal: AbortSignal
  requestId: RequestId
  _meta?: { progressToken?: string | number }
  sendNotification: (n: ServerNotification) => Promise<void>
}

/** A call's watch of its run's log lines, and how it sends a notification and a log line. */
interface CallLogs extends ReturnType<typeof watchAgentLogs> {
  notify: (notification: ServerNotification) => Promise<void>
  log: (update: LogUpdate) => Promise<void>
}

/** The longest timer Node.js keeps (ms). */
const MAX_TIMER_MS = 2_147_483_647

/**
 * Send the agent's `log()` lines of one run (stored in the event log as `agent.log` events) as they
 * are stored: woken by this process's appends of the session, read by request id after the write.
 * `drain` reads what is left.
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
 * progress and logging notifications and its end into the tool result. A run that stops to ask
 * (CLOSE `input_required`) has its questions sent as `elicitation/create` on the call's stream to a
 * client that takes form elicitations, and the answers go on as a new run (a resume envelope in the
 * same CAP session) followed into the same result; `decline` of an input or `cancel` ends the waiting
 * run. A client without elicitation (and any client, for credentials) gets a result that says input
 * is required and how to answer: the same tool called again with `{ resume: [...] }`. A client's
 * `notifications/cancelled`, its HTTP request going away, or the session closing cancels the run (or
 * ends the one waiting for an elicitation's answer).
 * `logging/setLevel` sets the least level of this session's logging notifications.
 */
export function createMcpServer (options: McpServerOptions): Server {
  const { engine, catalogue, sessionId } = options
  // the SDK's low-level Server: McpServer would want zod schemas, and the agents' are JSON Schema already
  const server = new Server({ name: 'agent-host', version: options.version }, {
    capabilities: { tools: { listChanged: false }, logging: {}, tasks: TASKS_CAPABILITY },
    instructions: INSTRUCTIONS
  })
  server.onerror = (err) => { options.log.debug({ err }, 'MCP transport error') }

  // the route registers every request of a body before the transport dispatches it
  const callOf = (id: RequestId): McpCall => options.callOf(id) as McpCall

  server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    await options.setLevel(request.params.level)
    return {}
  })

  server.setRequestHandler(ListToolsRequestSchema, async (_request, extra) => ({ tools: catalogue.list(callOf(extra.requestId).identity) }))

  const tasks = registerToolTasks(server, { engine, catalogue, stores: options.tasks, sessionId, callOf, log: options.log })

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    // a task-augmented call answers its task at once: its run goes on without the exchange
    if (request.params.task !== undefined) return await tasks.create(request.params, extra)
    const call = callOf(extra.requestId)
    const running = callTool(request.params.name, request.params.arguments ?? {}, call, extra)
    options.track(running, extra.requestId)
    try {
      return await running
    } catch (err) {
      if (err instanceof McpError) throw err
      // the SDK would send the message as it is: say nothing of internals
      call.log.error({ err }, 'an MCP tool call failed')
      throw new McpError(ErrorCode.InternalError, 'Internal error')
    } finally {
      // a cancelled request gets no answer (the SDK drops it, as the specification says): its stream
      // would wait for one for ever, so it ends once the SDK has let the answer go
      if (extra.signal.aborted) setImmediate(() => { options.endStream?.(extra.requestId) })
    }
  })

  /** Whether the session's client takes form elicitations (it declared `elicitation`, `{}` meaning forms). */
  const canElicit = (): boolean => server.getClientCapabilities()?.elicitation?.form !== undefined
  const fits: FormFits = (schema) => ElicitRequestFormParamsSchema.safeParse({ message: '', requestedSchema: schema }).success

  async function callTool (name: string, args: Record<string, unknown>, call: McpCall, extra: CallExtra): Promise<CallToolResult> {
    const { identity } = call
    const tool = catalogue.find(name, identity)
    // an agent the caller may not invoke is not there for them
    if (tool === undefined) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`)
    const origin = { agentId: tool.agent.id, capability: tool.capability, sessionId, userId: identity.id, traceId: call.traceId }
    const structured = tool.tool.outputSchema !== undefined
    const signal = AbortSignal.any([extra.signal, call.gone])
    const result = new CallResultBuilder(tool.agent.name)
    // the run the call follows now (its wire request id), and whether it ended waiting for answers
    let current: { wireId: string, key: string, waiting: boolean } | undefined
    const stop = async (): Promise<void> => {
      const run = current
      if (run === undefined) return
      // a run that stopped to ask is cancelled once recorded: its chain is then ended (settled, audited)
      if (run.waiting) await engine.answer(run.key).catch(() => {})
      await engine.cancel(run.wireId, identity)
    }
    const cancel = (): void => {
      stop().then(
        () => { call.log.info({ requestId: current?.wireId }, 'MCP tool call cancelled') },
        (err: unknown) => { call.log.debug({ err, requestId: current?.wireId }, 'cancelling the run of an MCP tool call failed (it had ended)') })
    }
    signal.addEventListener('abort', cancel, { once: true })
    const notify = async (notification: ServerNotification): Promise<void> => {
      await extra.sendNotification(notification).catch((err: unknown) => { call.log.debug({ err }, 'an MCP notification could not be sent') })
    }
    const log = async (update: LogUpdate): Promise<void> => {
      if (SEVERITY.indexOf(update.level) >= SEVERITY.indexOf(options.level() as LoggingLevel)) await notify({ method: 'notifications/message', params: update })
    }
    /** The agent's `log()` lines of run `wireId`, as logging notifications of this call. */
    const watchLogs = (wireId: string): CallLogs => ({
      ...watchAgentLogs(options.events, { requestId: wireId, sessionId, owner: identity.id }, (event) => {
        const data = event.data as { level: string, message: string, metadata?: JsonObject }
        // an absent metadata is left out of the JSON
        log({ level: mcpLogLevel(data.level), logger: tool.agent.name, data: { message: data.message, metadata: data.metadata } }).catch(() => {})
      }),
      log,
      notify
    })
    try {
      let envelope = toolCallEnvelope(args, origin)
      // the questions the last run asked; an answer the engine refused is asked again once
      let asked: Interrupt[] = []
      let askedAgain = false
      for (;;) {
        const meta = { [META_REQUEST_ID]: envelope.request_id, [META_SESSION_ID]: sessionId }
        let submission
        const trace = call.runTrace?.(envelope.context.trace)
        // before the run starts: a line it logs at once is seen too
        const logs = watchLogs(envelope.request_id)
        try {
          // the client's model, lent to a run whose agent asks for it (refused, saying why, while the client does not take sampling)
          const prepared = await engine.prepare(envelope, { identity, delivery: 'own', lend: new Map([[MCP_SAMPLING, new SamplingProtocol({ server, relatedRequestId: extra.requestId, signal })]]) })
          if (prepared.outcome === 'start') await call.admit(prepared.agent)
          submission = await engine.begin(prepared, { log: call.log, ...(trace !== undefined ? { trace } : {}) })
        } catch (err) {
          logs.stop()
          if (current === undefined) return refusal(err, meta)
          // the answers were refused: the person's answer to a question did not do (asked again once, saying why), or the run cannot go on
          const invalid = answerRefusal(err)
          const answers = (envelope.payload.payload as { resume: ResumeAnswer[] }).resume
          const wrong = invalid === undefined ? undefined : answers[invalid.index]
          const interrupt = wrong === undefined ? undefined : asked.find((i) => i.id === wrong.interrupt_id)
          if (invalid === undefined || interrupt === undefined || askedAgain) {
            await stop().catch((cause: unknown) => { call.log.debug({ err: cause }, 'ending the waiting run of an MCP tool call failed (it had ended)') })
            return invalid === undefined ? refusal(err, meta) : result.fail(meta, `${invalid.code}: ${invalid.message} (asked twice; the run was ended)`)
          }
          askedAgain = true
          const again = await ask(interrupt, invalid.message)
          if ('end' in again) return await endWith(again, meta)
          envelope = toolCallEnvelope({ resume: answers.map((a, n) => n === invalid.index ? { interrupt_id: a.interrupt_id, value: again.value } : a) }, origin)
          continue
        }
        current = { wireId: envelope.request_id, key: submission.requestId, waiting: false }
        if (signal.aborted) cancel()
        result.next()
        await follow(submission.requestId, result, extra, logs)
        const interrupts = result.interrupts
        if (result.end !== 'input_required' || interrupts === undefined) return result.build(meta, structured)
        current.waiting = true
        asked = interrupts
        // credentials are not asked in a form (the MCP specification): the caller answers them as a client without elicitation does
        if (!canElicit() || interrupts.some((i) => i.reason === 'auth')) return inputRequiredResult(name, interrupts, result.content, meta, structured)
        const answers: ResumeAnswer[] = []
        for (const interrupt of interrupts) {
          const answered = await ask(interrupt)
          if ('end' in answered) return await endWith(answered, meta)
          answers.push({ interrupt_id: interrupt.id, value: answered.value })
        }
        askedAgain = false
        envelope = toolCallEnvelope({ resume: answers }, origin)
      }
    } finally {
      signal.removeEventListener('abort', cancel)
    }

    /** Ask one question of the person behind the client (`note`: why it is asked again). */
    async function ask (interrupt: Interrupt, note?: string, retry = true): Promise<{ value: unknown } | Ending> {
      const form = elicitationForm(interrupt, fits)
      let answer
      try {
        answer = await server.elicitInput({ mode: 'form', message: note === undefined ? form.message : `${form.message}\n\n(${note})`, requestedSchema: form.requestedSchema }, {
          relatedRequestId: extra.requestId,
          signal: options.closing === undefined ? signal : AbortSignal.any([signal, options.closing]),
          // the person has until the question expires (the SDK's default is a minute)
          timeout: Math.min(MAX_TIMER_MS, Math.max(1, Date.parse(interrupt.expires_at) - Date.now()))
        })
      } catch (err) {
        if (signal.aborted) return { end: 'cancelled', interrupt }
        if (options.closing?.aborted === true) return { end: 'closed', interrupt }
        // the content did not match the form: once more, saying why
        if (err instanceof McpError && err.code === ErrorCode.InvalidParams && retry) return await ask(interrupt, err.message, false)
        call.log.info({ err, interrupt: interrupt.id }, 'an MCP elicitation failed')
        return { end: 'failed', interrupt, reason: err instanceof Error ? err.message : String(err) }
      }
      switch (answer.action) {
        case 'accept': return { value: form.answer(answer.content ?? {}) }
        case 'decline': return interrupt.kind === 'approval' ? { value: { approved: false } } : { end: 'declined', interrupt }
        default: return { end: 'cancelled', interrupt }
      }
    }

    /** End the call without an answer: the waiting run is cancelled (its questions take no answer any more). */
    async function endWith (ending: Ending, meta: JsonObject): Promise<CallToolResult> {
      try {
        await stop()
      } catch (err) {
        call.log.debug({ err, requestId: current?.wireId }, 'ending the waiting run of an MCP tool call failed (it had ended)')
      }
      const question = JSON.stringify(ending.interrupt.message)
      switch (ending.end) {
        case 'declined': return result.fail(meta, `declined: the user declined to answer ${question}; the run was ended`)
        case 'cancelled': return result.fail(meta, `cancelled: the question ${question} was cancelled; the run was cancelled`)
        case 'failed': return result.fail(meta, `elicitation_failed: asking ${question} failed (${ending.reason}); the run was ended`)
        case 'closed': return result.fail(meta, `session_closed: the MCP session closed while asking ${question}; the run was ended`)
      }
    }
  }

  /**
   * Follow one run to its end into `result`, sending its progress and logging notifications and the
   * agent's log lines `logs` watches.
   */
  async function follow (key: string, result: CallResultBuilder, extra: CallExtra, logs: CallLogs): Promise<void> {
    const { log, notify } = logs
    const progressToken = extra._meta?.progressToken
    try {
      for await (const frames of engine.follow(key)) {
        for (const frame of frames) {
          const update = result.add(packetOf(frame), frame.final)
          if (update.progress !== undefined && progressToken !== undefined) await notify({ method: 'notifications/progress', params: { progressToken, ...update.progress } })
          if (update.log !== undefined) await log(update.log)
        }
      }
      // once more at its end: on PostgreSQL a line's announcement may come after the run's end is seen
      await logs.drain()
    } finally {
      logs.stop()
    }
  }

  return server
}
