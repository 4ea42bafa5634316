import { randomUUID } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { EventInvalidError, STREAM_ERROR_CODES, StreamClosedError, type StreamErrorCode } from '../errors.js'
import {
  PRESENTATION_EVENT_TYPES, PresentationEvent as PresentationEventSchema,
  type CloseReason, type EventPayload, type PresentationEvent, type StreamError, type StreamErrorSeverity,
  type StreamOpCode, type StreamPacket
} from '../protocol/packets.js'
import type { ResolvedAgentRequest } from '../protocol/envelope.js'
import { CloudEvent, GraphEvent } from '../protocol/events.js'
import type { Agent, AgentHost, JsonObject, LogLevel, ResponseHandler, SessionHandle, StreamHandle } from './contract.js'
import type { HostedCapability } from './hosted-agent.js'
import { compileSchema, toIssues } from './json-schema.js'
import { TranscriptBuilder } from './transcript.js'

/**
 * Where a run's packets go on the wire. The SSE writer implements it; in JSON mode there is none
 * and the transcript is the whole output.
 */
export interface PacketSink {
  /**
   * Hand one packet to the client, in call order; `json` is the packet already serialised. Returns
   * a promise when the transport asks the producer to wait (backpressure), `undefined` when it can
   * take more at once.
   */
  write(packet: StreamPacket, json: string): Promise<void> | undefined
  /** The main stream closed: finish the response. */
  end(): void
}

/**
 * Where a run's output is made durable (the storage layer implements it). Calls are synchronous
 * and in emission order, so the journal always holds exactly what was sent, in the same order.
 */
export interface RunRecorder {
  /** Journal one packet: `seq` and `json` as on the wire, or `seq` null for an event kept off it. */
  packet(ord: number, streamId: string, seq: number | null, json: string): void
  /** Store an internal event the agent emitted (a CloudEvent or a graph event). */
  event(kind: 'cloudevent' | 'graph', event: JsonObject): void
  /** Store an audit entry the agent recorded. */
  audit(actor: string, action: string, resource: string, success: boolean): void
  /**
   * Make the packets journaled so far durable. When given, a packet reaches clients only after
   * this has run for it (journal first, then the wire), so a client never holds a packet that a
   * resume after a crash would not know.
   */
  flush?(): void
}

/** What happens to a run when its last client goes away. */
export type DisconnectPolicy = 'continue' | 'cancel'

/** Why an agent's signal fired. */
export type AbortKind = 'client_disconnected' | 'slow_consumer' | 'cancelled' | 'shutdown' | 'timeout' | 'agent_error' | 'agent_failed' | 'contract_violation'

/** The `signal.reason` of an aborted run. */
export class RunAbortedError extends Error {
  readonly kind: AbortKind
  constructor (kind: AbortKind) {
    super(`The run was aborted: ${kind}`)
    this.name = 'AbortError'
    this.kind = kind
  }
}

/** The logging surface a run needs (pino's, without importing it). */
export interface RunLogger {
  trace(obj: object, msg?: string): void
  debug(obj: object, msg?: string): void
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
  fatal(obj: object, msg?: string): void
}

export interface AssistRunOptions {
  requestId: string
  capability: HostedCapability
  log: RunLogger
  /** Presentation event types the client renders; others are kept off its wire (CAP.md §2). */
  supportedEvents?: readonly string[]
  recorder?: RunRecorder
  /** `continue` (default): the run goes on when its last client leaves; `cancel`: it is aborted. */
  onDisconnect?: DisconnectPolicy
}

const checkPresentationEvent = compileSchema<PresentationEvent>(PresentationEventSchema)
const checkCloudEvent = compileSchema<JsonObject>(CloudEvent)
const checkGraphEvent = compileSchema<JsonObject>(GraphEvent)
const LOG_LEVELS = new Set<string>(['trace', 'debug', 'info', 'warn', 'error', 'fatal'])
const now = (): string => new Date().toISOString()
/** Bytes a run queues for its clients before it journals and writes them without waiting for the turn to end. */
const OUTBOX_HIGH_WATER = 64 * 1024

function isPlainObject (value: unknown): value is JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

/**
 * One execution of an agent's `assist()`: owns the main stream, the sub-streams, their `seq`
 * counters, the transcript and the AbortController. It enforces CAP.md §5's terminal rules: every
 * stream gets exactly one CLOSE and the main stream's CLOSE is the last packet.
 */
export class AssistRun {
  readonly requestId: string
  readonly mainStreamId = randomUUID()
  readonly transcript = new TranscriptBuilder()
  readonly startedAt = performance.now()
  /** Packets produced (all of them, whether or not a client was there to read them). */
  packets = 0
  readonly #capability: HostedCapability
  readonly #log: RunLogger
  readonly #filter: ReadonlySet<string> | undefined
  readonly #controller = new AbortController()
  readonly #seq = new Map<string, number>()
  readonly #open = new Set<string>()
  readonly #ended: Promise<CloseReason>
  readonly #recorder: RunRecorder | undefined
  readonly #onDisconnect: DisconnectPolicy
  /** Clients, each with the last journal `ord` it already has (a follower replayed up to there). */
  readonly #sinks = new Map<PacketSink, number>()
  /** Packets journaled but not yet written to clients: [ord, packet, json]. */
  readonly #outbox: Array<[number, StreamPacket, string]> = []
  #outboxBytes = 0
  #delivery: NodeJS.Immediate | undefined
  /** Settles when the clients written to last have drained (backpressure for the agent). */
  #drained: Promise<void> | undefined
  #ord = 0
  #resolveEnded!: (reason: CloseReason) => void
  #endReason: CloseReason | undefined
  #result: JsonObject | undefined
  #fatal: StreamError | undefined
  #usage: { input_tokens: number, output_tokens: number } = { input_tokens: 0, output_tokens: 0 }
  #reportedUsage = false
  #cost: number | undefined
  readonly handler: ResponseHandler

  constructor (options: AssistRunOptions) {
    this.requestId = options.requestId
    this.#capability = options.capability
    this.#log = options.log
    const supported = options.supportedEvents ?? []
    this.#filter = supported.length > 0 ? new Set(supported) : undefined
    this.#recorder = options.recorder
    this.#onDisconnect = options.onDisconnect ?? 'continue'
    this.#ended = new Promise((resolve) => { this.#resolveEnded = resolve })
    this.handler = this.#makeHandler()
  }

  /** Fires when the agent should stop; `reason` is a {@link RunAbortedError}. */
  get signal (): AbortSignal { return this.#controller.signal }
  /** Resolves with the main stream's close reason once its CLOSE has been produced. */
  get ended (): Promise<CloseReason> { return this.#ended }
  get endReason (): CloseReason | undefined { return this.#endReason }
  /** The object given to `result()`, if any. */
  get result (): JsonObject | undefined { return this.#result }
  /** The FATAL error that ended the run, if one did. */
  get fatalError (): StreamError | undefined { return this.#fatal }
  /** Token usage and cost reported with `usage()`, summed; undefined when never reported. */
  get usage (): { usage: { input_tokens: number, output_tokens: number }, cost?: number } | undefined {
    if (!this.#reportedUsage) return undefined
    return this.#cost === undefined ? { usage: { ...this.#usage } } : { usage: { ...this.#usage }, cost: this.#cost }
  }

  /** The disconnect policy in force. */
  get onDisconnect (): DisconnectPolicy { return this.#onDisconnect }
  /** Clients currently following the run. */
  get followers (): number { return this.#sinks.size }

  /**
   * Send this run's packets to a client from now on (SSE mode; several clients may follow one run).
   * @param afterOrd the journal position the client already has (a follower replayed up to there)
   */
  attach (sink: PacketSink, afterOrd = 0): void {
    if (this.#endReason !== undefined) { sink.end(); return }
    this.#sinks.set(sink, afterOrd)
  }

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

  /**
   * A client went away: stop writing to it. Output is still produced and journaled; when it was the
   * last client and the policy is `cancel`, the agent is aborted.
   */
  detach (sink: PacketSink | undefined, kind: 'client_disconnected' | 'slow_consumer'): void {
    if (sink !== undefined) this.#sinks.delete(sink)
    if (kind === 'slow_consumer' && this.#endReason === undefined) {
      this.transcript.error(this.#streamError('slow_consumer', 'The client did not read the stream fast enough', 'TRANSIENT'), this.mainStreamId)
    }
    if (this.#sinks.size === 0 && this.#onDisconnect === 'cancel') this.#abort(kind)
  }

  /** Server shutdown: ERROR `shutting_down` (TRANSIENT), CLOSE `"shutdown"` on every stream. */
  shutdown (): void {
    if (this.#endReason === undefined) {
      this.#send(this.mainStreamId, 'ERROR', this.#streamError('shutting_down', 'The server is shutting down; retry the request', 'TRANSIENT'))
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
      if (this.#endReason === undefined) this.#fatalEnd(this.#streamError('run_timeout', `The run took longer than ${ms} ms and was stopped`, 'TRANSIENT', { timeout_ms: ms }), 'timeout')
    }, ms)
    timer.unref()
    this.#ended.then(() => { clearTimeout(timer) }, () => {})
  }

  /** Cancel on request: CLOSE `"cancelled"` on every stream. Returns false when the run had already ended. */
  cancel (): boolean {
    if (this.#endReason !== undefined) return false
    this.#endAll('cancelled')
    this.#abort('cancelled')
    return true
  }

  #abort (kind: AbortKind): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(new RunAbortedError(kind))
  }

  #streamError (code: StreamErrorCode, message: string, severity: StreamErrorSeverity, details?: JsonObject): StreamError {
    const error: StreamError = { code, message, severity }
    if (details !== undefined) error.details = details
    return error
  }

  #send (streamId: string, op: StreamOpCode, p: StreamPacket['p']): Promise<void> | undefined {
    this.packets++
    switch (op) {
      case 'DELTA': this.transcript.delta(p as string, streamId); break
      case 'EVENT': this.transcript.event(p as EventPayload, streamId); break
      case 'ERROR': this.transcript.error(p as StreamError, streamId); break
      case 'CLOSE': this.transcript.close(p as CloseReason, streamId); break
    }
    const ord = ++this.#ord
    if (op === 'EVENT' && this.#filter !== undefined) {
      const type = (p as EventPayload).type as PresentationEvent['type']
      if (PRESENTATION_EVENT_TYPES.includes(type) && !this.#filter.has(type)) {
        this.#recorder?.packet(ord, streamId, null, JSON.stringify({ stream_id: streamId, op, t: now(), p }))
        return undefined
      }
    }
    const seq = (this.#seq.get(streamId) ?? 0) + 1
    this.#seq.set(streamId, seq)
    const packet = { stream_id: streamId, seq, op, t: now(), p } as StreamPacket
    const json = JSON.stringify(packet)
    this.#recorder?.packet(ord, streamId, seq, json)
    if (this.#sinks.size === 0) return undefined
    if (this.#recorder?.flush === undefined) return this.#write([[ord, packet, json]])
    this.#outbox.push([ord, packet, json])
    this.#outboxBytes += json.length
    // a full batch goes at once, so the socket (and its SSE_MAX_BUFFER_BYTES cap) sees a fast writer
    if (this.#outboxBytes >= OUTBOX_HIGH_WATER) this.#deliver()
    else this.#delivery ??= setImmediate(() => { this.#deliver() })
    return this.#drained
  }

  /** Journal what is pending, then write it to the clients (once per turn of the event loop). */
  #deliver (): void {
    if (this.#delivery !== undefined) clearImmediate(this.#delivery)
    this.#delivery = undefined
    if (this.#outbox.length === 0) return
    this.#recorder?.flush?.()
    const batch = this.#outbox.splice(0)
    this.#outboxBytes = 0
    const drained = this.#write(batch)
    if (drained !== undefined) {
      const settled: Promise<void> = drained.finally(() => { if (this.#drained === settled) this.#drained = undefined })
      this.#drained = settled
    }
  }

  #write (batch: Array<[number, StreamPacket, string]>): Promise<void> | undefined {
    const waits: Array<Promise<void>> = []
    for (const [sink, after] of this.#sinks) {
      for (const [ord, packet, json] of batch) {
        if (ord <= after) continue
        const wait = sink.write(packet, json)
        if (wait !== undefined) waits.push(wait)
      }
    }
    return waits.length === 0 ? undefined : Promise.all(waits).then(() => undefined)
  }

  /** Close every open sub-stream, then the main stream, with `reason`. */
  #endAll (reason: CloseReason): void {
    for (const id of this.#open) this.#send(id, 'CLOSE', reason)
    this.#open.clear()
    this.#send(this.mainStreamId, 'CLOSE', reason)
    this.#endReason = reason
    this.#deliver()
    for (const sink of this.#sinks.keys()) sink.end()
    this.#sinks.clear()
    this.#resolveEnded(reason)
  }

  #fatalEnd (error: StreamError, kind: AbortKind): void {
    this.#fatal = error
    this.#send(this.mainStreamId, 'ERROR', error)
    this.#endAll('aborted')
    this.#abort(kind)
  }

  #failed (err: unknown): void {
    if (this.#endReason !== undefined) {
      if (!(err instanceof StreamClosedError) && !(err instanceof RunAbortedError)) {
        this.#log.warn({ err }, 'agent threw after its response had ended')
      }
      return
    }
    this.#log.error({ err }, 'agent failed')
    const e = err as { expose?: unknown, message?: unknown, details?: unknown, streamCode?: unknown, severity?: unknown }
    const safe = typeof err === 'object' && err !== null && e.expose === true && typeof e.message === 'string'
    const details = safe && isPlainObject(e.details) ? e.details : undefined
    // a safe error may name its own stream code and severity (backend errors: backend_timeout is TRANSIENT)
    const code = safe && typeof e.streamCode === 'string' && e.streamCode in STREAM_ERROR_CODES ? e.streamCode as StreamErrorCode : 'agent_failed'
    const severity = safe && e.severity === 'TRANSIENT' ? 'TRANSIENT' : 'FATAL'
    this.#fatalEnd(this.#streamError(code, safe ? e.message as string : 'The agent failed', severity, details), 'agent_failed')
  }

  #assertOpen (): void {
    if (this.#endReason !== undefined) throw new StreamClosedError(this.mainStreamId, this.#endReason === 'done' ? 'closed' : this.#endReason)
  }

  #presentation (type: PresentationEvent['type'], data: unknown): Promise<void> | undefined {
    return this.#event({ id: randomUUID(), timestamp: now(), type, data } as PresentationEvent)
  }

  #event (event: PresentationEvent): Promise<void> | undefined {
    this.#assertOpen()
    if (!checkPresentationEvent(event)) {
      const issues = toIssues(checkPresentationEvent.errors).map((i) => `${i.path} ${i.message}`)
      throw new EventInvalidError(`${String((event as { type?: unknown }).type)}: ${issues.slice(0, 5).join('; ')}`)
    }
    return this.#send(this.mainStreamId, 'EVENT', event)
  }

  async #makeStream (title?: string, metadata?: JsonObject): Promise<StreamHandle> {
    this.#assertOpen()
    if (metadata !== undefined && !isPlainObject(metadata)) throw new EventInvalidError('create_stream() metadata must be a plain object')
    const run = this
    const id = randomUUID()
    let state: 'active' | 'closed' | 'aborted' = 'active'
    const start: EventPayload = { type: 'STREAM_START' }
    if (title !== undefined) start.title = String(title)
    if (metadata !== undefined) start.metadata = metadata
    this.#open.add(id)
    await this.#send(id, 'EVENT', start)
    const active = (): boolean => state === 'active' && run.#open.has(id)
    return {
      stream_id: id,
      get is_active () { return active() },
      async write (chunk: string) {
        if (!active()) throw new StreamClosedError(id, state === 'active' ? 'ended' : state)
        if (typeof chunk !== 'string') throw new EventInvalidError('stream.write() takes a string')
        return run.#send(id, 'DELTA', chunk)
      },
      async close () {
        if (!active()) return
        state = 'closed'
        run.#open.delete(id)
        return run.#send(id, 'CLOSE', 'done')
      },
      async abort (reason: string) {
        if (!active()) return
        state = 'aborted'
        run.#open.delete(id)
        run.#send(id, 'ERROR', run.#streamError('stream_aborted', String(reason), 'FATAL'))
        return run.#send(id, 'CLOSE', 'aborted')
      }
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
        if (!isPlainObject(data)) throw new EventInvalidError('data() takes a plain object')
        if (typeof viewHint !== 'string' || (title !== undefined && typeof title !== 'string')) {
          throw new EventInvalidError('data() title and view_hint must be strings')
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
        if (details !== undefined && !isPlainObject(details)) throw new EventInvalidError('error() details must be a plain object')
        const error = run.#streamError('agent_error', String(message), recoverable ? 'WARNING' : 'FATAL', details)
        if (recoverable) return run.#send(run.mainStreamId, 'ERROR', error)
        run.#fatalEnd(error, 'agent_error')
      },
      async result (obj) {
        run.#assertOpen()
        if (!isPlainObject(obj)) throw new EventInvalidError('result() takes a plain object')
        if (run.#result !== undefined) throw new EventInvalidError('result() may be called once')
        const validate = run.#capability.validateOutput
        if (validate !== undefined && !validate(obj)) {
          const errors = toIssues(validate.errors, '/result')
          run.#fatalEnd(run.#streamError('agent_contract_violation', 'The agent\'s result does not match its outputs schema', 'FATAL', { errors }), 'contract_violation')
          throw new EventInvalidError(`result() does not match the outputs schema: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`)
        }
        run.#result = obj
        return run.#send(run.mainStreamId, 'EVENT', { type: 'RESULT', data: obj })
      },
      async create_stream (title, metadata) {
        return run.#makeStream(title, metadata)
      },
      async usage (usage, cost) {
        run.#assertOpen()
        const given = usage as { input_tokens?: unknown, output_tokens?: unknown } | undefined
        const counts = [given?.input_tokens, given?.output_tokens]
        if (!counts.every((n) => Number.isInteger(n) && (n as number) >= 0)) throw new EventInvalidError('usage() takes { input_tokens, output_tokens } as non-negative integers')
        if (cost !== undefined && !(Number.isFinite(cost) && cost >= 0)) throw new EventInvalidError('usage() cost must be a non-negative number')
        run.#reportedUsage = true
        run.#usage.input_tokens += usage.input_tokens
        run.#usage.output_tokens += usage.output_tokens
        if (cost !== undefined) run.#cost = (run.#cost ?? 0) + cost
        const data: { input_tokens: number, output_tokens: number, cost?: number } = { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens }
        if (cost !== undefined) data.cost = cost
        return run.#send(run.mainStreamId, 'EVENT', { type: 'USAGE', data })
      },
      async emit (event) {
        const type = isPlainObject(event) ? event.type : undefined
        if (typeof type === 'string' && (PRESENTATION_EVENT_TYPES as readonly string[]).includes(type)) {
          return run.#event(event as PresentationEvent)
        }
        if (!isPlainObject(event)) throw new EventInvalidError('emit() takes an event object')
        let kind: 'cloudevent' | 'graph'
        if ('specversion' in event) {
          if (!checkCloudEvent(event)) throw new EventInvalidError(`CloudEvent: ${toIssues(checkCloudEvent.errors).map((i) => `${i.path} ${i.message}`).join('; ')}`)
          kind = 'cloudevent'
        } else if ('event_type' in event) {
          if (!checkGraphEvent(event)) throw new EventInvalidError(`graph event: ${toIssues(checkGraphEvent.errors).map((i) => `${i.path} ${i.message}`).join('; ')}`)
          kind = 'graph'
        } else {
          throw new EventInvalidError('emit() takes a presentation event, a CloudEvent (specversion "1.0") or a graph event (event_type)')
        }
        run.#recorder?.event(kind, event)
        log.debug({ requestId: run.requestId, agentEvent: event }, 'agent event')
      },
      async log (level, message, metadata) {
        const lvl: LogLevel = LOG_LEVELS.has(level) ? level : 'info'
        const meta = isPlainObject(metadata) ? metadata : undefined
        log[lvl]({ requestId: run.requestId, ...(meta !== undefined ? { agent: meta } : {}) }, String(message))
        run.#recorder?.event('cloudevent', {
          specversion: '1.0',
          id: randomUUID(),
          source: 'agent-host/agent',
          type: 'agent.log',
          time: now(),
          datacontenttype: 'application/json',
          data: { level: lvl, message: String(message), ...(meta !== undefined ? { metadata: meta } : {}) }
        })
      },
      async audit (actor, action, resource, success) {
        log.info({ requestId: run.requestId, audit: { actor, action, resource, success: Boolean(success) } }, 'agent audit')
        run.#recorder?.audit(String(actor), String(action), String(resource), Boolean(success))
      }
    }
  }
}
