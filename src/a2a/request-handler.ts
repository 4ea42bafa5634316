import { TaskState, type AgentCard, type Message, type StreamResponse, type Task } from '@a2a-js/sdk'
import {
  ExtendedAgentCardNotConfiguredError, PushNotificationNotSupportedError, RequestMalformedError, TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
} from '@a2a-js/sdk/errors'
import type {
  A2ARequestHandler, ServerCallContext
} from '@a2a-js/sdk/server'
import type {
  CancelTaskRequest, DeleteTaskPushNotificationConfigRequest, GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
  ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, SendMessageRequest, SubscribeToTaskRequest, TaskPushNotificationConfig
} from '@a2a-js/sdk'
import type { AssistEngine, Cursor } from '../assist/engine.js'
import { packetOf, type Frame } from '../assist/frame-queue.js'
import { runKey } from '../assist/run-key.js'
import type { HostedAgent } from '../agents/hosted-agent.js'
import type { Identity } from '../storage/api-keys.js'
import { viewerOf } from '../auth/scopes.js'
import { AH_ERR_REQUEST_CONFLICT, AH_ERR_RUN_NOT_FOUND } from '../errors.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import type { DeliveryMode } from '../protocol/manifest.js'
import type { StreamPacket } from '../protocol/packets.js'
import { answersQuestions, chainOf, chainRunKeys, openInterrupts, waitsForAnswer, type InterruptStore, type WaitingRun } from '../storage/interrupts.js'
import type { RunReader } from '../storage/run-ledger.js'
import type { RunFilter, RunRecord } from '../storage/runs.js'
import { isUuid } from '../protocol/foreign-ids.js'
import { sameAsk } from '../protocol/binding-envelope.js'
import { envelopeOf, requestIdOf } from './message-envelope.js'
import { translated, translatedStream, type HttpErrorSlot } from './error-mapping.js'
import type { CheckedPushConfig, PushConfigs } from './push-configs.js'
import { resumeFromMessage } from './resume-answer.js'
import { chainTask } from './task-chain.js'
import { INTERRUPTED_STATES, projectionOf, TaskProjection, TERMINAL_STATES } from './task-projection.js'

/** What the transport knows of one call, handed to the handler in its `ServerCallContext.state`. */
export interface A2ACall extends HttpErrorSlot {
  identity: Identity
  /** The request's W3C trace id (the run's envelope carries it). */
  traceId: string
  /** Refuse a new run (per-agent rate limit): throw to refuse. */
  admit: (agent: { id: string, name: string }) => Promise<void>
  /** Aborted when the client goes away. */
  signal: AbortSignal
}

/** The key of the {@link A2ACall} in a `ServerCallContext`'s state. */
export const A2A_CALL = 'agent-host.a2a.call'

/** How long `CancelTask` waits for a cancelled run to be recorded before it answers with the task as it is. */
const CANCEL_WAIT_MS = 5000
const DEFAULT_PAGE_SIZE = 50
/** The most store pages one `ListTasks` page reads (tasks of chains, or of another state, are skipped). */
const MAX_LIST_READS = 20

function callOf (context: ServerCallContext): A2ACall {
  const call = context.state.get(A2A_CALL) as A2ACall | undefined
  if (call === undefined) throw new Error('an A2A call without its transport\'s context')
  return call
}

/** Whether A2A v1.0's `tenant` of a request ('' for none) names another tenant than the caller's. */
function otherTenant (tenant: string | undefined, identity: Identity): boolean {
  return tenant !== undefined && tenant !== '' && tenant !== identity.tenant
}

/** The call of a request that names no task: its `tenant`, when given, must be the caller's. */
function tenantCall (context: ServerCallContext, tenant: string | undefined): A2ACall {
  const call = callOf(context)
  if (otherTenant(tenant, call.identity)) throw new RequestMalformedError(`tenant "${String(tenant)}" is not the caller's: send "${call.identity.tenant}" or none`)
  return call
}

/** The A2A statuses a run in the store can have, as store filters. */
const STATE_FILTERS: Partial<Record<TaskState, NonNullable<RunFilter['states']>>> = {
  [TaskState.TASK_STATE_WORKING]: [{ state: 'running' }],
  [TaskState.TASK_STATE_COMPLETED]: [{ state: 'ended', endReason: ['done'] }],
  [TaskState.TASK_STATE_CANCELED]: [{ state: 'ended', endReason: ['cancelled'] }],
  [TaskState.TASK_STATE_FAILED]: [{ state: 'ended', endReason: ['aborted', 'shutdown', 'interrupted'] }],
  [TaskState.TASK_STATE_INPUT_REQUIRED]: [{ state: 'ended', endReason: ['input_required'] }],
  [TaskState.TASK_STATE_AUTH_REQUIRED]: [{ state: 'ended', endReason: ['input_required'] }]
}

/** The runs that begin a chain (they stopped to ask): a chain's task is in any state its latest run is in. */
const CHAIN_STARTS: NonNullable<RunFilter['states']> = [{ state: 'ended', endReason: ['input_required'] }]

/** A task as a view of runs: the projection, the run a follower follows, where its journal was read to, and the chain. */
interface TaskView {
  projection: TaskProjection
  latest: RunRecord
  after: Cursor | undefined
  chain?: WaitingRun
}

/** A page token: where the last page ended (its last run's start and id), opaque to the client. */
function pageToken (record: RunRecord): string {
  return Buffer.from(`${record.started_at}:${record.run_id}`).toString('base64url')
}

function cursorOf (token: string): { startedAt: number, runId: number } {
  const match = /^(\d{1,16}):(\d{1,16})$/.exec(Buffer.from(token, 'base64url').toString())
  if (match === null) throw new RequestMalformedError('pageToken is not one this server issued')
  return { startedAt: Number(match[1]), runId: Number(match[2]) }
}

/**
 * One hosted agent as an A2A server (the `A2ARequestHandler` the SDK's transports call): an A2A
 * task **is** a run of the engine. `SendMessage` and `SendStreamingMessage` submit the message as a
 * CAP envelope (same journal, idempotency by message id, auth, tenant isolation, limits, audit and
 * metrics as `POST /v1/assist`); `GetTask`, `ListTasks` and `SubscribeToTask` read the run's record
 * and journal through {@link TaskProjection}; `CancelTask` is the engine's cancel. A caller sees only
 * its own tasks (an admin everyone's); another's is "not found". No run logic lives here: only the
 * translation of shapes and errors.
 *
 * Human in the loop: a run that stops to ask leaves its task `input-required` (or `auth-required`);
 * a message with the task's `taskId` answers (`resume-answer.ts`: its parts as CAP's
 * `payload.resume`) and goes on in a new run of the chain (`storage/interrupts.ts`), which the task
 * shows under its first id (`task-chain.ts`): `GetTask` the chain's latest run, `ListTasks` the
 * chain once, `SubscribeToTask` follows the latest run.
 */
export class AgentA2AHandler implements A2ARequestHandler {
  readonly #engine: AssistEngine
  readonly #store: RunReader
  readonly #hosted: HostedAgent
  readonly #card: () => AgentCard
  readonly #push: PushConfigs | undefined
  readonly #interrupts: InterruptStore | undefined

  /**
   * `push`: the tasks' push notification configs (none: the push methods answer "not supported");
   * `interrupts`: the runs that wait for their caller's answer (none: a task never goes on).
   */
  constructor (options: { engine: AssistEngine, store: RunReader, hosted: HostedAgent, card: () => AgentCard, push?: PushConfigs, interrupts?: InterruptStore }) {
    this.#engine = options.engine
    this.#store = options.store
    this.#hosted = options.hosted
    this.#card = options.card
    this.#push = options.push
    this.#interrupts = options.interrupts
  }

  async getAgentCard (): Promise<AgentCard> {
    return this.#card()
  }

  async getAuthenticatedExtendedAgentCard (): Promise<AgentCard> {
    throw new ExtendedAgentCardNotConfiguredError('This agent has no extended agent card')
  }

  async sendMessage (params: SendMessageRequest, context: ServerCallContext): Promise<Message | Task> {
    const call = callOf(context)
    return await translated(call, async () => {
      tenantCall(context, params.tenant)
      const push = await this.#checkPush(params)
      const { requestId } = await this.#submit(params, call, 'request_response')
      await this.#registerPush(push, requestId, call.identity)
      if (params.configuration?.returnImmediately !== true) {
        // the run's answer is recorded: its journal is whole
        await this.#engine.answer(requestId, { signal: call.signal })
      }
      return await this.#task(await this.#record(requestId), { historyLength: params.configuration?.historyLength })
    })
  }

  sendMessageStream (params: SendMessageRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    const call = callOf(context)
    const handler = this
    return translatedStream(call, async function * () {
      tenantCall(context, params.tenant)
      const push = await handler.#checkPush(params)
      const { requestId } = await handler.#submit(params, call, 'server_sent_events')
      await handler.#registerPush(push, requestId, call.identity)
      // the task so far (a chain's earlier runs), then every packet of this run
      const { projection, latest, after } = await handler.#view(await handler.#record(requestId), requestId)
      yield { payload: { $case: 'task', value: projection.task({ historyLength: params.configuration?.historyLength }) } }
      yield * handler.#follow(latest.request_id, projection, after, call.signal)
    })
  }

  async getTask (params: GetTaskRequest, context: ServerCallContext): Promise<Task> {
    const record = await this.#visible(params.id, callOf(context).identity, params.tenant)
    return await this.#task(record, { historyLength: params.historyLength })
  }

  async listTasks (params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    const identity = tenantCall(context, params.tenant).identity
    const pageSize = params.pageSize ?? DEFAULT_PAGE_SIZE
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 100) throw new RequestMalformedError('pageSize must be between 1 and 100')
    const changedAfter = params.statusTimestampAfter !== undefined && params.statusTimestampAfter !== '' ? Date.parse(params.statusTimestampAfter) : undefined
    if (changedAfter !== undefined && Number.isNaN(changedAfter)) throw new RequestMalformedError('statusTimestampAfter must be an ISO 8601 date-time')
    if (params.contextId !== '' && !isUuid(params.contextId)) return { tasks: [], nextPageToken: '', pageSize, totalSize: 0 }
    const status = params.status !== undefined && params.status !== TaskState.TASK_STATE_UNSPECIFIED ? params.status : undefined
    const filter: RunFilter = {
      agentId: this.#hosted.manifest.metadata.id,
      viewer: viewerOf(identity),
      ...(params.contextId !== '' ? { sessionId: params.contextId.toLowerCase() } : {}),
      // a chain's task is listed at its first run, which stopped to ask, in whatever state the chain is now
      ...(status !== undefined ? { states: [...STATE_FILTERS[status] ?? [], ...(this.#interrupts !== undefined ? CHAIN_STARTS : [])] } : {}),
      ...(changedAfter !== undefined ? { changedAfter } : {})
    }
    const options = { historyLength: params.historyLength, artifacts: params.includeArtifacts === true }
    const tasks: Task[] = []
    const listed = new Set<string>()
    let before = params.pageToken !== '' ? cursorOf(params.pageToken) : undefined
    let total: number | undefined
    let skipped = 0
    let last: RunRecord | undefined
    let more = false
    // runs that are not tasks of their own (a chain's later runs), or whose chain is in another state, are skipped: read on until the page is full
    for (let reads = 0; reads < MAX_LIST_READS && tasks.length < pageSize; reads++) {
      const page = await this.#store.list(filter, { limit: pageSize, ...(before !== undefined ? { before } : {}) })
      total ??= page.total
      more = page.runs.length === pageSize
      for (const record of page.runs) {
        if (tasks.length === pageSize) { more = true; break }
        last = record
        const task = await this.#listed(record, changedAfter, options)
        if (task === undefined || listed.has(task.id) || (status !== undefined && task.status?.state !== status)) { skipped++; continue }
        listed.add(task.id)
        tasks.push(task)
      }
      if (page.runs.length < pageSize) break
      before = { startedAt: (page.runs.at(-1) as RunRecord).started_at, runId: (page.runs.at(-1) as RunRecord).run_id }
    }
    // exact when this page saw every run; else at most that many (skipped runs of later pages are counted)
    const totalSize = Math.max(tasks.length, (total ?? 0) - skipped)
    return { tasks, nextPageToken: more && last !== undefined ? pageToken(last) : '', pageSize, totalSize }
  }

  /** A run as `ListTasks` lists it: its task, unless it is a chain's later run (its chain is listed at its first run, or, when that is filtered out, at its latest). */
  async #listed (record: RunRecord, changedAfter: number | undefined, options: { historyLength?: number | undefined, artifacts: boolean }): Promise<Task | undefined> {
    if (this.#interrupts === undefined || !answersQuestions(record)) return await this.#task(record, options)
    const chain = await this.#interrupts.byLastRun(record.request_id)
    if (chain === undefined) return undefined
    const first = await this.#store.get(chain.run_key)
    if (first === undefined || changedAfter === undefined || (first.ended_at ?? first.started_at) > changedAfter) return undefined
    return await this.#task(record, options)
  }

  async cancelTask (params: CancelTaskRequest, context: ServerCallContext): Promise<Task> {
    const call = callOf(context)
    return await translated(call, async () => await this.#cancel(params, call.identity))
  }

  async #cancel (params: CancelTaskRequest, identity: Identity): Promise<Task> {
    const record = await this.#visible(params.id, identity, params.tenant)
    const { projection, latest, chain } = await this.#view(record)
    const before = projection.task()
    if (before.status?.state === TaskState.TASK_STATE_CANCELED) return before
    // a task that waits for its caller: the engine ends its chain (its questions take no answer from now on)
    const waiting = chain !== undefined && projection.ended && INTERRUPTED_STATES.has(projection.state)
    if (latest.state === 'ended' && !waiting) throw new TaskNotCancelableError(`Task ${params.id} has ended (${projection.ended ? String(latest.end_reason) : 'ended'}) and cannot be canceled`)
    try {
      // the run the task is at now: a chain's latest
      await this.#engine.cancel((JSON.parse(latest.envelope) as ServiceRequest).request_id, identity)
    } catch (err) {
      if (!(err instanceof AH_ERR_RUN_NOT_FOUND)) throw err
      // it ended (or went on) between the look and the cancel
      const now = await this.#task(record)
      if (now.status?.state === TaskState.TASK_STATE_CANCELED) return now
      throw new TaskNotCancelableError(`Task ${params.id} ${TERMINAL_STATES.has(now.status?.state ?? TaskState.TASK_STATE_FAILED) ? 'has ended' : 'went on meanwhile'} and cannot be canceled${TERMINAL_STATES.has(now.status?.state ?? TaskState.TASK_STATE_FAILED) ? '' : ': try again'}`)
    }
    if (!waiting) await this.#engine.answer(latest.request_id, { signal: AbortSignal.timeout(CANCEL_WAIT_MS) }).catch(() => {})
    return await this.#task(record)
  }

  resubscribe (params: SubscribeToTaskRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    const call = callOf(context)
    const handler = this
    return translatedStream(call, async function * () {
      const record = await handler.#visible(params.id, call.identity, params.tenant)
      // the task as the journal has it now (a chain's: up to its latest run), then the packets after the last of them: nothing missed, nothing twice
      const { projection, latest, after } = await handler.#view(record)
      if (projection.ended && INTERRUPTED_STATES.has(projection.state)) {
        // it waits for its caller: the task as it stands, and the stream ends there, as a message's stream does
        yield { payload: { $case: 'task', value: projection.task() } }
        return
      }
      if (projection.ended || latest.state === 'ended') {
        throw new UnsupportedOperationError(`Task ${params.id} is in a terminal state and cannot be subscribed to`)
      }
      yield { payload: { $case: 'task', value: projection.task() } }
      yield * handler.#follow(latest.request_id, projection, after, call.signal)
    })
  }

  async createTaskPushNotificationConfig (params: TaskPushNotificationConfig, context: ServerCallContext): Promise<TaskPushNotificationConfig> {
    const call = callOf(context)
    return await translated(call, async () => {
      const push = this.#pushConfigs()
      const record = await this.#visible(params.taskId, call.identity, params.tenant)
      return await push.save(record, await push.check(params), call.identity, 'now')
    })
  }

  async getTaskPushNotificationConfig (params: GetTaskPushNotificationConfigRequest, context: ServerCallContext): Promise<TaskPushNotificationConfig> {
    const push = this.#pushConfigs()
    return push.get(await this.#visible(params.taskId, callOf(context).identity, params.tenant), params.id)
  }

  async listTaskPushNotificationConfigs (params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext): Promise<ListTaskPushNotificationConfigsResponse> {
    const push = this.#pushConfigs()
    // a task has at most MAX_CONFIGS_PER_TASK configs: one page
    return { configs: await push.list(await this.#visible(params.taskId, callOf(context).identity, params.tenant)), nextPageToken: '' }
  }

  async deleteTaskPushNotificationConfig (params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext): Promise<void> {
    const call = callOf(context)
    await translated(call, async () => {
      const push = this.#pushConfigs()
      await push.delete(await this.#visible(params.taskId, call.identity, params.tenant), params.id, call.identity)
    })
  }

  /**
   * Submit the message as a run (or join the run its message id already started). A message sent
   * again is the same run when it asks the same thing; its stored envelope is submitted again, so
   * the engine's idempotency check (the envelope's hash) holds.
   */
  async #submit (params: SendMessageRequest, call: A2ACall, mode: DeliveryMode): Promise<{ requestId: string }> {
    const message = params.message
    if (message === undefined) throw new RequestMalformedError('message is required')
    const agent = this.#hosted.manifest.metadata
    const key = runKey(call.identity.id, requestIdOf(message.messageId))
    const newTask = async (): Promise<ServiceRequest> => {
      const known = await this.#store.get(key)
      const stored = known === undefined ? undefined : JSON.parse(known.envelope) as ServiceRequest
      const fresh = envelopeOf(message, { agentId: agent.id, userId: call.identity.id, traceId: call.traceId, ...(stored !== undefined ? { sessionId: stored.context.session_id } : {}) })
      if (stored === undefined) return fresh
      if (!sameAsk(stored, fresh)) throw new RequestMalformedError(`messageId "${message.messageId}" was already sent with another message: a new message needs a new messageId`)
      return stored
    }
    // a message to a task answers its questions
    const envelope = message.taskId !== '' ? async (): Promise<ServiceRequest> => await this.#answer(message, call, key, params) : newTask
    const submit = async (): Promise<{ requestId: string }> => {
      const prepared = await this.#engine.prepare(await envelope(), { identity: call.identity, delivery: mode })
      if (prepared.outcome === 'start') await call.admit(prepared.agent)
      return await this.#engine.begin(prepared)
    }
    try {
      return await submit()
    } catch (err) {
      // the same message raced itself: the other submission's envelope is stored now
      if (err instanceof AH_ERR_REQUEST_CONFLICT) return await submit()
      throw err
    }
  }

  /**
   * The CAP envelope of a message to task `message.taskId`: the answers to the questions it waits
   * on (`payload.resume`, in its context, under the message's id), or the stored envelope of the
   * same message sent before (its run is joined).
   * @throws UnsupportedOperationError for a task that does not wait (ended, or working), TaskNotFoundError for an unknown one
   */
  async #answer (message: Message, call: A2ACall, key: string, params: SendMessageRequest): Promise<ServiceRequest> {
    const record = await this.#visible(message.taskId, call.identity)
    const chain = this.#interrupts === undefined ? undefined : await chainOf(this.#interrupts, record)
    const known = await this.#store.get(key)
    if (known !== undefined) {
      // the same answer sent again: its run (whatever the chain did since)
      if (chain !== undefined && chainRunKeys(chain).includes(key) && answersQuestions(known)) return JSON.parse(known.envelope) as ServiceRequest
      throw new RequestMalformedError(`messageId "${message.messageId}" was already sent with another message: a new message needs a new messageId`)
    }
    if (chain === undefined || !waitsForAnswer(chain)) {
      const task = await this.#task(record)
      const state = task.status?.state ?? TaskState.TASK_STATE_WORKING
      // an expired question: the engine says so (and ends the chain)
      if (chain?.state !== 'waiting') {
        throw new UnsupportedOperationError(TERMINAL_STATES.has(state)
          ? `Task ${message.taskId} has ended: send a new message (with its contextId, to stay in its context) to start another task`
          : `Task ${message.taskId} is still running and takes no more input: wait for it, or cancel it`)
      }
    }
    if (params.configuration?.taskPushNotificationConfig !== undefined) {
      throw new PushNotificationNotSupportedError('Push notifications do not follow a task past an answer yet: leave out taskPushNotificationConfig, and follow the task with SubscribeToTask or GetTask')
    }
    if (message.contextId !== '' && message.contextId.toLowerCase() !== chain.session_id) {
      throw new RequestMalformedError(`message.contextId is not task ${message.taskId}'s context (${chain.session_id}): leave it out, or send the task's`)
    }
    const resume = resumeFromMessage(message, openInterrupts(chain))
    const envelope = envelopeOf({ ...message, contextId: chain.session_id, parts: [] }, { agentId: this.#hosted.manifest.metadata.id, userId: call.identity.id, traceId: call.traceId })
    envelope.payload.payload = { resume }
    return envelope
  }

  /** The run `requestId` (a run key) names; it exists: it was just submitted or looked up. */
  async #record (requestId: string): Promise<RunRecord> {
    return await this.#store.get(requestId) as RunRecord
  }

  /** The task `taskId` of this agent: the caller's own, else the newest the caller sees (`auth/scopes.ts:viewerOf`). */
  async #visible (taskId: string, identity: Identity, tenant?: string): Promise<RunRecord> {
    const agentId = this.#hosted.manifest.metadata.id
    if (!isUuid(taskId) || otherTenant(tenant, identity)) throw new TaskNotFoundError(`Task not found: ${taskId}`)
    const own = await this.#store.get(runKey(identity.id, taskId.toLowerCase()))
    const viewer = viewerOf(identity)
    const record = own ?? ('owner' in viewer ? undefined : await this.#store.byWireId(agentId, taskId.toLowerCase(), viewer))
    if (record === undefined || record.agent_id !== agentId) throw new TaskNotFoundError(`Task not found: ${taskId}`)
    return record
  }

  #projection (record: RunRecord): TaskProjection {
    return projectionOf(record, this.#hosted.manifest.metadata.name)
  }

  /** The task a run is now: its journal replayed (a chain's: every run's, up to its latest). */
  async #task (record: RunRecord, options: { historyLength?: number | undefined, artifacts?: boolean } = {}): Promise<Task> {
    return (await this.#view(record)).projection.task(options)
  }

  /**
   * The task run `record` is part of: its own, or its chain's (human in the loop), with the run a
   * follower follows and where its journal was read to. `fresh`: a run key whose packets are left
   * out when it is the task's latest run (its follower starts at its beginning).
   */
  async #view (record: RunRecord, fresh?: string): Promise<TaskView> {
    const chain = this.#interrupts === undefined ? undefined : await chainOf(this.#interrupts, record)
    if (chain !== undefined) {
      const task = await chainTask(this.#store, chain, this.#hosted.manifest.metadata.name, fresh !== undefined ? { fresh } : {})
      if (task !== undefined) return { ...task, chain }
    }
    const projection = this.#projection(record)
    let after: Cursor | undefined
    if (record.request_id !== fresh) {
      for (const row of await this.#store.rows(record.request_id)) {
        if (row.seq === null) continue
        projection.apply(JSON.parse(row.frame) as StreamPacket)
        after = { streamId: row.stream_id, seq: row.seq }
      }
    }
    return { projection, latest: record, after }
  }

  /** The run's packets after `after` as A2A stream events, until the task ends or the client goes. */
  async * #follow (requestId: string, projection: TaskProjection, after: Cursor | undefined, signal: AbortSignal): AsyncGenerator<StreamResponse, void, undefined> {
    if (projection.ended) return
    for await (const frames of this.#engine.follow(requestId, { ...(after !== undefined ? { after } : {}), signal })) {
      for (const frame of frames as Frame[]) {
        for (const event of projection.apply(packetOf(frame))) yield event
      }
      if (projection.ended) return
    }
  }

  // --- push notifications: SendMessage's configuration.taskPushNotificationConfig, and the config methods' service ---

  #pushConfigs (): PushConfigs {
    if (this.#push === undefined) throw new PushNotificationNotSupportedError('Push notifications are not enabled on this server')
    return this.#push
  }

  /** The push notification config a message asks for, checked before its run starts (a refused URL starts nothing). */
  async #checkPush (params: SendMessageRequest): Promise<CheckedPushConfig | undefined> {
    const config = params.configuration?.taskPushNotificationConfig
    return config === undefined ? undefined : await this.#pushConfigs().check(config)
  }

  /** Store the message's push notification config for its task: its first update is the task as submitted. */
  async #registerPush (config: CheckedPushConfig | undefined, requestId: string, identity: Identity): Promise<void> {
    if (config !== undefined) await this.#pushConfigs().save(await this.#record(requestId), config, identity, 'start')
  }
}
