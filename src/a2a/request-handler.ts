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
import type { Frame } from '../assist/frame-queue.js'
import { runKey } from '../assist/run-key.js'
import type { HostedAgent } from '../agents/hosted-agent.js'
import type { Identity } from '../storage/api-keys.js'
import { visibleOwner } from '../auth/scopes.js'
import { AH_ERR_REQUEST_CONFLICT, AH_ERR_RUN_NOT_FOUND } from '../errors.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import type { DeliveryMode } from '../protocol/manifest.js'
import type { StreamPacket } from '../protocol/packets.js'
import type { RunReader } from '../storage/run-ledger.js'
import type { RunFilter, RunRecord } from '../storage/runs.js'
import { envelopeOf, isUuid, requestIdOf, sameAsk } from './message-envelope.js'
import { translated, translatedStream, type HttpErrorSlot } from './error-mapping.js'
import type { CheckedPushConfig, PushConfigs } from './push-configs.js'
import { projectionOf, TaskProjection, TERMINAL_STATES } from './task-projection.js'

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

function callOf (context: ServerCallContext): A2ACall {
  const call = context.state.get(A2A_CALL) as A2ACall | undefined
  if (call === undefined) throw new Error('an A2A call without its transport\'s context')
  return call
}

/** The A2A statuses a run in the store can have, as store filters. */
const STATE_FILTERS: Partial<Record<TaskState, NonNullable<RunFilter['states']>>> = {
  [TaskState.TASK_STATE_WORKING]: [{ state: 'running' }],
  [TaskState.TASK_STATE_COMPLETED]: [{ state: 'ended', endReason: ['done'] }],
  [TaskState.TASK_STATE_CANCELED]: [{ state: 'ended', endReason: ['cancelled'] }],
  [TaskState.TASK_STATE_FAILED]: [{ state: 'ended', endReason: ['aborted', 'shutdown', 'interrupted'] }]
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
 */
export class AgentA2AHandler implements A2ARequestHandler {
  readonly #engine: AssistEngine
  readonly #store: RunReader
  readonly #hosted: HostedAgent
  readonly #card: () => AgentCard
  readonly #push: PushConfigs | undefined

  /** `push`: the tasks' push notification configs (none: the push methods answer "not supported"). */
  constructor (options: { engine: AssistEngine, store: RunReader, hosted: HostedAgent, card: () => AgentCard, push?: PushConfigs }) {
    this.#engine = options.engine
    this.#store = options.store
    this.#hosted = options.hosted
    this.#card = options.card
    this.#push = options.push
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
      const push = await handler.#checkPush(params)
      const { requestId } = await handler.#submit(params, call, 'server_sent_events')
      await handler.#registerPush(push, requestId, call.identity)
      const projection = handler.#projection(await handler.#record(requestId))
      yield { payload: { $case: 'task', value: projection.task({ historyLength: params.configuration?.historyLength }) } }
      yield * handler.#follow(requestId, projection, undefined, call.signal)
    })
  }

  async getTask (params: GetTaskRequest, context: ServerCallContext): Promise<Task> {
    const record = await this.#visible(params.id, callOf(context).identity)
    return await this.#task(record, { historyLength: params.historyLength })
  }

  async listTasks (params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    const identity = callOf(context).identity
    const pageSize = params.pageSize ?? DEFAULT_PAGE_SIZE
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 100) throw new RequestMalformedError('pageSize must be between 1 and 100')
    const changedAfter = params.statusTimestampAfter !== undefined && params.statusTimestampAfter !== '' ? Date.parse(params.statusTimestampAfter) : undefined
    if (changedAfter !== undefined && Number.isNaN(changedAfter)) throw new RequestMalformedError('statusTimestampAfter must be an ISO 8601 date-time')
    if (params.contextId !== '' && !isUuid(params.contextId)) return { tasks: [], nextPageToken: '', pageSize, totalSize: 0 }
    const status = params.status
    const owner = visibleOwner(identity)
    const filter: RunFilter = {
      agentId: this.#hosted.manifest.metadata.id,
      ...(owner !== undefined ? { ownerKey: owner } : {}),
      ...(params.contextId !== '' ? { sessionId: params.contextId.toLowerCase() } : {}),
      ...(status !== undefined && status !== TaskState.TASK_STATE_UNSPECIFIED ? { states: STATE_FILTERS[status] ?? [] } : {}),
      ...(changedAfter !== undefined ? { changedAfter } : {})
    }
    const { runs, total } = await this.#store.list(filter, { limit: pageSize, ...(params.pageToken !== '' ? { before: cursorOf(params.pageToken) } : {}) })
    const tasks = await Promise.all(runs.map(async (record) => await this.#task(record, { historyLength: params.historyLength, artifacts: params.includeArtifacts === true })))
    const last = runs.at(-1)
    return { tasks, nextPageToken: runs.length === pageSize && last !== undefined ? pageToken(last) : '', pageSize, totalSize: total }
  }

  async cancelTask (params: CancelTaskRequest, context: ServerCallContext): Promise<Task> {
    const call = callOf(context)
    return await translated(call, async () => await this.#cancel(params, call.identity))
  }

  async #cancel (params: CancelTaskRequest, identity: Identity): Promise<Task> {
    const record = await this.#visible(params.id, identity)
    const before = await this.#task(record)
    if (before.status?.state === TaskState.TASK_STATE_CANCELED) return before
    if (record.state === 'ended') throw new TaskNotCancelableError(`Task ${params.id} has ended (${String(record.end_reason)}) and cannot be canceled`)
    try {
      await this.#engine.cancel(params.id, identity)
    } catch (err) {
      if (!(err instanceof AH_ERR_RUN_NOT_FOUND)) throw err
      // it ended between the look and the cancel
      const now = await this.#task(await this.#record(record.request_id))
      if (now.status?.state === TaskState.TASK_STATE_CANCELED) return now
      throw new TaskNotCancelableError(`Task ${params.id} has ended and cannot be canceled`)
    }
    await this.#engine.answer(record.request_id, { signal: AbortSignal.timeout(CANCEL_WAIT_MS) }).catch(() => {})
    return await this.#task(await this.#record(record.request_id))
  }

  resubscribe (params: SubscribeToTaskRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    const call = callOf(context)
    const handler = this
    return translatedStream(call, async function * () {
      const record = await handler.#visible(params.id, call.identity)
      // the task as the journal has it now, then the packets after the last of them: nothing missed, nothing twice
      const projection = handler.#projection(record)
      let last: Cursor | undefined
      for (const row of await handler.#store.rows(record.request_id)) {
        if (row.seq === null) continue
        projection.apply(JSON.parse(row.frame) as StreamPacket)
        last = { streamId: row.stream_id, seq: row.seq }
      }
      if (projection.ended || record.state === 'ended') {
        throw new UnsupportedOperationError(`Task ${params.id} is in a terminal state and cannot be subscribed to`)
      }
      yield { payload: { $case: 'task', value: projection.task() } }
      yield * handler.#follow(record.request_id, projection, last, call.signal)
    })
  }

  async createTaskPushNotificationConfig (params: TaskPushNotificationConfig, context: ServerCallContext): Promise<TaskPushNotificationConfig> {
    const call = callOf(context)
    return await translated(call, async () => {
      const push = this.#pushConfigs()
      const record = await this.#visible(params.taskId, call.identity)
      return await push.save(record, await push.check(params), call.identity, 'now')
    })
  }

  async getTaskPushNotificationConfig (params: GetTaskPushNotificationConfigRequest, context: ServerCallContext): Promise<TaskPushNotificationConfig> {
    const push = this.#pushConfigs()
    return push.get(await this.#visible(params.taskId, callOf(context).identity), params.id)
  }

  async listTaskPushNotificationConfigs (params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext): Promise<ListTaskPushNotificationConfigsResponse> {
    const push = this.#pushConfigs()
    // a task has at most MAX_CONFIGS_PER_TASK configs: one page
    return { configs: await push.list(await this.#visible(params.taskId, callOf(context).identity)), nextPageToken: '' }
  }

  async deleteTaskPushNotificationConfig (params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext): Promise<void> {
    const call = callOf(context)
    await translated(call, async () => {
      const push = this.#pushConfigs()
      await push.delete(await this.#visible(params.taskId, call.identity), params.id, call.identity)
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
    if (message.taskId !== '') {
      const task = await this.#task(await this.#visible(message.taskId, call.identity))
      throw new UnsupportedOperationError(TERMINAL_STATES.has(task.status?.state ?? TaskState.TASK_STATE_WORKING)
        ? `Task ${message.taskId} has ended: send a new message (with its contextId, to stay in its context) to start another task`
        : `Task ${message.taskId} is still running and takes no more input: wait for it, or cancel it`)
    }
    const agent = this.#hosted.manifest.metadata
    const key = runKey(call.identity.id, requestIdOf(message.messageId))
    const envelope = async (): Promise<ServiceRequest> => {
      const known = await this.#store.get(key)
      const stored = known === undefined ? undefined : JSON.parse(known.envelope) as ServiceRequest
      const fresh = envelopeOf(message, { agentId: agent.id, userId: call.identity.id, traceId: call.traceId, ...(stored !== undefined ? { sessionId: stored.context.session_id } : {}) })
      if (stored === undefined) return fresh
      if (!sameAsk(stored, fresh)) throw new RequestMalformedError(`messageId "${message.messageId}" was already sent with another message: a new message needs a new messageId`)
      return stored
    }
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

  /** The run `requestId` (a run key) names; it exists: it was just submitted or looked up. */
  async #record (requestId: string): Promise<RunRecord> {
    return await this.#store.get(requestId) as RunRecord
  }

  /** The caller's task `taskId` of this agent (an admin's: anyone's). */
  async #visible (taskId: string, identity: Identity): Promise<RunRecord> {
    const agentId = this.#hosted.manifest.metadata.id
    if (!isUuid(taskId)) throw new TaskNotFoundError(`Task not found: ${taskId}`)
    const own = await this.#store.get(runKey(identity.id, taskId.toLowerCase()))
    const record = own ?? (visibleOwner(identity) === undefined ? await this.#store.byWireId(agentId, taskId.toLowerCase()) : undefined)
    if (record === undefined || record.agent_id !== agentId) throw new TaskNotFoundError(`Task not found: ${taskId}`)
    return record
  }

  #projection (record: RunRecord): TaskProjection {
    return projectionOf(record, this.#hosted.manifest.metadata.name)
  }

  /** The task a run is now: its journal replayed. */
  async #task (record: RunRecord, options: { historyLength?: number | undefined, artifacts?: boolean } = {}): Promise<Task> {
    const projection = this.#projection(record)
    for (const row of await this.#store.rows(record.request_id)) {
      if (row.seq !== null) projection.apply(JSON.parse(row.frame) as StreamPacket)
    }
    return projection.task(options)
  }

  /** The run's packets after `after` as A2A stream events, until the task ends or the client goes. */
  async * #follow (requestId: string, projection: TaskProjection, after: Cursor | undefined, signal: AbortSignal): AsyncGenerator<StreamResponse, void, undefined> {
    for await (const frames of this.#engine.follow(requestId, { ...(after !== undefined ? { after } : {}), signal })) {
      for (const frame of frames as Frame[]) {
        for (const event of projection.apply(JSON.parse(frame.json) as StreamPacket)) yield event
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
