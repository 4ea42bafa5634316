import { setTimeout as sleep } from 'node:timers/promises'
import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import {
  CancelTaskRequestSchema, ElicitRequestFormParamsSchema, ErrorCode, GetTaskPayloadRequestSchema, GetTaskRequestSchema, ListTasksRequestSchema, McpError, RELATED_TASK_META_KEY,
  type CallToolRequest, type CallToolResult, type CreateTaskResult, type RequestId, type ServerCapabilities, type Task
} from '@modelcontextprotocol/sdk/types.js'
import type { JsonObject } from '../agents/contract.js'
import type { AssistEngine } from '../assist/engine.js'
import type { RunLogger } from '../assist/run.js'
import { runKey } from '../assist/run-key.js'
import { wireInterrupt } from '../assist/replay.js'
import { errorBody } from '../errors.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import type { Interrupt, ResumeAnswer } from '../protocol/interrupts.js'
import type { StreamPacket } from '../protocol/packets.js'
import type { Identity } from '../storage/api-keys.js'
import { chainRunKeys, openInterrupts, waitsForAnswer, type InterruptStore, type WaitingRun } from '../storage/interrupts.js'
import type { RunReader } from '../storage/run-ledger.js'
import type { RunCursor, RunRecord } from '../storage/runs.js'
import { CallResultBuilder, META_REQUEST_ID, META_SESSION_ID } from './call-result.js'
import { elicitationForm, type FormFits } from './elicitation.js'
import { TASK_MARK, toolCallEnvelope, type TaskMark } from './envelope.js'
import { inputRequiredResult } from './input-required.js'
import { jsonRpcError } from './json-rpc-error.js'
import type { McpCall } from './server.js'
import type { AgentTool, ToolCatalogue } from './tools.js'

/**
 * What the server declares of tasks (MCP 2025-11-25, "Tasks"): a `tools/call` may be
 * task-augmented, and `tasks/list` and `tasks/cancel` are answered (`tasks/get` and `tasks/result`
 * always are).
 */
export const TASKS_CAPABILITY: NonNullable<ServerCapabilities['tasks']> = { list: {}, cancel: {}, requests: { tools: { call: {} } } }

/** What MCP's tasks read besides the engine: the runs and the runs waiting for an answer, which every instance shares. */
export interface McpTaskStores {
  /** The run ledger (`app.ledger`): a task's run, its journal, the caller's task runs. */
  runs: Pick<RunReader, 'get' | 'rows' | 'marked'>
  /** The waiting runs (`app.stores.interrupts`): where a task whose run stopped to ask stands. */
  interrupts: Pick<InterruptStore, 'get'>
  /** JOURNAL_RETENTION_MS: how long an ended run, and so its task, is kept; the longest `ttl` granted, and the `ttl` of a task created without one. */
  retentionMs: number
  /** The `pollInterval` suggested to clients (ms; default {@link DEFAULT_POLL_MS}). */
  pollIntervalMs?: number
}

/** What the tasks of one MCP session's server are made from. */
export interface ToolTasksOptions {
  /** The run engine: a task's run starts, is waited for and is cancelled through it, as a tool call's. */
  engine: Pick<AssistEngine, 'prepare' | 'begin' | 'answer' | 'cancel'>
  catalogue: ToolCatalogue
  stores: McpTaskStores
  /** The CAP session of the MCP session: the runs of the tasks it creates are in it. */
  sessionId: string
  /** The exchange that carried JSON-RPC request `id`. */
  callOf: (id: RequestId) => McpCall
  log: RunLogger
}

/** The `tools/call` of a task-augmented call. */
export interface ToolTasks {
  /**
   * Start the call's run and answer at once with its task (`working`): the task id is the run's
   * request id. A refusal (unknown tool, invalid arguments, a rate limit, a backend not configured)
   * is a JSON-RPC error and no task exists. The run goes on when the call's HTTP exchange ends.
   */
  create: (params: CallToolRequest['params'], extra: { requestId: RequestId }) => Promise<CreateTaskResult>
}

/** The `pollInterval` suggested when none is set (ms). */
export const DEFAULT_POLL_MS = 1000

/** Tasks per page of `tasks/list`. */
export const TASKS_PAGE = 50

/** How often `tasks/result` looks for the run that goes on after an answer, once the answer is taken and before the run is stored (ms). */
const CHAIN_POLL_MS = 100

/** The longest timer Node.js keeps (ms). */
const MAX_TIMER_MS = 2_147_483_647

/** A task as a task's requests see it: its run, the runs that went on after its questions were answered, and what it was created with. */
interface TaskRuns {
  taskId: string
  /** The run that is the task (its first). */
  first: RunRecord
  /** Every stored run of the task, the first first: more than one when its run stopped to ask and was answered. */
  runs: RunRecord[]
  /** Where the task stands when its run stopped to ask. */
  chain: WaitingRun | undefined
  mark: TaskMark
  tool: AgentTool
}

/** Where a task stands, and how it ended (the `tools/call` result) when it did or waits for an answer. */
interface TaskOutcome {
  task: Task
  result?: CallToolResult
}

/** The spec's error for a task id the caller has no task of (never saying whether someone else has). */
function taskNotFound (): McpError {
  return new McpError(ErrorCode.InvalidParams, 'Failed to retrieve task: Task not found')
}

/** A catalogue error's fields, if `err` is one. */
function hostError (err: unknown): { code: string, message: string, statusCode?: number, details?: { errors?: Array<{ path: string, message: string }> } } | undefined {
  const e = err as { code?: unknown }
  return typeof e.code === 'string' && e.code.startsWith('AH_ERR_') ? err as never : undefined
}

/**
 * Why the engine refused to start a task's run, as a JSON-RPC error (a task-augmented call answers
 * a task or an error, never a tool result): invalid arguments are `-32602` with the paths the
 * model sent, any other refusal is coded as `/mcp`'s own refusals are, its error body in `data`.
 */
function refusal (err: unknown): McpError {
  const e = hostError(err)
  if (e === undefined) throw err
  const body = errorBody(e)
  const issues = e.code === 'AH_ERR_VALIDATION' ? e.details?.errors : undefined
  // the CAP paths point into the envelope; the model sent only the arguments
  if (issues !== undefined) return new McpError(ErrorCode.InvalidParams, `Invalid arguments: ${issues.map((i) => `${i.path.replace(/^\/payload\/payload/, '') || '/'} ${i.message}`).join('; ')}`, body)
  return new McpError(jsonRpcError(body).error.code, `${e.code}: ${e.message}`, body)
}

/** The index of the answer the engine refused (`AH_ERR_INTERRUPT_ANSWER_INVALID`), if `err` is that refusal. */
function refusedAnswer (err: unknown): { index: number, message: string } | undefined {
  const e = hostError(err)
  if (e?.code !== 'AH_ERR_INTERRUPT_ANSWER_INVALID') return undefined
  const index = /^\/payload\/payload\/resume\/(\d+)/.exec(e.details?.errors?.[0]?.path ?? '')?.[1]
  return { index: index === undefined ? 0 : Number(index), message: e.message }
}

/** A `tasks/list` cursor: where the next page goes on from, opaque to the client. */
function cursorText (run: RunRecord): string {
  return Buffer.from(`${run.started_at}.${run.run_id}`).toString('base64url')
}

/** The page a `tasks/list` cursor names. @throws -32602 for anything this server did not make */
function cursorOf (cursor: string | undefined): RunCursor | undefined {
  if (cursor === undefined) return undefined
  const parts = /^(\d{1,15})\.(\d{1,15})$/.exec(Buffer.from(cursor, 'base64url').toString())
  if (parts === null) throw new McpError(ErrorCode.InvalidParams, 'Invalid cursor')
  return { startedAt: Number(parts[1]), runId: Number(parts[2]) }
}

/** A run's request id as its caller sent it (the task id, for a task's first run). */
function wireIdOf (run: RunRecord): string {
  return (JSON.parse(run.envelope) as ServiceRequest).request_id
}

/** The questions of a task that waits for answers, for its `statusMessage`. */
function questionsText (chain: WaitingRun): string {
  const open = openInterrupts(chain)
  return `Input required: ${open.map((i) => i.message).join('; ')} (tasks/result says how to answer)`
}

/**
 * Answer MCP's tasks on `server` (MCP 2025-11-25 "Tasks", as the official SDK's types carry them),
 * and return what starts one. **The task is the run**: a task-augmented `tools/call` starts the
 * tool's run as a plain call does, its envelope marked (`payload.metadata.mcp_task`, with the
 * granted `ttl`), and the task id is the run's request id. Nothing else is stored: a task's status
 * is its run's (and, once the run stopped to ask, its waiting run's) as the ledger has it, and its
 * result the tool result built from the run's journal, on any instance, after any restart.
 *
 * A task belongs to the principal that created it, not to the MCP session: any session of the
 * same principal can get, await, cancel and list it; for anyone else it does not exist.
 * - `tasks/get`: `working` while the run goes on, `input_required` once it stopped to ask (the
 *   questions in `statusMessage`), then `completed`, `failed` (a tool result with `isError`: the
 *   run failed, timed out, was interrupted by a crash, or a question expired) or `cancelled`.
 * - `tasks/result`: waits for the run to end, then the `tools/call` result a plain call would have
 *   returned (`_meta` names the task). For a task that waits for answers: to a client that takes
 *   form elicitations, its questions as `elicitation/create` on the `tasks/result` stream, the
 *   answers the task's next run, and the wait goes on; to any other, the result a client without
 *   elicitation gets (the questions, and how to answer: the tool called again with
 *   `{ resume: [...] }` in the MCP session that created the task).
 * - `tasks/cancel`: the run is cancelled wherever it runs (or, waiting for an answer, ended), and
 *   the task answered once its run is recorded.
 * - `tasks/list`: the caller's tasks, newest first, {@link TASKS_PAGE} a page.
 */
export function registerToolTasks (server: Server, options: ToolTasksOptions): ToolTasks {
  const { engine, catalogue, stores } = options
  const { runs } = stores
  const pollInterval = stores.pollIntervalMs ?? DEFAULT_POLL_MS
  const identityOf = (id: RequestId): Identity => options.callOf(id).identity

  /** The task `taskId` of `who`: its runs as stored, if it is theirs, an MCP task, and of an agent they may still call. */
  async function load (taskId: string, who: Identity): Promise<TaskRuns | undefined> {
    const first = await runs.get(runKey(who.id, taskId))
    return first === undefined || first.owner_key !== who.id ? undefined : await taskOf(first, who)
  }

  /** The task whose first run is `first`, if it is one. */
  async function taskOf (first: RunRecord, who: Identity): Promise<TaskRuns | undefined> {
    const envelope = JSON.parse(first.envelope) as ServiceRequest
    const metadata = (envelope.payload.metadata ?? {}) as Record<string, unknown>
    const mark = metadata[TASK_MARK] as TaskMark | undefined
    if (typeof mark !== 'object' || mark === null) return undefined
    const tool = catalogue.ofCapability(first.agent_id, String(metadata.capability), who)
    if (tool === undefined) return undefined
    // a run that stopped to ask goes on as a chain of runs, one after each answer
    const chain = first.end_reason === 'input_required' ? await stores.interrupts.get(first.request_id) : undefined
    const all = [first]
    for (const key of chain === undefined ? [] : chainRunKeys(chain).slice(1)) {
      const run = await runs.get(key)
      if (run !== undefined) all.push(run)
    }
    return { taskId: envelope.request_id, first, runs: all, chain, mark, tool }
  }

  /**
   * Where the task stands; with `result` (or when its status needs the journal to say: a run that
   * ended otherwise than done or cancelled, a tool that promises structured content), the
   * `tools/call` result too, once the task has ended or waits for answers.
   */
  async function examine (view: TaskRuns, result: boolean): Promise<TaskOutcome> {
    const latest = view.runs.at(-1) as RunRecord
    const { chain } = view
    const task = (status: Task['status'], updatedAt: number, statusMessage?: string): Task => ({
      taskId: view.taskId,
      status,
      ...(statusMessage !== undefined ? { statusMessage } : {}),
      createdAt: new Date(view.first.started_at).toISOString(),
      lastUpdatedAt: new Date(updatedAt).toISOString(),
      ttl: view.mark.ttl,
      pollInterval
    })
    if (latest.state === 'running') return { task: task('working', latest.started_at) }
    const ended = latest.ended_at ?? latest.started_at
    // the answers were taken, and the run that goes on with them is not stored yet
    if (chain !== undefined && chain.last_run !== latest.request_id) return { task: task('working', chain.updated_at) }
    if (latest.end_reason === 'input_required') {
      // its questions take no answer any more: ended (cancelled), or one of them expired
      const over = chain === undefined || waitsForAnswer(chain) ? undefined : chain.state === 'ended' ? 'cancelled' : 'failed'
      if (over !== undefined) {
        const message = over === 'cancelled' ? 'cancelled: the run was ended while it waited for an answer' : 'input_expired: a question expired before it was answered; the run was ended'
        return { task: task(over, (chain as WaitingRun).updated_at, message), ...(result ? { result: (await builderOf(view)).fail(metaOf(view), message) } : {}) }
      }
      const asking = chain === undefined ? undefined : questionsText(chain)
      return { task: task('input_required', ended, asking), ...(result ? { result: await resultOf(view) } : {}) }
    }
    if (!result && latest.end_reason === 'cancelled') return { task: task('cancelled', ended) }
    if (!result && latest.end_reason === 'done' && view.tool.tool.outputSchema === undefined) return { task: task('completed', ended) }
    // whether it failed is whether its result is an error (a tool that promised structured content and gave none did)
    const outcome = await resultOf(view)
    const failure = outcome.isError === true ? (outcome.content.at(-1) as { text?: string } | undefined)?.text : undefined
    const status = latest.end_reason === 'cancelled' ? 'cancelled' : outcome.isError === true ? 'failed' : 'completed'
    return { task: task(status, ended, status === 'failed' ? failure : undefined), ...(result ? { result: outcome } : {}) }
  }

  /** The task's runs' packets, each run's from its journal in turn, as one tool call's. */
  async function builderOf (view: TaskRuns): Promise<CallResultBuilder> {
    const builder = new CallResultBuilder(view.tool.agent.name)
    for (const run of view.runs) {
      builder.next()
      for (const row of await runs.rows(run.request_id)) {
        // what a follower of the run gets: the wire packets
        if (row.seq === null) continue
        const packet = JSON.parse(row.frame) as StreamPacket
        builder.add(packet, packet.op === 'CLOSE' && row.stream_id === run.main_stream_id)
      }
    }
    return builder
  }

  /** The `_meta` of the task's result: its latest run and CAP session, and the task. */
  function metaOf (view: TaskRuns): JsonObject {
    return { [META_REQUEST_ID]: wireIdOf(view.runs.at(-1) as RunRecord), [META_SESSION_ID]: view.first.session_id, [RELATED_TASK_META_KEY]: { taskId: view.taskId } }
  }

  /** The `tools/call` result of a task that ended or waits for answers, as a plain call would have returned it. */
  async function resultOf (view: TaskRuns): Promise<CallToolResult> {
    const builder = await builderOf(view)
    const structured = view.tool.tool.outputSchema !== undefined
    const interrupts = builder.interrupts
    if (builder.end === 'input_required' && interrupts !== undefined) return inputRequiredResult(view.tool.tool.name, interrupts, builder.content, metaOf(view), structured)
    return builder.build(metaOf(view), structured)
  }

  /**
   * Wait until `run` is recorded ended, here or on another instance (the engine recovers it if its
   * owner died), or `signal` fires (then rejects with its reason).
   */
  async function ended (run: RunRecord, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted()
    let stop: (() => void) | undefined
    const aborted = new Promise<never>((_resolve, reject) => {
      stop = () => { reject(signal.reason) }
      signal.addEventListener('abort', stop, { once: true })
    })
    // the engine waits for a run of this process whatever the signal: stop waiting for it anyway
    const answered = engine.answer(run.request_id, { signal })
    answered.catch(() => {})
    try {
      await Promise.race([answered, aborted])
    } finally {
      signal.removeEventListener('abort', stop as () => void)
    }
  }

  /** Wait until the task may have moved on: its latest run ended, or the run after an answer is stored. */
  async function moved (view: TaskRuns, signal: AbortSignal): Promise<void> {
    const latest = view.runs.at(-1) as RunRecord
    if (latest.state === 'running') await ended(latest, signal)
    else await sleep(CHAIN_POLL_MS, undefined, { signal })
  }

  /** Whether the session's client takes form elicitations (it declared `elicitation`). */
  const canElicit = (): boolean => server.getClientCapabilities()?.elicitation?.form !== undefined
  const fits: FormFits = (schema) => ElicitRequestFormParamsSchema.safeParse({ message: '', requestedSchema: schema }).success

  /**
   * For a client that takes form elicitations: ask the open questions of a task that waits for
   * answers as `elicitation/create` on the `tasks/result` stream (naming the task), then send the
   * answers as the task's next run (a resume in the task's CAP session, whichever MCP session asks).
   * True when the task may have moved on (answered; or ended: the person declined an input or
   * cancelled, and the waiting run was ended; or another answer came first); false when it still
   * waits and `tasks/result` answers the input-required result (credentials, which no form may ask;
   * an elicitation that failed; an answer refused twice). The client going away rejects: the task waits.
   */
  async function answered (view: TaskRuns, call: McpCall, requestId: RequestId, signal: AbortSignal): Promise<boolean> {
    const questions = view.chain === undefined ? [] : openInterrupts(view.chain).map(wireInterrupt)
    if (!canElicit() || questions.length === 0 || questions.some((q) => q.reason === 'auth')) return false
    const answers: ResumeAnswer[] = []
    for (const question of questions) {
      const answer = await ask(question, view.taskId, requestId, signal)
      if (answer === 'failed') return false
      if (answer === 'ended') return await endWaiting(view, call)
      answers.push({ interrupt_id: question.id, value: answer.value })
    }
    for (let refused = 0; ; refused++) {
      const latest = view.runs.at(-1) as RunRecord
      const origin = { agentId: view.tool.agent.id, capability: view.tool.capability, sessionId: view.first.session_id, userId: call.identity.id, traceId: call.traceId }
      const envelope = toolCallEnvelope({ resume: answers }, origin, {})
      try {
        const prepared = await engine.prepare(envelope, { identity: call.identity, delivery: 'own' })
        if (prepared.outcome === 'start') await call.admit(prepared.agent)
        const trace = call.runTrace?.(envelope.context.trace)
        await engine.begin(prepared, { log: call.log, ...(trace !== undefined ? { trace } : {}) })
        call.log.info({ taskId: view.taskId, answered: wireIdOf(latest), requestId: envelope.request_id }, 'an MCP task\'s questions were answered')
        return true
      } catch (err) {
        const e = hostError(err)
        if (e === undefined) throw err
        const invalid = refusedAnswer(err)
        const question = invalid === undefined ? undefined : questions.find((q) => q.id === answers[invalid.index]?.interrupt_id)
        // another answer came first, or a question expired: the task says where it stands now
        if (e.code === 'AH_ERR_INTERRUPT_CLOSED' || e.code === 'AH_ERR_INTERRUPT_EXPIRED') return true
        if (invalid === undefined || question === undefined || refused > 0) return false
        // the person's answer did not do: asked again once, saying why
        const again = await ask(question, view.taskId, requestId, signal, invalid.message)
        if (again === 'failed') return false
        if (again === 'ended') return await endWaiting(view, call)
        answers[invalid.index] = { interrupt_id: question.id, value: again.value }
      }
    }
  }

  /** One question as `elicitation/create` on the stream of `tasks/result` `requestId` (`note`: why it is asked again). */
  async function ask (question: Interrupt, taskId: string, requestId: RequestId, signal: AbortSignal, note?: string): Promise<{ value: unknown } | 'ended' | 'failed'> {
    const form = elicitationForm(question, fits)
    let answer
    try {
      answer = await server.elicitInput({
        mode: 'form',
        message: note === undefined ? form.message : `${form.message}\n\n(${note})`,
        requestedSchema: form.requestedSchema,
        _meta: { [RELATED_TASK_META_KEY]: { taskId } }
      }, { relatedRequestId: requestId, signal, timeout: Math.min(MAX_TIMER_MS, Math.max(1, Date.parse(question.expires_at) - Date.now())) })
    } catch (err) {
      signal.throwIfAborted()
      options.callOf(requestId).log.info({ err, taskId, interrupt: question.id }, 'an MCP task\'s elicitation failed')
      return 'failed'
    }
    switch (answer.action) {
      case 'accept': return { value: form.answer(answer.content ?? {}) }
      // declining an approval is its answer: rejected
      case 'decline': return question.kind === 'approval' ? { value: { approved: false } } : 'ended'
      default: return 'ended'
    }
  }

  /** End a task's waiting run (its questions take no answer any more): the task is cancelled. */
  async function endWaiting (view: TaskRuns, call: McpCall): Promise<boolean> {
    try {
      await engine.cancel(wireIdOf(view.runs.at(-1) as RunRecord), call.identity)
    } catch (err) {
      // another request ended it, or answered it, first
      if (hostError(err)?.code !== 'AH_ERR_RUN_NOT_FOUND') throw err
    }
    return true
  }

  /** A handler whose unexpected errors are logged and answered as an internal error: the SDK would send their message as it is. */
  function guarded<Q, E extends { requestId: RequestId }, R> (what: string, handler: (request: Q, extra: E) => Promise<R>): (request: Q, extra: E) => Promise<R> {
    return async (request, extra) => {
      try {
        return await handler(request, extra)
      } catch (err) {
        if (err instanceof McpError) throw err
        options.callOf(extra.requestId).log.error({ err }, `MCP ${what} failed`)
        throw new McpError(ErrorCode.InternalError, 'Internal error')
      }
    }
  }

  server.setRequestHandler(GetTaskRequestSchema, guarded('tasks/get', async (request, extra) => {
    const view = await load(request.params.taskId, identityOf(extra.requestId))
    if (view === undefined) throw taskNotFound()
    return (await examine(view, false)).task
  }))

  server.setRequestHandler(GetTaskPayloadRequestSchema, guarded('tasks/result', async (request, extra) => {
    const call = options.callOf(extra.requestId)
    const signal = AbortSignal.any([extra.signal, call.gone])
    for (;;) {
      const view = await load(request.params.taskId, call.identity)
      if (view === undefined) throw taskNotFound()
      const { task, result } = await examine(view, true)
      if (result !== undefined && task.status === 'input_required' && await answered(view, call, extra.requestId, signal)) continue
      if (result !== undefined) return result
      try {
        await moved(view, signal)
      } catch (err) {
        // the client went away (or cancelled the request): nothing is answered, the task goes on
        if (signal.aborted) throw new McpError(ErrorCode.ConnectionClosed, 'tasks/result was cancelled')
        throw err
      }
    }
  }))

  server.setRequestHandler(CancelTaskRequestSchema, guarded('tasks/cancel', async (request, extra) => {
    const call = options.callOf(extra.requestId)
    const view = await load(request.params.taskId, call.identity)
    if (view === undefined) throw taskNotFound()
    const before = await examine(view, false)
    if (['completed', 'failed', 'cancelled'].includes(before.task.status)) throw new McpError(ErrorCode.InvalidParams, `Cannot cancel task in terminal status: ${before.task.status}`)
    const latest = view.runs.at(-1) as RunRecord
    try {
      await engine.cancel(wireIdOf(latest), call.identity)
    } catch (err) {
      // it ended meanwhile: the task says how
      if (hostError(err)?.code !== 'AH_ERR_RUN_NOT_FOUND') throw err
    }
    // answered once the run is recorded ended: the task says cancelled from then on, on every instance
    if (latest.state === 'running') await ended(latest, AbortSignal.any([extra.signal, call.gone]))
    const after = await load(request.params.taskId, call.identity)
    if (after === undefined) throw taskNotFound()
    return (await examine(after, false)).task
  }))

  server.setRequestHandler(ListTasksRequestSchema, guarded('tasks/list', async (request, extra) => {
    const who = identityOf(extra.requestId)
    const before = cursorOf(request.params?.cursor)
    const page = await runs.marked({ ownerKey: who.id, agentIds: catalogue.agentIds(who), mark: TASK_MARK }, { limit: TASKS_PAGE + 1, ...(before !== undefined ? { before } : {}) })
    const tasks: Task[] = []
    for (const first of page.slice(0, TASKS_PAGE)) {
      const view = await taskOf(first, who)
      if (view !== undefined) tasks.push((await examine(view, false)).task)
    }
    const last = page[TASKS_PAGE - 1]
    return { tasks, ...(page.length > TASKS_PAGE && last !== undefined ? { nextCursor: cursorText(last) } : {}) }
  }))

  return {
    create: guarded('task creation', create)
  }

  async function create (params: CallToolRequest['params'], extra: { requestId: RequestId }): Promise<CreateTaskResult> {
    const call = options.callOf(extra.requestId)
    const { identity } = call
    const tool = catalogue.find(params.name, identity)
    // an agent the caller may not invoke is not there for them
    if (tool === undefined) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${params.name}`)
    const requested = params.task?.ttl
    const ttl = requested === undefined ? stores.retentionMs : Math.min(stores.retentionMs, Math.max(0, Math.floor(requested)))
    const origin = { agentId: tool.agent.id, capability: tool.capability, sessionId: options.sessionId, userId: identity.id, traceId: call.traceId }
    const envelope = toolCallEnvelope(params.arguments ?? {}, origin, { mark: { ttl } })
    let requestId: string
    try {
      const prepared = await engine.prepare(envelope, { identity, delivery: 'own' })
      if (prepared.outcome === 'start') await call.admit(prepared.agent)
      const trace = call.runTrace?.(envelope.context.trace)
      requestId = (await engine.begin(prepared, { log: call.log, ...(trace !== undefined ? { trace } : {}) })).requestId
    } catch (err) {
      throw refusal(err)
    }
    const createdAt = new Date((await runs.get(requestId))?.started_at ?? Date.now()).toISOString()
    call.log.info({ taskId: envelope.request_id, tool: tool.tool.name }, 'MCP task created')
    return { task: { taskId: envelope.request_id, status: 'working', createdAt, lastUpdatedAt: createdAt, ttl, pollInterval } }
  }
}
