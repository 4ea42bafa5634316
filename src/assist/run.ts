import { randomUUID } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { AH_ERR_EVENT_INVALID, AH_ERR_RUN_ABORTED, STREAM_ERROR_CODES, AH_ERR_STREAM_CLOSED, type AbortKind, type StreamErrorCode } from '../errors.js'
import {
  PRESENTATION_EVENT_TYPES, PresentationEvent as PresentationEventSchema,
  type CloseReason, type EventPayload, type PresentationEvent, type StreamError, type StreamOpCode, type StreamPacket
} from '../protocol/packets.js'
import type { ResolvedAgentRequest } from '../protocol/envelope.js'
import { CloudEvent, GraphEvent } from '../protocol/events.js'
import type { Agent, AgentHost, JsonObject, LogLevel, ResponseHandler, SessionHandle, StreamHandle } from '../agents/contract.js'
import type { HostedCapability } from '../agents/hosted-agent.js'
import { lazySchema, toIssues } from '../agents/json-schema.js'
import { PacketFactory, packetJson, streamError, type UnsequencedPacket } from './packets.js'
import { TranscriptBuilder } from './transcript.js'
import { wireInterrupt, type RunReplay } from './replay.js'
import type { InterruptRecord } from '../storage/interrupts.js'

/**
 * A client following a run: the engine's follower queue implements it. Packets reach it only
 * once they are journaled (journal first, then the wire).
 */
export interface PacketSink {
  /**
   * Take one packet, in order; `json` is the packet already serialised, `ord` its place in the journal. Returns a promise when the
   * client asks the producer to wait (backpressure), `undefined` when it can take more at once.
   */
  write(packet: StreamPacket, json: string, ord: number): Promise<void> | undefined
  /** The run ended (its main stream's CLOSE was written) or went on elsewhere (`lost`): stop following. */
  end(lost?: boolean): void
}

/**
 * Where a run's output is made durable (the engine implements it over the run store). Calls are
 * synchronous and in emission order, so the journal always holds exactly what was sent, in order.
 */
export interface RunRecorder {
  /** Queue one packet for the journal: `seq` and `json` as on the wire, or `seq` null for an event kept off it. */
  packet(ord: number, streamId: string, seq: number | null, json: string): void
  /** Store an internal event the agent emitted (a CloudEvent or a graph event); settles once committed. */
  event(kind: 'cloudevent' | 'graph', event: JsonObject): Promise<void> | undefined
  /** Store an audit entry the agent recorded; settles once committed. */
  audit(actor: string, action: string, resource: string, success: boolean): Promise<void> | undefined
  /**
   * Make the queued packets durable: `undefined` when done at once, else a promise that settles once
   * they are committed (it rejects once the write budget is spent while another process holds the
   * lock). A packet reaches clients only after this has succeeded for it.
   */
  flush(): Promise<void> | undefined
  /**
   * Commit the queued packets in this call, not at the end of the turn (an agent writing without
   * waiting would otherwise pile its output up in memory). False when it could not (the lock is
   * held elsewhere, or the write failed): the packets wait for {@link flush}.
   */
  commitNow(): boolean
}

/** What happens to a run when its last client goes away. */
export type DisconnectPolicy = 'continue' | 'cancel'

/** The logging surface a run needs (pino's, without importing it). */
export interface RunLogger {
  trace(obj: object, msg?: string): void
  debug(obj: object, msg?: string): void
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
  fatal(obj: object, msg?: string): void
}

/**
 * A child of `parent` with `bindings`, made only when a line at an enabled level is written: a run
 * that logs nothing (a quiet level) costs no child (pino's `child()` serialises its bindings, ~12 µs
 * of a JSON request's CPU in `bench/cost.js`).
 */
export function lazyChild (parent: RunLogger & { child: (bindings: JsonObject) => RunLogger, isLevelEnabled?: (level: string) => boolean }, bindings: JsonObject): RunLogger {
  let child: RunLogger | undefined
  const at = (level: keyof RunLogger) => (obj: object, msg?: string): void => {
    if (parent.isLevelEnabled?.(level) === false) return
    child ??= parent.child(bindings)
    child[level](obj, msg)
  }
  return { trace: at('trace'), debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), fatal: at('fatal') }
}

export interface AssistRunOptions {
  requestId: string
  capability: HostedCapability
  log: RunLogger
  recorder: RunRecorder
  /** Presentation event types the client renders; others are kept off its wire (CAP.md §2). */
  supportedEvents?: readonly string[]
  /** `continue` (default): the run goes on when its last client leaves; `cancel`: it is aborted. */
  onDisconnect?: DisconnectPolicy
  /** Past this many bytes of packets the run ends with `output_too_large` (0: no cap). */
  maxOutputBytes?: number
  /** How much of the output the run keeps in memory for its summary (the journal has all of it). */
  summaryBytes?: number
  /** Called once, when the first packet has been journaled and handed to the clients, `seconds` after the run started (metrics). */
  onFirstPacket?: (seconds: number) => void
  /** Called with each `usage()` report the agent makes, once it is checked (metrics). */
  onUsage?: (usage: { input_tokens: number, output_tokens: number }, cost: number | undefined) => void
  /** What the run goes on from after an answer (its chain), and where its questions and host calls are kept. Without it the agent cannot `interrupt()`. */
  replay?: RunReplay
  /**
   * The run stops to ask `open`: store what it needs to go on (the engine saves its chain) before
   * its CLOSE `"input_required"` reaches a client. A rejection ends the run with `storage_busy`.
   */
  onSuspend?: (open: InterruptRecord[]) => Promise<void>
}

const checkPresentationEvent = lazySchema<PresentationEvent>(PresentationEventSchema)
const checkCloudEvent = lazySchema<JsonObject>(CloudEvent)
const checkGraphEvent = lazySchema<JsonObject>(GraphEvent)
const LOG_LEVELS = new Set<string>(['trace', 'debug', 'info', 'warn', 'error', 'fatal'])
const now = (): string => new Date().toISOString()
/** Bytes a run queues for its clients before it journals and writes them without waiting for the turn to end. */
const OUTBOX_HIGH_WATER = 64 * 1024
/**
 * Agents that write without waiting on anything else get the event loop back once the runs of this
 * process have written for this long in one turn (their write() resolves on the next turn), so that
 * a burst of new requests is not served behind older runs' whole answers; while an agent is busy its
 * packets are committed by size, or after {@link BUSY_DEFER_MS}, not every turn (bench/fanout.js,
 * bench/stream.js: see BENCHMARKS.md).
 */
const SLICE_MS = 1
/** The longest a busy agent's packets wait in its outbox before they are committed and sent. */
const BUSY_DEFER_MS = 10
/** When this turn's first packet was made (0: none yet this turn). */
let turnStart = 0

/** How long this process's runs have been making packets in this turn of the event loop, in ms. */
function turnElapsed (): number {
  const at = performance.now()
  if (turnStart === 0) {
    turnStart = at
    setImmediate(() => { turnStart = 0 })
  }
  return at - turnStart
}
/** In-memory summary kept by default (the session's record of the run, and the JSON answer when it fits). */
export const SUMMARY_BYTES = 64 * 1024

function isPlainObject (value: unknown): value is JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

/**
 * One execution of an agent's `assist()`: owns its packets (through a {@link PacketFactory}), a
 * bounded transcript, the AbortController and the clients following it. Packets are journaled
 * first and written to clients once per turn of the event loop, after the journal batch commits.
 */
export class AssistRun {
  readonly requestId: string
  readonly mainStreamId: string
  readonly transcript: TranscriptBuilder
  readonly startedAt = performance.now()
  /** Packets produced (all of them, whether or not a client was there to read them). */
  packets = 0
  readonly #factory = new PacketFactory()
  readonly #capability: HostedCapability
  readonly #log: RunLogger
  readonly #filter: ReadonlySet<string> | undefined
  readonly #controller = new AbortController()
  readonly #ended: Promise<CloseReason>
  readonly #recorder: RunRecorder
  readonly #onDisconnect: DisconnectPolicy
  readonly #maxOutputBytes: number
  #outputBytes = 0
  /** Clients, each with the last journal `ord` it already has (a follower replayed up to there). */
  readonly #sinks = new Map<PacketSink, number>()
  /** Clients waiting for the JSON answer (they count for the disconnect policy). */
  #waiters = 0
  /** Packets queued for the journal but not yet written to clients: [ord, packet, json]. */
  readonly #outbox: Array<[number, StreamPacket, string]> = []
  #outboxBytes = 0
  #delivery: NodeJS.Immediate | undefined
  /** Settles on the next turn: the agent wrote for longer than SLICE_MS and gives the loop back. */
  #yield: Promise<void> | undefined
  /** When the oldest packet in the outbox was queued. */
  #queuedSince = 0
  #flushing: Promise<void> | undefined
  /** The packets whose journal flush is in flight (they go to clients once it commits). */
  #inflight: Array<[number, StreamPacket, string]> = []
  /** Settles when the journal has the queued packets and the clients written to last have drained (backpressure for the agent). */
  #drained: Promise<void> | undefined
  #ord = 0
  /** The last journal `ord` handed to the clients (every packet up to it is journaled). */
  #written = 0
  #resolveEnded!: (reason: CloseReason) => void
  #endReason: CloseReason | undefined
  #lost = false
  #result: JsonObject | undefined
  #fatal: StreamError | undefined
  #usage: { input_tokens: number, output_tokens: number } = { input_tokens: 0, output_tokens: 0 }
  #reportedUsage = false
  #cost: number | undefined
  readonly #hooks: Pick<AssistRunOptions, 'onFirstPacket' | 'onUsage' | 'onSuspend'>
  readonly #replay: RunReplay | undefined
  /** The questions this execution waits on (asked and not answered), and the agent's pending `interrupt()` calls. */
  readonly #asking: InterruptRecord[] = []
  readonly #parked: Array<(err: Error) => void> = []
  #suspending = false
  /** Sub-streams opened while replaying (their STREAM_START was sent before): started on the wire when next written. */
  readonly #replayedStreams = new Map<string, EventPayload>()
  readonly handler: ResponseHandler

  constructor (options: AssistRunOptions) {
    this.requestId = options.requestId
    this.mainStreamId = this.#factory.mainStreamId
    this.transcript = new TranscriptBuilder(options.summaryBytes ?? SUMMARY_BYTES)
    this.#capability = options.capability
    this.#log = options.log
    const supported = options.supportedEvents ?? []
    this.#filter = supported.length > 0 ? new Set(supported) : undefined
    this.#recorder = options.recorder
    this.#onDisconnect = options.onDisconnect ?? 'continue'
    this.#maxOutputBytes = options.maxOutputBytes ?? 0
    this.#hooks = { onFirstPacket: options.onFirstPacket, onUsage: options.onUsage, onSuspend: options.onSuspend }
    this.#replay = options.replay
    this.#ended = new Promise((resolve) => { this.#resolveEnded = resolve })
    this.handler = this.#makeHandler()
  }

  /** Fires when the agent should stop; `reason` is a {@link AH_ERR_RUN_ABORTED}. */
  /** The run's logger (scoped to its request). */
  get log (): RunLogger { return this.#log }
  get signal (): AbortSignal { return this.#controller.signal }
  /** Resolves with the main stream's close reason once its CLOSE has been produced. */
  get ended (): Promise<CloseReason> { return this.#ended }
  get endReason (): CloseReason | undefined { return this.#endReason }
  /** True when this process's lease on the run was taken: the run went on (was recovered) elsewhere. */
  get lost (): boolean { return this.#lost }
  /** The object given to `result()`, if any. */
  get result (): JsonObject | undefined { return this.#result }
  /** What the run goes on from, and where its questions and host calls are kept. */
  get replay (): RunReplay | undefined { return this.#replay }
  /** The questions the run stopped on (its CLOSE was `"input_required"`). */
  get interrupts (): readonly InterruptRecord[] { return this.#asking }
  /** The FATAL error that ended the run, if one did. */
  get fatalError (): StreamError | undefined { return this.#fatal }
  /** Token usage and cost reported with `usage()`, summed; undefined when never reported. */
  get usage (): { usage: { input_tokens: number, output_tokens: number }, cost?: number } | undefined {
    if (!this.#reportedUsage) return undefined
    return this.#cost === undefined ? { usage: { ...this.#usage } } : { usage: { ...this.#usage }, cost: this.#cost }
  }

  /** The disconnect policy in force. */
  get onDisconnect (): DisconnectPolicy { return this.#onDisconnect }
  /**
   * The last journal position already handed to clients. A client that has everything up to here
   * can attach without reading the journal: all that follows is still to be delivered.
   */
  get written (): number { return this.#written }
  /** Clients currently following the run or waiting for its answer. */
  get followers (): number { return this.#sinks.size + this.#waiters }

  /**
   * Send this run's packets to a client from now on (several clients may follow one run).
   * @param afterOrd the journal position the client already has (a follower replayed up to there)
   */
  attach (sink: PacketSink, afterOrd = 0): void {
    if (this.#endReason !== undefined || this.#lost) { sink.end(this.#lost); return }
    this.#sinks.set(sink, afterOrd)
  }

  /**
   * A client went away: stop writing to it. Output is still produced and journaled; when it was the
   * last client and the policy is `cancel`, the agent is aborted.
   */
  detach (sink: PacketSink | undefined, kind: 'client_disconnected' | 'slow_consumer'): void {
    if (sink !== undefined && !this.#sinks.delete(sink)) return
    if (sink === undefined) this.#waiters = Math.max(0, this.#waiters - 1)
    if (kind === 'slow_consumer' && this.#endReason === undefined) {
      this.transcript.error(streamError('slow_consumer', 'The client did not read the stream fast enough', 'TRANSIENT'), this.mainStreamId)
    }
    if (this.followers === 0 && this.#onDisconnect === 'cancel' && this.#endReason === undefined) this.cancel(kind)
  }

  /** A client waits for the JSON answer: it counts as a follower until it {@link detach}es with no sink. */
  wait (): void { this.#waiters++ }

  /**
   * Run the agent to the end. Never rejects: a thrown error becomes an `agent_failed` packet, and
   * whatever happens the main stream is closed.
   */
  async execute (agent: Agent, request: ResolvedAgentRequest, session: SessionHandle, host: AgentHost): Promise<void> {
    try {
      await agent.assist(request, session, this.handler, host)
      if (this.#endReason === undefined) this.#endAll('done')
    } catch (err) {
      this.#failed(err)
    }
  }

  /** Server shutdown: ERROR `shutting_down` (TRANSIENT), CLOSE `"shutdown"` on every stream. */
  shutdown (): void {
    if (this.#endReason === undefined) {
      this.#send(this.mainStreamId, 'ERROR', streamError('shutting_down', 'The server is shutting down; retry the request', 'TRANSIENT'))
      this.#endAll('shutdown')
    }
    this.#abort('shutdown')
  }

  /**
   * End the run after `ms` if it is still going: ERROR `run_timeout` (TRANSIENT), CLOSE
   * `"aborted"` on every stream, and the agent's signal fires (kind `timeout`).
   */
  expireAfter (ms: number): void {
    const timer = setTimeout(() => {
      if (this.#endReason === undefined) this.#fatalEnd(streamError('run_timeout', `The run took longer than ${ms} ms and was stopped`, 'TRANSIENT', { timeout_ms: ms }), 'timeout')
    }, ms)
    timer.unref()
    this.#ended.then(() => { clearTimeout(timer) }, () => {})
  }

  /**
   * Cancel: CLOSE `"cancelled"` on every stream, and the agent's signal fires (kind `cancelled`, or
   * the disconnect that triggered it). Returns false when the run had already ended.
   */
  cancel (kind: AbortKind = 'cancelled'): boolean {
    if (this.#endReason !== undefined) return false
    this.#endAll('cancelled')
    this.#abort(kind)
    return true
  }

  /**
   * This process no longer holds the run (its lease lapsed and the run was recovered elsewhere):
   * stop the agent and write nothing more; followers go back to the journal, which says how it ended.
   */
  leaseLost (): void {
    if (this.#lost) return
    this.#lost = true
    this.#log.warn({ requestId: this.requestId }, 'lost the run\'s lease: it was recovered elsewhere')
    this.#outbox.length = 0
    for (const sink of this.#sinks.keys()) sink.end(true)
    this.#sinks.clear()
    if (this.#endReason === undefined) {
      this.#endReason = 'aborted'
      this.#resolveEnded('aborted')
    }
    this.#abort('lease_lost')
  }

  #abort (kind: AbortKind): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(new AH_ERR_RUN_ABORTED(kind))
    // an agent waiting on a question unwinds (its finally blocks run) rather than wait for ever
    for (const reject of this.#parked.splice(0)) reject(this.#controller.signal.reason as Error)
  }

  #send (streamId: string, op: StreamOpCode, p: StreamPacket['p']): Promise<void> | undefined {
    if (this.#lost) return undefined
    if (this.#replay?.replaying === true && !this.#suspending && (op !== 'ERROR' || (p as StreamError).severity === 'WARNING') && !(op === 'CLOSE' && streamId === this.mainStreamId)) {
      // sent by the run that asked before: kept off this one's wire and journal
      if (op === 'EVENT' && (p as EventPayload).type === 'STREAM_START' && streamId !== this.mainStreamId) this.#replayedStreams.set(streamId, p as EventPayload)
      else if (op === 'CLOSE') this.#replayedStreams.delete(streamId)
      return undefined
    }
    const start = this.#replayedStreams.get(streamId)
    if (start !== undefined) {
      this.#replayedStreams.delete(streamId)
      this.#send(streamId, 'EVENT', start)
    }
    const payload = JSON.stringify(p)
    if (this.#overCap(payload.length)) return undefined
    let packet: StreamPacket | UnsequencedPacket
    let wire = true
    if (op === 'EVENT' && this.#filter !== undefined && PRESENTATION_EVENT_TYPES.includes((p as EventPayload).type as PresentationEvent['type']) && !this.#filter.has((p as EventPayload).type)) {
      packet = this.#factory.unsequenced(streamId, op, p)
      wire = false
    } else {
      packet = this.#factory.packet(streamId, op, p)
    }
    const json = packetJson(packet, payload)
    const ord = ++this.#ord
    this.packets++
    this.transcript.add(packet, json.length)
    this.#recorder.packet(ord, streamId, wire ? (packet as StreamPacket).seq : null, json)
    if (wire) {
      if (this.#outbox.length === 0) this.#queuedSince = performance.now()
      this.#outbox.push([ord, packet as StreamPacket, json])
      this.#outboxBytes += json.length
    }
    this.#schedule()
    return this.#slice() ?? this.#drained
  }

  /** Once this turn's runs wrote for SLICE_MS, what the agent waits for: the next turn (and {@link #drained}). */
  #slice (): Promise<void> | undefined {
    if (this.#yield === undefined && turnElapsed() <= SLICE_MS) return undefined
    this.#yield ??= new Promise<void>((resolve) => {
      setImmediate(() => {
        this.#yield = undefined
        resolve()
      })
    })
    const drained = this.#drained
    return drained === undefined ? this.#yield : Promise.all([drained, this.#yield]).then(() => undefined)
  }

  /**
   * Count a payload against the output cap. Past it the run ends with `output_too_large` (those
   * closing packets are always made) and the payload that did not fit is dropped.
   */
  #overCap (payloadBytes: number): boolean {
    if (this.#maxOutputBytes === 0 || this.#ending) return false
    // the packet's envelope (ids, seq, time) is about 120 bytes; the payload is what grows
    this.#outputBytes += payloadBytes + 120
    if (this.#outputBytes <= this.#maxOutputBytes || this.#endReason !== undefined) return false
    this.#fatalEnd(streamError('output_too_large', `The run produced more than ${this.#maxOutputBytes} bytes and was stopped`, 'FATAL', { max_bytes: this.#maxOutputBytes }), 'output_too_large')
    return true
  }

  #ending = false

  /** Deliver what is queued at the end of this turn, or at once past the high-water mark. */
  #schedule (): void {
    // a full batch goes at once, so a fast writer is journaled and sent in bounded steps
    if (this.#outboxBytes >= OUTBOX_HIGH_WATER) this.#deliver()
    else this.#delivery ??= setImmediate(() => { this.#deliver() })
  }

  /** Journal what is queued, then write it to the clients. */
  #deliver (): void {
    if (this.#delivery !== undefined) clearImmediate(this.#delivery)
    this.#delivery = undefined
    if (this.#lost) return
    // an agent busy writing (it gave the loop back mid-stretch) has its output committed by size or age, not per turn
    if (this.#yield !== undefined && this.#outboxBytes < OUTBOX_HIGH_WATER && performance.now() - this.#queuedSince < BUSY_DEFER_MS) {
      this.#delivery = setImmediate(() => { this.#deliver() })
      return
    }
    if (this.#flushing !== undefined) {
      // an agent that does not wait for its writes: past the high-water mark, commit now rather than hold its output
      if (this.#outboxBytes >= OUTBOX_HIGH_WATER && this.#recorder.commitNow()) {
        const batch = [...this.#inflight, ...this.#outbox.splice(0)]
        this.#outboxBytes = 0
        this.#writeOutbox(batch)
      }
      return
    }
    // only what is queued now was journaled by this flush: a packet sent while it commits waits for the next
    const batch = this.#outbox.splice(0)
    this.#outboxBytes = 0
    this.#inflight = batch
    let flushed: Promise<void> | undefined
    try {
      flushed = this.#recorder.flush()
    } catch (err) {
      this.#outbox.unshift(...batch)
      this.#storageFailed(err)
      return
    }
    if (flushed === undefined) { this.#writeOutbox(batch); return }
    const settled: Promise<void> = flushed.then(() => {
      this.#flushing = undefined
      this.#inflight = []
      this.#writeOutbox(batch)
      // what was queued meanwhile goes at the end of this turn, with what the agent writes once this
      // commit releases it: sent at once, the packet of an agent that waits for each write would be
      // journaled alone, and so would its next one, and the next (one packet a commit)
      if (this.#outbox.length > 0) {
        if (this.#endReason !== undefined) this.#deliver()
        else this.#schedule()
      }
    }, (err: unknown) => {
      this.#flushing = undefined
      this.#inflight = []
      this.#outbox.unshift(...batch.filter(([ord]) => ord > this.#written))
      this.#storageFailed(err)
    })
    this.#flushing = settled
    this.#wait(settled)
  }

  /** Hand journaled packets (`batch`, else the whole outbox) to every client. */
  #writeOutbox (batch?: Array<[number, StreamPacket, string]>): void {
    if (batch === undefined) {
      batch = this.#outbox.splice(0)
      this.#outboxBytes = 0
    }
    // a batch committed early (see #deliver) was already handed over
    if (batch.length > 0 && batch[0]![0] <= this.#written) batch = batch.filter(([ord]) => ord > this.#written)
    if (batch.length === 0 || this.#lost) return
    if (this.#written === 0) this.#hooks.onFirstPacket?.((performance.now() - this.startedAt) / 1000)
    this.#written = (batch.at(-1) as [number, StreamPacket, string])[0]
    const waits: Array<Promise<void>> = []
    for (const [sink, after] of this.#sinks) {
      for (const [ord, packet, json] of batch) {
        if (ord <= after) continue
        const wait = sink.write(packet, json, ord)
        if (wait !== undefined) waits.push(wait)
      }
    }
    if (this.#endReason !== undefined && this.#outbox.length === 0) {
      for (const sink of this.#sinks.keys()) sink.end()
      this.#sinks.clear()
    }
    if (waits.length > 0) this.#wait(Promise.all(waits).then(() => undefined))
  }

  /** Make the agent wait for `promise` (its calls return {@link #drained} until it settles). */
  #wait (promise: Promise<void>): void {
    const previous = this.#drained
    const both = previous === undefined ? promise : Promise.all([previous, promise]).then(() => undefined)
    const settled: Promise<void> = both.finally(() => { if (this.#drained === settled) this.#drained = undefined })
    this.#drained = settled
  }

  /**
   * The journal could not be written within its budget (another process held the database's lock):
   * the run ends with `storage_busy` (TRANSIENT). Its clients get what is queued at once, without
   * waiting for the journal; the engine goes on trying to write it.
   */
  #storageFailed (err: unknown): void {
    this.#log.error({ err, requestId: this.requestId }, 'the run could not write its journal')
    if (this.#endReason === undefined) {
      this.#fatal = streamError('storage_busy', 'The server could not store this run\'s output in time; retry the request', 'TRANSIENT')
      for (const packet of this.#factory.failAll(this.#fatal)) this.#queue(packet)
      this.#endReason = 'aborted'
      this.#abort('storage_busy')
    }
    this.#writeOutbox()
    for (const sink of this.#sinks.keys()) sink.end()
    this.#sinks.clear()
    this.#resolveEnded(this.#endReason ?? 'aborted')
  }

  /** A closing packet made outside {@link #send} (closing, the storage failure path): counted, journaled, queued. */
  #queue (packet: StreamPacket): void {
    const json = JSON.stringify(packet)
    const ord = ++this.#ord
    this.packets++
    this.transcript.add(packet, json.length)
    this.#recorder.packet(ord, packet.stream_id, packet.seq, json)
    this.#outbox.push([ord, packet, json])
  }

  /** Close every open sub-stream, then the main stream, with `reason`. */
  #endAll (reason: CloseReason): void {
    for (const packet of this.#factory.closeAll(reason)) {
      if (this.#lost) break
      this.#queue(packet)
    }
    this.#endReason = reason
    this.#deliver()
    this.#resolveEnded(reason)
  }

  #fatalEnd (error: StreamError, kind: AbortKind): void {
    this.#fatal = error
    this.#ending = true
    this.#send(this.mainStreamId, 'ERROR', error)
    this.#endAll('aborted')
    this.#abort(kind)
  }

  #failed (err: unknown): void {
    if (this.#endReason !== undefined) {
      if (!(err instanceof AH_ERR_STREAM_CLOSED) && !(err instanceof AH_ERR_RUN_ABORTED)) {
        this.#log.warn({ err }, 'agent threw after its response had ended')
      }
      return
    }
    const e = err as { expose?: unknown, name?: unknown, message?: unknown, details?: unknown, streamCode?: unknown, severity?: unknown }
    const safe = typeof err === 'object' && err !== null && e.expose === true && typeof e.message === 'string'
    // an error the agent meant for its caller (SafeAgentError: a path outside a tool's scope, an
    // input it cannot use; BackendError: the model's provider) is no fault of this code: its stack
    // helps nobody. Anything else is a crash, and its author needs the stack
    if (safe) this.#log.warn({ error: { name: e.name, message: e.message, ...(typeof e.streamCode === 'string' ? { code: e.streamCode } : {}) } }, 'agent failed: its error went to the caller')
    else this.#log.error({ err }, 'agent failed')
    const details = safe && isPlainObject(e.details) ? e.details : undefined
    // a safe error may name its own stream code and severity (backend errors: backend_timeout is TRANSIENT)
    const code = safe && typeof e.streamCode === 'string' && e.streamCode in STREAM_ERROR_CODES ? e.streamCode as StreamErrorCode : 'agent_failed'
    const severity = safe && e.severity === 'TRANSIENT' ? 'TRANSIENT' : 'FATAL'
    this.#fatalEnd(streamError(code, safe ? e.message as string : 'The agent failed', severity, details), 'agent_failed')
  }

  #assertOpen (): void {
    if (this.#endReason !== undefined) throw new AH_ERR_STREAM_CLOSED(this.mainStreamId, this.#endReason === 'done' ? 'closed' : this.#endReason)
  }

  #presentation (type: PresentationEvent['type'], data: unknown): Promise<void> | undefined {
    return this.#event({ id: randomUUID(), timestamp: now(), type, data } as PresentationEvent)
  }

  #event (event: PresentationEvent): Promise<void> | undefined {
    this.#assertOpen()
    if (!checkPresentationEvent(event)) {
      const issues = toIssues(checkPresentationEvent.errors).map((i) => `${i.path} ${i.message}`)
      throw new AH_ERR_EVENT_INVALID(`${String((event as { type?: unknown }).type)}: ${issues.slice(0, 5).join('; ')}`)
    }
    return this.#send(this.mainStreamId, 'EVENT', event)
  }

  async #makeStream (title?: string, metadata?: JsonObject): Promise<StreamHandle> {
    this.#assertOpen()
    if (metadata !== undefined && !isPlainObject(metadata)) throw new AH_ERR_EVENT_INVALID('create_stream() metadata must be a plain object')
    const run = this
    const id = randomUUID()
    let state: 'active' | 'closed' | 'aborted' = 'active'
    const start: EventPayload = { type: 'STREAM_START' }
    if (title !== undefined) start.title = String(title)
    if (metadata !== undefined) start.metadata = metadata
    await this.#send(id, 'EVENT', start)
    const active = (): boolean => state === 'active' && (run.#factory.isOpen(id) || run.#replayedStreams.has(id))
    return {
      stream_id: id,
      get is_active () { return active() },
      async write (chunk: string) {
        if (!active()) throw new AH_ERR_STREAM_CLOSED(id, state === 'active' ? 'ended' : state)
        if (typeof chunk !== 'string') throw new AH_ERR_EVENT_INVALID('stream.write() takes a string')
        return run.#send(id, 'DELTA', chunk)
      },
      async close () {
        if (!active()) return
        state = 'closed'
        return run.#send(id, 'CLOSE', 'done')
      },
      async abort (reason: string) {
        if (!active()) return
        state = 'aborted'
        run.#send(id, 'ERROR', streamError('stream_aborted', String(reason), 'FATAL'))
        return run.#send(id, 'CLOSE', 'aborted')
      }
    }
  }

  /**
   * The agent's `interrupt()`: the answer when its chain has one; else the question joins those this
   * execution waits on, and once the agent is waiting (no host call in flight, on a later turn) the
   * run stops to ask them all: EVENT `INTERRUPT`, the chain stored, CLOSE `"input_required"`.
   */
  async #interrupt (request: unknown, extra: Pick<InterruptRecord, 'call'> = {}): Promise<unknown> {
    this.#assertOpen()
    const replay = this.#replay
    if (replay === undefined) throw new AH_ERR_EVENT_INVALID('interrupt() is not available to this run (a task, or a host without an interrupt store)')
    const asked = replay.ask(request, Date.now(), extra)
    if ('answered' in asked) return asked.answered
    if (!this.#asking.includes(asked.open)) this.#asking.push(asked.open)
    if (this.#asking.length === 1) setImmediate(() => { this.#suspend().catch((err: unknown) => { this.#log.error({ err }, 'suspending the run failed') }) })
    return await new Promise((_resolve, reject) => { this.#parked.push(reject) })
  }

  /**
   * Ask `open` again without the agent: the run's answers so far leave questions open, and the agent
   * is entered only once all are answered (a branch that got its answer would otherwise go on, and
   * its packets be sent twice).
   */
  async askAgain (open: readonly InterruptRecord[]): Promise<void> {
    this.#asking.push(...open)
    setImmediate(() => { this.#suspend().catch((err: unknown) => { this.#log.error({ err }, 'suspending the run failed') }) })
    await new Promise((_resolve, reject) => { this.#parked.push(reject) })
  }

  /** Ask for approval of a host call (a tool or a remote agent marked `require_approval`); resolves with the answer. */
  async approval (message: string, call: Record<string, unknown>): Promise<{ approved: boolean, comment?: string }> {
    return await this.#interrupt({ kind: 'approval', message }, { call }) as { approved: boolean, comment?: string }
  }

  async #suspend (): Promise<void> {
    for (let idle = this.#replay?.idle(); idle !== undefined; idle = this.#replay?.idle()) await idle
    if (this.#endReason !== undefined || this.#lost) return
    this.#suspending = true
    const open = [...this.#asking]
    this.#send(this.mainStreamId, 'EVENT', { type: 'INTERRUPT', interrupts: open.map(wireInterrupt) })
    try {
      await this.#hooks.onSuspend?.(open)
    } catch (err) {
      this.#log.error({ err, requestId: this.requestId }, 'the run could not store its questions')
      if (this.#endReason === undefined) this.#fatalEnd(streamError('storage_busy', 'The server could not store this run\'s questions; retry the request', 'TRANSIENT'), 'storage_busy')
      return
    }
    if (this.#endReason === undefined) {
      this.#endAll('input_required')
      this.#abort('interrupted')
    }
  }

  #makeHandler (): ResponseHandler {
    const run = this
    const log = this.#log
    return {
      get signal () { return run.signal },
      async thought (content, status = 'IN_PROGRESS') {
        return run.#presentation('THOUGHT_TRACE', { thought: content, status })
      },
      async markdown (content) {
        return run.#presentation('MARKDOWN_BLOCK', { content })
      },
      async data (data, title, viewHint = 'JSON') {
        run.#assertOpen()
        if (!isPlainObject(data)) throw new AH_ERR_EVENT_INVALID('data() takes a plain object')
        if (typeof viewHint !== 'string' || (title !== undefined && typeof title !== 'string')) {
          throw new AH_ERR_EVENT_INVALID('data() title and view_hint must be strings')
        }
        const event: EventPayload = { type: 'DATA', id: randomUUID(), timestamp: now(), view_hint: viewHint, data }
        if (title !== undefined) event.title = title
        return run.#send(run.mainStreamId, 'EVENT', event)
      },
      async citations (citations) {
        return run.#presentation('CITATION_BLOCK', { citations })
      },
      async progress (label, status = 'running', percent) {
        return run.#presentation('PROGRESS_INDICATOR', percent === undefined ? { label, status } : { label, status, progress_percent: percent })
      },
      async media (items) {
        return run.#presentation('MEDIA_CAROUSEL', { items })
      },
      async error (message, details, recoverable = false) {
        run.#assertOpen()
        if (details !== undefined && !isPlainObject(details)) throw new AH_ERR_EVENT_INVALID('error() details must be a plain object')
        const error = streamError('agent_error', String(message), recoverable ? 'WARNING' : 'FATAL', details)
        if (recoverable) return run.#send(run.mainStreamId, 'ERROR', error)
        run.#fatalEnd(error, 'agent_error')
      },
      async result (obj) {
        run.#assertOpen()
        if (!isPlainObject(obj)) throw new AH_ERR_EVENT_INVALID('result() takes a plain object')
        if (run.#result !== undefined) throw new AH_ERR_EVENT_INVALID('result() may be called once')
        const validate = run.#capability.validateOutput
        if (validate !== undefined && !validate(obj)) {
          const errors = toIssues(validate.errors, '/result')
          run.#fatalEnd(streamError('agent_contract_violation', 'The agent\'s result does not match its outputs schema', 'FATAL', { errors }), 'contract_violation')
          throw new AH_ERR_EVENT_INVALID(`result() does not match the outputs schema: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`)
        }
        run.#result = obj
        return run.#send(run.mainStreamId, 'EVENT', { type: 'RESULT', data: obj })
      },
      async create_stream (title, metadata) {
        return run.#makeStream(title, metadata)
      },
      interrupt: (async (request: unknown) => await run.#interrupt(request)) as ResponseHandler['interrupt'],
      async usage (usage, cost) {
        run.#assertOpen()
        // counted by the run that asked before
        if (run.#replay?.replaying === true) return
        const given = usage as { input_tokens?: unknown, output_tokens?: unknown } | undefined
        const counts = [given?.input_tokens, given?.output_tokens]
        if (!counts.every((n) => Number.isInteger(n) && (n as number) >= 0)) throw new AH_ERR_EVENT_INVALID('usage() takes { input_tokens, output_tokens } as non-negative integers')
        if (cost !== undefined && !(Number.isFinite(cost) && cost >= 0)) throw new AH_ERR_EVENT_INVALID('usage() cost must be a non-negative number')
        run.#reportedUsage = true
        run.#usage.input_tokens += usage.input_tokens
        run.#usage.output_tokens += usage.output_tokens
        if (cost !== undefined) run.#cost = (run.#cost ?? 0) + cost
        run.#hooks.onUsage?.(usage, cost)
        const data: { input_tokens: number, output_tokens: number, cost?: number } = { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens }
        if (cost !== undefined) data.cost = cost
        return run.#send(run.mainStreamId, 'EVENT', { type: 'USAGE', data })
      },
      async emit (event) {
        const type = isPlainObject(event) ? event.type : undefined
        if (typeof type === 'string' && (PRESENTATION_EVENT_TYPES as readonly string[]).includes(type)) {
          return run.#event(event as PresentationEvent)
        }
        if (!isPlainObject(event)) throw new AH_ERR_EVENT_INVALID('emit() takes an event object')
        let kind: 'cloudevent' | 'graph'
        if ('specversion' in event) {
          if (!checkCloudEvent(event)) throw new AH_ERR_EVENT_INVALID(`CloudEvent: ${toIssues(checkCloudEvent.errors).map((i) => `${i.path} ${i.message}`).join('; ')}`)
          kind = 'cloudevent'
        } else if ('event_type' in event) {
          if (!checkGraphEvent(event)) throw new AH_ERR_EVENT_INVALID(`graph event: ${toIssues(checkGraphEvent.errors).map((i) => `${i.path} ${i.message}`).join('; ')}`)
          kind = 'graph'
        } else {
          throw new AH_ERR_EVENT_INVALID('emit() takes a presentation event, a CloudEvent (specversion "1.0") or a graph event (event_type)')
        }
        log.debug({ requestId: run.requestId, agentEvent: event }, 'agent event')
        await run.#recorder?.event(kind, event)
      },
      async log (level, message, metadata) {
        const lvl: LogLevel = LOG_LEVELS.has(level) ? level : 'info'
        const meta = isPlainObject(metadata) ? metadata : undefined
        log[lvl]({ requestId: run.requestId, ...(meta !== undefined ? { agent: meta } : {}) }, String(message))
        // a log line the database could not take is still in the process log: the agent is not failed for it
        await run.#recorder?.event('cloudevent', {
          specversion: '1.0',
          id: randomUUID(),
          source: 'agent-host/agent',
          type: 'agent.log',
          time: now(),
          datacontenttype: 'application/json',
          data: { level: lvl, message: String(message), ...(meta !== undefined ? { metadata: meta } : {}) }
        })?.catch((err: unknown) => { log.warn({ err, requestId: run.requestId }, 'an agent log line could not be stored') })
      },
      async audit (actor, action, resource, success) {
        log.info({ requestId: run.requestId, audit: { actor, action, resource, success: Boolean(success) } }, 'agent audit')
        await run.#recorder?.audit(String(actor), String(action), String(resource), Boolean(success))
      }
    }
  }
}
