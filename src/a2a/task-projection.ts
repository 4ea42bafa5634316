import { TaskState, type Artifact, type Message, type Part, type StreamResponse, type Task, type TaskStatus } from '@a2a-js/sdk'
import type { ServiceRequest } from '../protocol/envelope.js'
import type { Interrupt } from '../protocol/interrupts.js'
import { addUsage, type CloseReason, type StreamError, type StreamPacket } from '../protocol/packets.js'
import type { RunRecord } from '../storage/runs.js'
import { requestMessage } from './message-envelope.js'
import { agentMessage, dataPart, textPart, urlPart } from './parts.js'

/** Terminal A2A states: a task in one of them changes no more. */
export const TERMINAL_STATES: ReadonlySet<TaskState> = new Set([TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED])

/** Interrupted A2A states: the task waits for its caller (a message with its `taskId` goes on with it). */
export const INTERRUPTED_STATES: ReadonlySet<TaskState> = new Set([TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED])

/** The A2A state a run ends in, by the reason its main stream closed (`input_required`: `auth-required` when one of its questions asks for credentials, which only its `INTERRUPT` says). */
export function endState (reason: CloseReason | string): TaskState {
  switch (reason) {
    case 'done': return TaskState.TASK_STATE_COMPLETED
    case 'cancelled': return TaskState.TASK_STATE_CANCELED
    case 'input_required': return TaskState.TASK_STATE_INPUT_REQUIRED
    default: return TaskState.TASK_STATE_FAILED
  }
}

/** The next run of a task's chain (human in the loop: a run that goes on after its caller answered). */
export interface NextRun {
  /** The run's main stream: its CLOSE ends the task (again). */
  mainStreamId: string
  /** The caller's message that answered (its `taskId` the task's). */
  request: Message
  /** When the run started (ISO 8601). */
  startedAt: string
}

/** What a task is made from, before its first packet. */
export interface TaskSeed {
  /** The task id: the run's request id as its caller sent it. */
  taskId: string
  /** The run's session id. */
  contextId: string
  /** The run's main stream: its CLOSE ends the task. */
  mainStreamId: string
  /** The caller's message, as the task's history begins. */
  request: Message
  /** When the run started (ISO 8601). */
  submittedAt: string
  /** Kept in the task's `metadata.agent_host`. */
  metadata: Record<string, unknown>
}

/**
 * One run's packets as an A2A task (the mapping table is `docs/a2a.md`): each packet
 * becomes the stream events a `SendStreamingMessage` client is sent, and the same events, merged as
 * an A2A client merges them, make the task `GetTask` answers. A re-subscription is the task made
 * from the journal so far, then the events of the packets after it, so a client that merges them
 * misses nothing and gets nothing twice.
 *
 * - A DELTA of a stream appends a text part to the artifact of that stream (`artifactId` = the
 *   stream id, named by its STREAM_START's title); a MARKDOWN_BLOCK appends to the artifact of the
 *   main stream (`response`).
 * - RESULT is the artifact `result` (a data part); DATA, CITATION_BLOCK and MEDIA_CAROUSEL are
 *   artifacts of their own (data parts, or url parts for media).
 * - THOUGHT_TRACE, PROGRESS_INDICATOR, a WARNING and a stream's abort are `working` status updates
 *   whose message says what happened (the packet's data in a data part and in `metadata.cap`).
 * - The main stream's CLOSE is the final status: `done` → completed, `cancelled` → canceled,
 *   `aborted` and `shutdown` → failed, with the error that ended the run as its message.
 * - An INTERRUPT (the run stops to ask) is the status `input-required` (`auth-required` when a
 *   question asks for credentials) whose message holds the questions: their texts in a text part,
 *   `{ interrupts }` in a data part; the CLOSE `input_required` that follows ends the stream in it.
 * - USAGE is kept in the task's `metadata.agent_host.usage`.
 *
 * A task whose caller answered goes on in another run (a chain: `storage/interrupts.ts`): the same
 * projection takes it ({@link TaskProjection.continueWith}), so the task keeps its id, its artifacts
 * (markdown goes on in the same `response`) and its history (the question, then the answer).
 */
export class TaskProjection {
  readonly #seed: TaskSeed
  /** The main stream of the run the projection takes now (the seed's, or a later run's of the chain). */
  #main: string
  readonly #history: Message[]
  #status: TaskStatus
  readonly #artifacts = new Map<string, Artifact>()
  readonly #titles = new Map<string, string>()
  #fatal: StreamError | undefined
  #usage: { input_tokens: number, output_tokens: number, cost?: number } | undefined
  #messages = 0
  #ended = false

  constructor (seed: TaskSeed) {
    this.#seed = seed
    this.#main = seed.mainStreamId
    this.#history = [seed.request]
    this.#status = { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: seed.submittedAt }
  }

  /** Whether the main stream has closed: the task is in a terminal state. */
  get ended (): boolean {
    return this.#ended
  }

  /** The task's state now. */
  get state (): TaskState {
    return this.#status.state
  }

  /**
   * Go on with the chain's next run: the question the task stopped at and the caller's answer join
   * its history, it works again, and the next run's packets are taken from now on.
   */
  continueWith (run: NextRun): void {
    if (INTERRUPTED_STATES.has(this.#status.state) && this.#status.message !== undefined) this.#history.push(this.#status.message)
    this.#history.push(run.request)
    this.#main = run.mainStreamId
    this.#ended = false
    this.#fatal = undefined
    this.#status = { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: run.startedAt }
  }

  /**
   * End a task that waits for its caller without another run: `canceled` (`CancelTask`), or
   * `expired` (a question was not answered in time: failed, with the error saying so).
   */
  endWaiting (how: 'canceled' | 'expired', timestamp: string): void {
    this.#ended = true
    if (how === 'canceled') {
      this.#status = { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp }
      return
    }
    const error = { code: 'interrupt_expired', message: 'The task waited for an answer that did not come in time', severity: 'FATAL' }
    this.#status = { state: TaskState.TASK_STATE_FAILED, message: agentMessage(this.#ids(), [textPart(error.message), dataPart({ error })], { cap: { error } }), timestamp }
  }

  /** The task as it stands: its status, its artifacts so far, its history (the caller's messages, and the questions they answered). */
  task (options: { historyLength?: number | undefined, artifacts?: boolean } = {}): Task {
    const history = options.historyLength === undefined ? [...this.#history] : options.historyLength <= 0 ? [] : this.#history.slice(-options.historyLength)
    return {
      id: this.#seed.taskId,
      contextId: this.#seed.contextId,
      status: this.#status,
      artifacts: options.artifacts === false ? [] : [...this.#artifacts.values()].map((artifact) => ({ ...artifact, parts: [...artifact.parts] })),
      history,
      metadata: { agent_host: { ...this.#seed.metadata, ...(this.#usage !== undefined ? { usage: this.#usage } : {}) } }
    }
  }

  /** Take one packet (parsed from its journaled JSON); the stream events it makes, in order. */
  apply (packet: StreamPacket): StreamResponse[] {
    switch (packet.op) {
      case 'DELTA':
        // the main stream of every run of a chain is one artifact: the task's
        return [this.#append(packet.stream_id === this.#main ? this.#seed.mainStreamId : packet.stream_id, this.#titles.get(packet.stream_id) ?? 'stream', [textPart(packet.p)])]
      case 'EVENT':
        return this.#event(packet)
      case 'ERROR':
        if (packet.stream_id === this.#main && packet.p.severity !== 'WARNING') {
          this.#fatal = packet.p
          return []
        }
        return [this.#working(packet.t, `${packet.p.severity === 'WARNING' ? 'Warning' : 'Error'}: ${packet.p.message}`, { error: packet.p })]
      case 'CLOSE':
        if (packet.stream_id !== this.#main) return []
        return this.#end(packet.p, packet.t)
    }
  }

  #event (packet: Extract<StreamPacket, { op: 'EVENT' }>): StreamResponse[] {
    const event = packet.p
    switch (event.type) {
      case 'INTERRUPT':
        return [this.#interrupted(event.interrupts, packet.t)]
      case 'STREAM_START':
        if (event.title !== undefined) this.#titles.set(packet.stream_id, event.title)
        return []
      case 'MARKDOWN_BLOCK':
        return [this.#append(this.#seed.mainStreamId, 'response', [textPart(event.data.content)])]
      case 'RESULT':
        return [this.#replace('result', 'result', [dataPart(event.data)])]
      case 'DATA':
        return [this.#replace(event.id, event.title ?? 'data', [dataPart(event.data)], { view_hint: event.view_hint })]
      case 'CITATION_BLOCK':
        return [this.#replace(event.id, 'citations', [dataPart({ citations: event.data.citations })])]
      case 'MEDIA_CAROUSEL':
        return [this.#replace(event.id, 'media', event.data.items.map((item) => urlPart(item.url, item.mime_type, item.alt_text !== undefined ? { alt_text: item.alt_text } : undefined)))]
      case 'THOUGHT_TRACE':
        return [this.#working(event.timestamp, event.data.thought, { event: { type: event.type, status: event.data.status } })]
      case 'PROGRESS_INDICATOR':
        return [this.#working(event.timestamp, event.data.label, { event: { type: event.type, ...event.data } })]
      case 'USAGE':
        this.#usage = addUsage(this.#usage, event.data)
        return []
    }
  }

  #ids (): { taskId: string, contextId: string, messageId: string } {
    return { taskId: this.#seed.taskId, contextId: this.#seed.contextId, messageId: `${this.#seed.taskId}:${++this.#messages}` }
  }

  #working (timestamp: string, text: string, cap: Record<string, unknown>): StreamResponse {
    this.#status = { state: TaskState.TASK_STATE_WORKING, message: agentMessage(this.#ids(), [textPart(text), dataPart(cap)], { cap }), timestamp }
    return this.#statusUpdate()
  }

  #interrupted (interrupts: Interrupt[], timestamp: string): StreamResponse {
    const state = interrupts.some((i) => i.reason === 'auth') ? TaskState.TASK_STATE_AUTH_REQUIRED : TaskState.TASK_STATE_INPUT_REQUIRED
    const text = interrupts.map((i) => i.message).join('\n\n')
    this.#status = { state, message: agentMessage(this.#ids(), [textPart(text), dataPart({ interrupts })], { cap: { event: { type: 'INTERRUPT' } } }), timestamp }
    return this.#statusUpdate()
  }

  #end (reason: CloseReason, timestamp: string): StreamResponse[] {
    this.#ended = true
    // the INTERRUPT before it was the status: the stream ends in it
    if (reason === 'input_required' && INTERRUPTED_STATES.has(this.#status.state)) return []
    const state = endState(reason)
    const error = this.#fatal ?? (reason === 'shutdown' ? { code: 'shutting_down', message: 'The server shut down before the run ended', severity: 'TRANSIENT' as const } : undefined)
    const message = state === TaskState.TASK_STATE_FAILED && error !== undefined ? agentMessage(this.#ids(), [textPart(error.message), dataPart({ error })], { cap: { error, close: reason } }) : undefined
    this.#status = { state, message, timestamp }
    return [this.#statusUpdate()]
  }

  #statusUpdate (): StreamResponse {
    return { payload: { $case: 'statusUpdate', value: { taskId: this.#seed.taskId, contextId: this.#seed.contextId, status: this.#status, metadata: undefined } } }
  }

  /** Add parts to an artifact (made by its first chunk): an appended chunk on the wire. */
  #append (artifactId: string, name: string, parts: Part[]): StreamResponse {
    const known = this.#artifacts.get(artifactId)
    if (known === undefined) this.#artifacts.set(artifactId, { artifactId, name, description: '', parts: [...parts], metadata: undefined, extensions: [] })
    else known.parts.push(...parts)
    return this.#artifactUpdate({ artifactId, name, description: '', parts, metadata: undefined, extensions: [] }, known !== undefined)
  }

  /** An artifact sent whole (a later one of the same id replaces it). */
  #replace (artifactId: string, name: string, parts: Part[], metadata?: Record<string, unknown>): StreamResponse {
    const artifact: Artifact = { artifactId, name, description: '', parts, metadata, extensions: [] }
    this.#artifacts.set(artifactId, { ...artifact, parts: [...parts] })
    return this.#artifactUpdate(artifact, false)
  }

  #artifactUpdate (artifact: Artifact, append: boolean): StreamResponse {
    return { payload: { $case: 'artifactUpdate', value: { taskId: this.#seed.taskId, contextId: this.#seed.contextId, artifact, append, lastChunk: false, metadata: undefined } } }
  }
}

/**
 * The projection of a stored run, before its first packet: the one way a run's task is made, for
 * `GetTask`, the streams and push notifications alike (the agent's name and the capability asked
 * for in its metadata), so a task is the same however a client gets it.
 */
export function projectionOf (record: RunRecord, agentName: string): TaskProjection {
  const envelope = JSON.parse(record.envelope) as ServiceRequest
  return new TaskProjection({
    taskId: envelope.request_id,
    contextId: record.session_id,
    mainStreamId: record.main_stream_id,
    request: requestMessage(envelope),
    submittedAt: new Date(record.started_at).toISOString(),
    metadata: { agent: agentName, ...(envelope.payload.metadata?.capability !== undefined ? { capability: envelope.payload.metadata.capability } : {}) }
  })
}
