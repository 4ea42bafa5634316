import type {
  CustomEvent, EventType, ReasoningEndEvent, ReasoningMessageContentEvent, ReasoningMessageEndEvent, ReasoningMessageStartEvent, ReasoningStartEvent,
  RunErrorEvent, RunFinishedEvent, RunStartedEvent, StepFinishedEvent, StepStartedEvent, TextMessageContentEvent, TextMessageEndEvent,
  TextMessageStartEvent, TokenUsage
} from '@ag-ui/core'
import type { AssistEngine, FollowOptions } from '../assist/engine.js'
import { packetOf } from '../assist/frame-queue.js'
import type { Interrupt } from '../protocol/interrupts.js'
import { addUsage, type CloseReason, type EventPayload, type StreamError, type StreamPacket, type UsageEvent } from '../protocol/packets.js'
import { agUiInterrupt } from './interrupts.js'

/**
 * An `@ag-ui/core` event type with its `type` as the string it is on the wire: the package's
 * `EventType` is a TypeScript enum (a value), and `src/` takes only types from the package.
 */
type Wire<E extends { type: EventType }> = Omit<E, 'type'> & { type: `${E['type']}` }

/** Every AG-UI event this binding sends. */
export type AgUiEvent =
  | Wire<RunStartedEvent> | Wire<RunFinishedEvent> | Wire<RunErrorEvent>
  | Wire<TextMessageStartEvent> | Wire<TextMessageContentEvent> | Wire<TextMessageEndEvent>
  | Wire<ReasoningStartEvent> | Wire<ReasoningMessageStartEvent> | Wire<ReasoningMessageContentEvent> | Wire<ReasoningMessageEndEvent> | Wire<ReasoningEndEvent>
  | Wire<StepStartedEvent> | Wire<StepFinishedEvent> | Wire<CustomEvent>

/** The AG-UI protocol version this binding speaks (RUN_STARTED declares it). */
export const AG_UI_PROTOCOL_VERSION = '1.0'

/** What a run's events are made from, before its first packet. */
export interface RunEventsSeed {
  /** The client's own `threadId` and `runId`, as sent (the CAP ids are UUIDs made from them). */
  threadId: string
  runId: string
  /** The run's main stream: its CLOSE ends the AG-UI run. */
  mainStreamId: string
}

/**
 * One run's packets as AG-UI events (the mapping table is `docs/ag-ui.md`), for one client's
 * stream: RUN_STARTED first, then for each packet the events it makes, and last RUN_FINISHED or
 * RUN_ERROR at the main stream's CLOSE.
 *
 * - The DELTAs of a stream are one assistant text message whose `messageId` is the stream id:
 *   TEXT_MESSAGE_START at its first DELTA, TEXT_MESSAGE_CONTENT for each, TEXT_MESSAGE_END at its
 *   CLOSE. A MARKDOWN_BLOCK is a whole text message of its own (start, content, end).
 * - THOUGHT_TRACE is a reasoning message (REASONING_START, REASONING_MESSAGE_START, _CONTENT, _END,
 *   REASONING_END), its id the event's.
 * - PROGRESS_INDICATOR is a step named by its label: STEP_STARTED when it first runs, STEP_FINISHED
 *   when it is complete or failed; each carries the CAP event's data in `metadata.progress`.
 * - Every other EVENT (CITATION_BLOCK, MEDIA_CAROUSEL, DATA, RESULT, USAGE) and a WARNING is a
 *   CUSTOM event named by its CAP type, whose value is the CAP event as sent.
 * - RESULT is also RUN_FINISHED's `result`; USAGE adds up into RUN_FINISHED's (or RUN_ERROR's) `usage`.
 * - The main stream's CLOSE: `done` is RUN_FINISHED (outcome `success`), `cancelled` RUN_FINISHED
 *   (outcome `cancelled`), `input_required` RUN_FINISHED (outcome `interrupt`, the INTERRUPT's
 *   questions), `aborted` and `shutdown` RUN_ERROR with the error that ended the run. Messages and
 *   steps still open are closed first, as AG-UI requires.
 */
export class RunEvents {
  readonly #seed: RunEventsSeed
  /** Streams whose text message is open, and the streams' titles (STREAM_START). */
  readonly #open = new Set<string>()
  readonly #titles = new Map<string, string>()
  readonly #steps = new Set<string>()
  #interrupts: Interrupt[] = []
  #result: Record<string, unknown> | undefined
  #usage: UsageEvent['data'] | undefined
  #fatal: StreamError | undefined
  #ended = false

  constructor (seed: RunEventsSeed) {
    this.#seed = seed
  }

  /** Whether the run's last event (RUN_FINISHED or RUN_ERROR) has been made. */
  get ended (): boolean {
    return this.#ended
  }

  /** The run's first event. */
  started (): AgUiEvent {
    return { type: 'RUN_STARTED', threadId: this.#seed.threadId, runId: this.#seed.runId, protocolVersion: AG_UI_PROTOCOL_VERSION }
  }

  /** Take one packet (parsed from its journaled JSON); the events it makes, in order. */
  apply (packet: StreamPacket): AgUiEvent[] {
    if (this.#ended) return []
    switch (packet.op) {
      case 'DELTA':
        return [...this.#openMessage(packet.stream_id), { type: 'TEXT_MESSAGE_CONTENT', messageId: packet.stream_id, delta: packet.p }]
      case 'EVENT':
        return this.#event(packet.stream_id, packet.p)
      case 'ERROR':
        if (packet.p.severity === 'WARNING') return [{ type: 'CUSTOM', name: 'WARNING', value: { stream_id: packet.stream_id, ...packet.p } }]
        this.#fatal ??= packet.p
        return []
      case 'CLOSE':
        if (packet.stream_id !== this.#seed.mainStreamId) return this.#closeMessage(packet.stream_id)
        return this.#end(packet.p)
    }
  }

  #event (streamId: string, event: EventPayload): AgUiEvent[] {
    switch (event.type) {
      case 'STREAM_START':
        if (event.title !== undefined) this.#titles.set(streamId, event.title)
        return []
      case 'MARKDOWN_BLOCK':
        return [
          { type: 'TEXT_MESSAGE_START', messageId: event.id, role: 'assistant' },
          { type: 'TEXT_MESSAGE_CONTENT', messageId: event.id, delta: event.data.content },
          { type: 'TEXT_MESSAGE_END', messageId: event.id }
        ]
      case 'THOUGHT_TRACE': {
        const messageId = event.id
        const metadata = { status: event.data.status }
        return [
          { type: 'REASONING_START', messageId },
          { type: 'REASONING_MESSAGE_START', messageId, role: 'reasoning', metadata },
          { type: 'REASONING_MESSAGE_CONTENT', messageId, delta: event.data.thought },
          { type: 'REASONING_MESSAGE_END', messageId },
          { type: 'REASONING_END', messageId }
        ]
      }
      case 'PROGRESS_INDICATOR':
        return this.#progress(event.data)
      case 'INTERRUPT':
        this.#interrupts = event.interrupts
        return []
      case 'RESULT':
        this.#result = event.data
        break
      case 'USAGE':
        this.#usage = addUsage(this.#usage, event.data)
        break
    }
    return [{ type: 'CUSTOM', name: event.type, value: event }]
  }

  #progress (data: { label: string, status: 'running' | 'complete' | 'failed', progress_percent?: number }): AgUiEvent[] {
    const stepName = data.label
    const metadata = { progress: data }
    if (data.status === 'running') {
      if (this.#steps.has(stepName)) return [{ type: 'CUSTOM', name: 'PROGRESS_INDICATOR', value: data }]
      this.#steps.add(stepName)
      return [{ type: 'STEP_STARTED', stepName, metadata }]
    }
    // a step reported done without having been reported running is started and finished at once
    const started: AgUiEvent[] = this.#steps.delete(stepName) ? [] : [{ type: 'STEP_STARTED', stepName, metadata }]
    return [...started, { type: 'STEP_FINISHED', stepName, metadata }]
  }

  #openMessage (streamId: string): AgUiEvent[] {
    if (this.#open.has(streamId)) return []
    this.#open.add(streamId)
    const title = this.#titles.get(streamId)
    return [{ type: 'TEXT_MESSAGE_START', messageId: streamId, role: 'assistant', ...(title !== undefined ? { metadata: { title } } : {}) }]
  }

  #closeMessage (streamId: string): AgUiEvent[] {
    return this.#open.delete(streamId) ? [{ type: 'TEXT_MESSAGE_END', messageId: streamId }] : []
  }

  /** End every message and step still open (a run's end closes all of them). */
  #closeAll (): AgUiEvent[] {
    const events: AgUiEvent[] = [...this.#open].flatMap((id) => this.#closeMessage(id))
    for (const stepName of this.#steps) events.push({ type: 'STEP_FINISHED', stepName })
    this.#steps.clear()
    return events
  }

  #end (reason: CloseReason): AgUiEvent[] {
    this.#ended = true
    const closed = this.#closeAll()
    const usage: TokenUsage[] | undefined = this.#usage === undefined ? undefined : [{ inputTokens: this.#usage.input_tokens, outputTokens: this.#usage.output_tokens, totalTokens: this.#usage.input_tokens + this.#usage.output_tokens }]
    const ids = { threadId: this.#seed.threadId, runId: this.#seed.runId }
    switch (reason) {
      case 'done':
        return [...closed, { type: 'RUN_FINISHED', ...ids, ...(this.#result !== undefined ? { result: this.#result } : {}), outcome: { type: 'success' }, ...(usage !== undefined ? { usage } : {}) }]
      case 'cancelled':
        return [...closed, { type: 'RUN_FINISHED', ...ids, outcome: { type: 'cancelled' }, ...(usage !== undefined ? { usage } : {}) }]
      case 'input_required':
        return [...closed, { type: 'RUN_FINISHED', ...ids, outcome: { type: 'interrupt', interrupts: this.#interrupts.map(agUiInterrupt) }, ...(usage !== undefined ? { usage } : {}) }]
      default: {
        const error = this.#fatal ?? (reason === 'shutdown' ? { code: 'shutting_down', message: 'The server shut down before the run ended' } : { code: 'aborted', message: 'The run was aborted' })
        return [...closed, { type: 'RUN_ERROR', message: error.message, code: error.code, ...(usage !== undefined ? { usage } : {}) }]
      }
    }
  }
}

/**
 * A run's AG-UI events for one client, in batches (a batch of packets makes one): RUN_STARTED, then
 * the events of `follow`'s packets (the journal from the start, then the live run) until the run's
 * last event. Ends early, without it, when the follower does (the client left, or fell behind).
 */
export async function * runEventBatches (engine: Pick<AssistEngine, 'follow'>, requestId: string, projection: RunEvents, options: FollowOptions): AsyncGenerator<AgUiEvent[], void, undefined> {
  yield [projection.started()]
  for await (const frames of engine.follow(requestId, options)) {
    const batch = frames.flatMap((frame) => projection.apply(packetOf(frame)))
    if (batch.length > 0) yield batch
    if (projection.ended) return
  }
}
