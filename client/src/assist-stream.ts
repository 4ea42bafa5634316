import { AgentHostError, errorFromResponse, failureOf } from './agent-host-error.js'
import type { CloseReason, Interrupt, ServiceRequest, StreamPacket } from './protocol.js'
import { resumeDelay, sleep, type ResumePolicy } from './resume-policy.js'
import { readPackets } from './sse-packets.js'

/** Options of {@link AgentHostClient.stream}. */
export interface StreamOptions {
  /** Aborts the request and ends the iteration: the pending `next()` rejects with {@link AgentHostError} code `aborted`. */
  signal?: AbortSignal
  /**
   * A cursor (`<stream_id>:<seq>`, an {@link AssistStream.cursor} saved earlier) to start after,
   * sent as `Last-Event-ID`: a page that reloads gets only the packets it did not have. The
   * request must be the same envelope ({@link AssistStream.request}).
   */
  resumeFrom?: string
  /**
   * Called before each re-POST of a dropped stream, with the cursor it resumes after ('' when
   * no packet had come yet: the server replays from the start) and the attempt (1, 2, ...).
   */
  onResume?: (cursor: string, attempt: number) => void
}

/**
 * The packets of one `POST /v1/assist` answered as Server-Sent Events, in order, as an async
 * iterator (`for await (const packet of stream)`). The request is sent at the first `next()`.
 *
 * A stream that drops before the main stream's CLOSE is re-POSTed with the same envelope and
 * `Last-Event-ID: <cursor>` (the server follows the same run, never a second one), with backoff;
 * no packet is lost or repeated (a packet whose `seq` its stream has already had is dropped).
 * The iteration ends after the main stream's CLOSE, the last packet of a run (CAP.md §5); an
 * ERROR packet, FATAL ones included, is yielded like any other. Leaving the loop early aborts the
 * request.
 *
 * `next()` rejects with {@link AgentHostError}: the server's error (its `AH_ERR_*` code) when the
 * first request is refused, `network_error` when it cannot be sent, `aborted` when the signal
 * fires, `stream_interrupted` when resuming failed `resume.maxAttempts` times in a row, and the
 * server's error when a resume is refused for good (any status but 408, 429 and 5xx).
 *
 * A run that stops to ask its caller (human in the loop) sends an `INTERRUPT` EVENT and closes
 * with `"input_required"`: after the iteration, {@link interrupts} holds its questions and
 * {@link closeReason} is `"input_required"` ({@link isInterrupted} checks both); answer them with
 * {@link AgentHostClient.resume} or {@link AgentHostClient.resumeStream}.
 */
export interface AssistStream extends AsyncIterableIterator<StreamPacket> {
  /**
   * `<stream_id>:<seq>` of the last packet yielded (or the `resumeFrom` it started with), the
   * `Last-Event-ID` a resume sends. Save it with {@link request} to resume after a page reload;
   * drop both once the iteration has ended.
   */
  readonly cursor: string | undefined
  /** The envelope this stream sends, and sends again to resume. */
  readonly request: ServiceRequest
  /**
   * The open questions of the run's `INTERRUPT` EVENT, set as that packet is yielded (the run then
   * closes with `"input_required"`); `undefined` while none came. A stream started with
   * `resumeFrom` a cursor after that event does not see it again.
   */
  readonly interrupts: Interrupt[] | undefined
  /**
   * Why the run ended: the `p` of the main stream's CLOSE (`"done"`, `"input_required"`,
   * `"cancelled"`, ...), set as that packet is yielded; `undefined` before.
   */
  readonly closeReason: CloseReason | undefined
}

/** Sends the envelope, with `Last-Event-ID` when given. */
export type PostStream = (lastEventId: string | undefined, signal: AbortSignal) => Promise<Response>

// a refusal worth another try while resuming: timeouts, rate limits, overload, restarts
const RETRYABLE = new Set([408, 429, 500, 502, 503, 504])

type Outcome = { done: true } | { done: false, failure: unknown, progressed: boolean }

/** The implementation of {@link AssistStream}. */
export class PacketStream implements AssistStream {
  readonly request: ServiceRequest
  readonly #post: PostStream
  readonly #policy: ResumePolicy
  readonly #options: StreamOptions
  readonly #packets: AsyncGenerator<StreamPacket, undefined, undefined>
  #cursor: string | undefined
  #interrupts: Interrupt[] | undefined
  #closeReason: CloseReason | undefined
  #started = false
  /** Highest `seq` yielded per stream. */
  readonly #seq = new Map<string, number>()
  /** Per stream seen from its first packet: whether it is the main stream (sub-streams open with STREAM_START). */
  readonly #main = new Map<string, boolean>()

  constructor (request: ServiceRequest, post: PostStream, policy: ResumePolicy, options: StreamOptions = {}) {
    this.request = request
    this.#post = post
    this.#policy = policy
    this.#options = options
    this.#cursor = options.resumeFrom
    if (options.resumeFrom !== undefined) {
      const [streamId, seq] = options.resumeFrom.toLowerCase().split(':') as [string, string | undefined]
      if (seq !== undefined) this.#seq.set(streamId, Number(seq))
    }
    this.#packets = this.#run()
  }

  get cursor (): string | undefined {
    return this.#cursor
  }

  get interrupts (): Interrupt[] | undefined {
    return this.#interrupts
  }

  get closeReason (): CloseReason | undefined {
    return this.#closeReason
  }

  async next (): Promise<IteratorResult<StreamPacket, undefined>> {
    return await this.#packets.next()
  }

  async return (): Promise<IteratorResult<StreamPacket, undefined>> {
    return await this.#packets.return(undefined)
  }

  [Symbol.asyncIterator] (): this {
    return this
  }

  async * #run (): AsyncGenerator<StreamPacket, undefined, undefined> {
    const signal = this.#options.signal
    const controller = new AbortController()
    const abort = (): void => { controller.abort(signal?.reason) }
    signal?.addEventListener('abort', abort, { once: true })
    try {
      for (let attempt = 1; ; attempt++) {
        if (signal?.aborted === true) abort()
        const outcome = yield * this.#connect(controller.signal)
        if (outcome.done) return undefined
        if (signal?.aborted === true) throw failureOf(outcome.failure, signal, this.request.request_id)
        if (outcome.progressed) attempt = 1
        if (attempt > this.#policy.maxAttempts) {
          throw new AgentHostError(`The stream dropped and ${this.#policy.maxAttempts} resumes in a row failed`, {
            status: 0, code: 'stream_interrupted', cause: outcome.failure, requestId: this.request.request_id
          })
        }
        this.#options.onResume?.(this.#cursor ?? '', attempt)
        await sleep(resumeDelay(attempt, this.#policy), controller.signal).catch((err: unknown) => { throw failureOf(err, signal, this.request.request_id) })
      }
    } finally {
      signal?.removeEventListener('abort', abort)
      // lets go of a request still under way when the caller stopped early
      controller.abort()
    }
  }

  /** One request: yields its new packets, and says whether the run is over or why it must resume. */
  async * #connect (signal: AbortSignal): AsyncGenerator<StreamPacket, Outcome, undefined> {
    const requestId = this.request.request_id
    let response: Response
    try {
      response = await this.#post(this.#cursor, signal)
    } catch (err) {
      if (!this.#started) throw failureOf(err, this.#options.signal, requestId)
      return { done: false, failure: err, progressed: false }
    }
    if (!response.ok) {
      const error = await errorFromResponse(response, requestId)
      if (!this.#started || !RETRYABLE.has(response.status)) throw error
      return { done: false, failure: error, progressed: false }
    }
    if (response.body === null || response.headers.get('content-type')?.startsWith('text/event-stream') !== true) {
      throw new AgentHostError(`Expected an event stream, got ${response.headers.get('content-type') ?? 'no content type'}`, { status: response.status, code: 'invalid_response', requestId })
    }
    this.#started = true
    let progressed = false
    let last: StreamPacket | undefined
    try {
      for await (const packet of readPackets(response.body)) {
        last = packet
        if (packet.seq <= (this.#seq.get(packet.stream_id) ?? 0)) continue
        this.#seq.set(packet.stream_id, packet.seq)
        if (packet.seq === 1) this.#main.set(packet.stream_id, !(packet.op === 'EVENT' && packet.p.type === 'STREAM_START'))
        this.#cursor = `${packet.stream_id}:${packet.seq}`
        progressed = true
        if (packet.op === 'EVENT' && packet.p.type === 'INTERRUPT') this.#interrupts = packet.p.interrupts
        const closesRun = packet.op === 'CLOSE' && this.#main.get(packet.stream_id) === true
        if (closesRun) this.#closeReason = packet.p
        yield packet
        if (closesRun) return { done: true }
      }
    } catch (err) {
      if (err instanceof AgentHostError) throw err
      return { done: false, failure: err, progressed }
    }
    // The server ends a response cleanly only after the run's last packet, a CLOSE: this is how a
    // stream resumed from a saved cursor ends when its main stream's first packet came before it.
    if (last?.op === 'CLOSE') {
      this.#closeReason ??= last.p
      return { done: true }
    }
    return { done: false, failure: new Error('The response ended before the main stream\'s CLOSE'), progressed }
  }
}
