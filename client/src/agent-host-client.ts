import { AgentHostError, errorFromResponse, failureOf } from './agent-host-error.js'
import { PacketStream, type AssistStream, type StreamOptions } from './assist-stream.js'
import { buildEnvelope, traceparentOf, type EnvelopeInput } from './build-envelope.js'
import { buildResumeEnvelope, type ResumeTarget } from './interrupts.js'
import type { AgentDefinition, AgentList, ResumeAnswer, ServiceRequest, ServiceResponse } from './protocol.js'
import { DEFAULT_RESUME, type ResumeOptions, type ResumePolicy } from './resume-policy.js'

/** How to reach an agent-host server. */
export interface ClientOptions {
  /** The server's origin, for example `http://127.0.0.1:3000`; `''` (or `location.origin`) in a page the host serves. */
  baseUrl: string
  /** Sent as `Authorization: Bearer <apiKey>` (servers with `AUTH_MODE=apikey` or `jwt`). */
  apiKey?: string
  /** Extra headers on every call. */
  headers?: Record<string, string>
  /** The `fetch` to use; default `globalThis.fetch`. */
  fetch?: typeof fetch
  /** How dropped streams are resumed (see {@link ResumeOptions}). */
  resume?: ResumeOptions
}

/** Options of a single call. */
export interface CallOptions {
  /** Aborts the call: it rejects with {@link AgentHostError} code `aborted` (the signal's reason as `cause`). */
  signal?: AbortSignal
}

interface Send {
  method: 'GET' | 'POST'
  path: string
  accept: string
  body?: ServiceRequest
  headers?: Record<string, string>
  signal?: AbortSignal | undefined
  requestId?: string
}

/**
 * A client of agent-host's CAP API: `POST /v1/assist` as JSON ({@link assist}) or as a resumable
 * stream of packets ({@link stream}), answering a run that stopped to ask ({@link resume},
 * {@link resumeStream}), cancelling a run ({@link cancel}) and listing the agents ({@link agents}). Uses only web APIs (fetch, streams, AbortSignal), so it runs in Node.js 20+
 * and in browsers. Every failure is an {@link AgentHostError}.
 */
export class AgentHostClient {
  readonly #baseUrl: string
  readonly #headers: Record<string, string>
  readonly #fetch: (url: string, init: RequestInit) => Promise<Response>
  readonly #resume: ResumePolicy

  /** A client of the server at `options.baseUrl`; it holds no connection of its own until a call. */
  constructor (options: ClientOptions) {
    this.#baseUrl = options.baseUrl.replace(/\/+$/, '')
    this.#headers = { ...options.headers, ...(options.apiKey === undefined ? {} : { authorization: `Bearer ${options.apiKey}` }) }
    const custom = options.fetch
    // called as plain functions: a browser's fetch refuses any `this` but the window
    this.#fetch = custom === undefined ? async (url, init) => await globalThis.fetch(url, init) : async (url, init) => await custom(url, init)
    this.#resume = { ...DEFAULT_RESUME, ...options.resume }
  }

  /**
   * The hosted agents' manifests (`GET /v1/agents`).
   * @throws AgentHostError
   */
  async agents (opts: CallOptions = {}): Promise<AgentDefinition[]> {
    const response = await this.#send({ method: 'GET', path: '/v1/agents', accept: 'application/json', signal: opts.signal })
    return (await this.#json<AgentList>(response, opts.signal)).agents
  }

  /**
   * One call answered as JSON (`POST /v1/assist`, `Accept: application/json`): the agent's
   * `result()`, or the transcript of what it emitted (CAP.md §4). Sending the same envelope again
   * returns the same answer without running the agent again.
   * @param request a full envelope, or what {@link buildEnvelope} makes one from
   * @throws AgentHostError the server's error (`AH_ERR_VALIDATION`, `AH_ERR_AGENT_NOT_FOUND`, ...), `network_error` or `aborted`
   */
  async assist (request: ServiceRequest | EnvelopeInput, opts: CallOptions = {}): Promise<ServiceResponse> {
    const envelope = toEnvelope(request)
    const response = await this.#send({ method: 'POST', path: '/v1/assist', accept: 'application/json', body: envelope, signal: opts.signal, requestId: envelope.request_id })
    return await this.#json<ServiceResponse>(response, opts.signal, envelope.request_id)
  }

  /**
   * One call answered as Server-Sent Events (`POST /v1/assist`, `Accept: text/event-stream`): its
   * packets as they come, resumed across dropped connections (see {@link AssistStream}).
   * @param request a full envelope, or what {@link buildEnvelope} makes one from
   */
  stream (request: ServiceRequest | EnvelopeInput, opts: StreamOptions = {}): AssistStream {
    const envelope = toEnvelope(request)
    return new PacketStream(envelope, async (lastEventId, signal) => await this.#send({
      method: 'POST',
      path: '/v1/assist',
      accept: 'text/event-stream',
      body: envelope,
      headers: lastEventId === undefined ? {} : { 'last-event-id': lastEventId },
      signal,
      requestId: envelope.request_id
    }), this.#resume, opts)
  }

  /**
   * Answers the interrupts of a run that stopped to ask (a JSON answer with `interrupts`, a stream
   * closed `"input_required"`: see {@link isInterrupted}) and goes on with it, answered as JSON like
   * {@link assist}: the result, or `interrupts` again when questions are left open. It sends
   * {@link buildResumeEnvelope}`(target, answers)`: a new request in the run's session, with
   * `payload.payload.resume = answers`. To retry the very same answer, send that envelope with
   * {@link assist}.
   * @param target the envelope of the request that asked, or its agent and session
   * @param answers `{ interrupt_id, value }` per question: the input its `schema` asks for, or `{ approved, comment? }` for an approval
   * @throws AgentHostError as {@link assist}, and `AH_ERR_INTERRUPT_NOT_FOUND` (404: no such question in this session for this caller),
   * `AH_ERR_INTERRUPT_ANSWER_INVALID` (400, `details.errors` lists the failing paths; the question stays open),
   * `AH_ERR_INTERRUPT_CLOSED` (409: answered already, or its run went on or ended), `AH_ERR_INTERRUPT_EXPIRED` (410)
   */
  async resume (target: ResumeTarget, answers: ResumeAnswer[], opts: CallOptions = {}): Promise<ServiceResponse> {
    return await this.assist(buildResumeEnvelope(target, answers), opts)
  }

  /**
   * {@link resume} answered as Server-Sent Events, like {@link stream}: the packets the run sends
   * from where it stopped (its earlier packets are not sent again), resumed across dropped
   * connections (its {@link AssistStream.request} is the answering envelope, to save for a page
   * reload). A refused answer (the errors of {@link resume}) rejects the first `next()`. Not to be
   * confused with resuming a dropped stream, which {@link stream} does by itself.
   * @param target the envelope of the request that asked, or its agent and session
   * @param answers `{ interrupt_id, value }` per question
   */
  resumeStream (target: ResumeTarget, answers: ResumeAnswer[], opts: StreamOptions = {}): AssistStream {
    return this.stream(buildResumeEnvelope(target, answers), opts)
  }

  /**
   * Ends a running request (`POST /v1/assist/:request_id/cancel`): the agent's signal fires and
   * every open stream closes with `"cancelled"`. Only its caller (or an admin key) may.
   * @throws AgentHostError `AH_ERR_RUN_NOT_FOUND` (404) when no such run is running for this caller
   */
  async cancel (requestId: string, opts: CallOptions = {}): Promise<void> {
    const response = await this.#send({ method: 'POST', path: `/v1/assist/${encodeURIComponent(requestId)}/cancel`, accept: 'application/json', signal: opts.signal, requestId })
    await this.#json(response, opts.signal, requestId)
  }

  async #send (call: Send): Promise<Response> {
    const headers: Record<string, string> = { ...this.#headers, accept: call.accept, ...call.headers }
    if (call.body !== undefined) {
      headers['content-type'] = 'application/json'
      headers.traceparent ??= traceparentOf(call.body.context.trace)
    }
    try {
      if (call.signal?.aborted === true) throw call.signal.reason
      return await this.#fetch(`${this.#baseUrl}${call.path}`, {
        method: call.method,
        headers,
        ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
        ...(call.signal === undefined ? {} : { signal: call.signal })
      })
    } catch (err) {
      throw failureOf(err, call.signal, call.requestId)
    }
  }

  async #json<T> (response: Response, signal: AbortSignal | undefined, requestId?: string): Promise<T> {
    if (!response.ok) throw await errorFromResponse(response, requestId)
    let text: string
    try {
      text = await response.text()
    } catch (err) {
      throw failureOf(err, signal, requestId)
    }
    try {
      return JSON.parse(text) as T
    } catch (err) {
      throw new AgentHostError(`Expected JSON, got ${JSON.stringify(text.slice(0, 200))}`, { status: response.status, code: 'invalid_response', cause: err, ...(requestId === undefined ? {} : { requestId }) })
    }
  }
}

function toEnvelope (request: ServiceRequest | EnvelopeInput): ServiceRequest {
  return 'agentId' in request ? buildEnvelope(request) : request
}
