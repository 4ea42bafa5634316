import { createHash, randomUUID } from 'node:crypto'
import type { Span, Tracer } from '@opentelemetry/api'
import {
  AH_ERR_AGENT_NOT_FOUND, AH_ERR_BACKEND_UNAVAILABLE, AH_ERR_INTERRUPT_ANSWER_INVALID, AH_ERR_INTERRUPT_CLOSED, AH_ERR_INTERRUPT_EXPIRED, AH_ERR_INTERRUPT_NOT_FOUND, AH_ERR_NOT_ACCEPTABLE, AH_ERR_REQUEST_CONFLICT, AH_ERR_RUN_NOT_FOUND, AH_ERR_SESSION_NOT_FOUND, AH_ERR_SHUTTING_DOWN, AH_ERR_STORAGE_UNAVAILABLE, AH_ERR_VALIDATION, errorBody, withDetails
} from '../errors.js'
import type { Agent, AgentHost, JsonObject } from '../agents/contract.js'
import type { AgentProtocol, BusPublisher } from '../backends/protocol.js'
import type { EventPublication } from '../protocol/contract.js'
import type { HostedAgent, HostedCapability } from '../agents/hosted-agent.js'
import { toIssues } from '../agents/json-schema.js'
import type { AgentRegistry } from '../agents/registry.js'
import { resolveAgentRequest } from '../agents/resolve-request.js'
import { agentRefusal } from '../auth/agent-access.js'
import type { Identity } from '../storage/api-keys.js'
import { grants, viewerOf } from '../auth/scopes.js'
import type { DeliveryMode } from '../protocol/manifest.js'
import type { ResolvedAgentRequest, ServiceRequest } from '../protocol/envelope.js'
import { isBusy, isUnavailable, retryBusy } from '../storage/busy.js'
import { canonicalJson } from '../storage/canonical-json.js'
import { cutText } from '../storage/audit-text.js'
import type { RunLedger } from '../storage/run-ledger.js'
import type { JournalRow, RunRecord } from '../storage/runs.js'
import type { SessionStore } from '../protocol/session.js'
import { answerOf, storedAnswer, type RunAnswer } from './answers.js'
import { runKey } from './run-key.js'
import { FrameQueue, type Frame } from './frame-queue.js'
import { isCloseFrame, resumeGapPackets } from './packets.js'
import { recoverRun } from './recover.js'
import { AssistRun, SUMMARY_BYTES, lazyChild, type DisconnectPolicy, type RunLogger } from './run.js'
import { RunRegistry } from './run-registry.js'
import { endRunSpan, startRunSpan, type RunTrace } from './run-span.js'
import { tracedBackend } from './traced-backend.js'
import { meteredBackend, repeatsBackendUsage } from './metered-backend.js'
import { budgetedBackend } from './budgeted-backend.js'
import type { Budgets } from './budgets.js'
import { sees, tenantOf } from '../storage/tenants.js'
import { RunObservers, UNKNOWN_MODEL, type RunObserver } from './run-observers.js'
import type { A2ACallers } from '../a2a-client/remote-agents.js'
import type { ToolCallers } from '../tools/tool-caller.js'
import { openInterrupts, type InterruptRecord, type InterruptStore, type WaitingRun } from '../storage/interrupts.js'
import type { AuditInput } from '../storage/audit.js'
import { answerIssues, resumeOf, RunReplay, wireInterrupt, type HostApprovals, type ResumeItem } from './replay.js'

export type { RunAnswer } from './answers.js'
export type { Frame } from './frame-queue.js'
export type { RunTrace } from './run-span.js'
export type { RunObserver, RunUsage } from './run-observers.js'

/** SHA-256 of the envelope's canonical JSON (after validation dropped unknown keys and filled defaults). */
export function envelopeHash (envelope: ServiceRequest): string {
  return createHash('sha256').update(canonicalJson(envelope)).digest('hex')
}

/** The settings the engine runs by (see `src/config.ts` for each). */
export interface EngineSettings {
  /** RUN_LEASE_MS: how long a run's owner holds it without renewing. */
  leaseMs: number
  /** DB_WRITE_BUDGET_MS: how long a write may wait for a lock held by another process. */
  writeBudgetMs: number
  /** RUN_MAX_OUTPUT_BYTES (0: no cap). */
  maxOutputBytes: number
  /** RUN_TIMEOUT_MS (0: no limit). */
  runTimeoutMs: number
  /** DISCONNECT_POLICY. */
  disconnectPolicy: DisconnectPolicy
  /** SSE_MAX_BUFFER_BYTES: what one follower may hold unread before it is cut as a slow consumer. */
  followerMaxBytes: number
  /** How often a follower of a run owned by another process looks at the journal. */
  pollMs?: number
  /** INTERRUPT_EXPIRES_S: how long a question waits for its answer when the agent gives no time. */
  interruptExpiresS?: number
  /** AUDIT_RUNS: `all` (default) audits every run's end; `failed` only the runs that did not succeed. */
  auditRuns?: 'all' | 'failed'
}

export interface EngineOptions {
  /** Where runs, their journals, answers, interactions, events and audit rows are written (SQLite or PostgreSQL); each write is acknowledged only once committed. */
  ledger: RunLedger
  /** Opens the session handle each run's agent gets. */
  sessions: Pick<SessionStore, 'open'>
  agents: AgentRegistry
  /** What agents get as their fourth argument, and the check that an agent's backends are there. */
  backends: AgentHost & { require(names: readonly string[]): Promise<void> }
  /** The event bus agents publish to (`host.bus`), their events owned by the run's caller and held to its agent list. */
  bus?: { publish(publication: EventPublication, origin: { source: string, owner_key: string, owner_agents: readonly string[] | null, owner_scopes: readonly string[], trace_id: string }): ReturnType<BusPublisher['publish']> }
  /** External A2A agents (`host.a2a`), called on behalf of the run's caller and given up when the run ends. None: no `host.a2a`. */
  a2a?: A2ACallers
  /** MCP tools (`host.tools`), called on behalf of the run's caller: each call checked, recorded, and aborted with the run. None: no `host.tools`. */
  tools?: ToolCallers
  /** Where runs that stopped to ask wait for their answers (human in the loop). None: `response.interrupt()` is refused. */
  interrupts?: InterruptStore
  /** Model budgets (BUDGETS_FILE): a run of an agent with configured backends is refused once its caller's are used up, and each call of them is held to them. None: no budgets. */
  budgets?: Budgets
  instanceId: string
  log: RunLogger
  /** OpenTelemetry: each run is an `assist.run` span, each backend call of its agent a `backend.call` child. None: no spans. */
  tracer?: Tracer
  settings: EngineSettings
  /** Told when a run this process ran has ended (metrics). */
  onRunEnded?: (run: { agent: string, mode: DeliveryMode, reason: string, seconds: number }) => void
}

/** How a submission was taken. */
export interface Submission {
  requestId: string
  mode: DeliveryMode
  /** `started`: a new run; `joined`: the request id is known with the same envelope; `gone`: a resume cursor for a request the journal no longer holds. */
  outcome: 'started' | 'joined' | 'gone'
}

/**
 * The delivery mode the client takes (CAP.md §3, from its `Accept`: `http/negotiate.ts:deliveryOf`):
 * `own`, the capability's `delivery_mode`; one mode whatever the capability's; or `refused`, neither
 * (406 `AH_ERR_NOT_ACCEPTABLE` naming `accept`, once the request is otherwise valid).
 */
export type Delivery = DeliveryMode | 'own' | { refused: string }

export interface PrepareOptions {
  /** Who is asking: access to the agent, ownership of the session and of the run. */
  identity: Identity
  delivery: Delivery
  /** The client is resuming (it sent a cursor): an unknown request id is `gone`, not started. */
  resuming?: boolean
  /**
   * Backends the caller lends a new run, by name: a protocol binding's own (the MCP binding lends
   * `mcp-sampling`, its client's model). They count for the agent's `backends` (one that is not
   * `available()` is refused with its own `unavailableReason()`), and the run's `host.backend(name)`
   * finds them before the configured ones, metered and traced as those are.
   */
  lend?: ReadonlyMap<string, AgentProtocol>
}

export interface StartOptions {
  /** The request's logger (the run logs through a child of it). */
  log?: RunLogger & { child?: (bindings: JsonObject) => RunLogger, isLevelEnabled?: (level: string) => boolean }
  /** Where the run's span goes in the caller's trace (with a tracer; default: under the caller's span its envelope names). */
  trace?: RunTrace
}

export type SubmitOptions = PrepareOptions & StartOptions

/**
 * A request {@link AssistEngine.prepare} checked and resolved, and what {@link AssistEngine.begin}
 * will do with it. Between the two the caller admits a new run (its rate limits, a stream's slot),
 * or refuses it by throwing: the engine asks nothing of its callers.
 */
export interface PreparedRun {
  readonly requestId: string
  readonly mode: DeliveryMode
  /** `start`: a new run (unless another process starts it first: then it is joined); `joined` and `gone` as in {@link Submission}. */
  readonly outcome: 'start' | 'joined' | 'gone'
  /** The agent it runs (the per-agent rate limit counts it). */
  readonly agent: { readonly id: string, readonly name: string }
}

/** What {@link AssistEngine.begin} needs of a prepared new run. */
interface PreparedStart {
  envelope: ServiceRequest
  resolved: ResolvedAgentRequest
  hosted: HostedAgent
  capability: HostedCapability
  metadata: { capability?: string, timeout_ms?: number, on_disconnect?: DisconnectPolicy }
  hash: string
  who: Identity
  admin: boolean
  /** A resume: the chain it answers, and the answers (none: this request's answers were taken before, and its run not stored). */
  resume?: { chain: WaitingRun, answers: Array<{ interrupt: InterruptRecord, value: unknown }> }
  lend?: ReadonlyMap<string, AgentProtocol>
}

/** A resume cursor: a stream id, and the last `seq` of it the client has (absent: replay everything). */
export interface Cursor {
  streamId: string
  seq?: number
}

export interface FollowOptions {
  after?: Cursor
  /** Aborted when the client goes away; `signal.reason` may be `'slow_consumer'`. */
  signal?: AbortSignal
  /**
   * Called when the client fell more than `SSE_MAX_BUFFER_BYTES` behind a run that does not wait
   * for it: it no longer follows the run (the iterator ends without the final CLOSE), and the
   * transport should hang up now rather than wait for the client to drain.
   */
  onSlow?: () => void
}

/** The capability named by `metadata.capability`, else the agent's first. */
function pickCapability (hosted: HostedAgent, name: string | undefined): HostedCapability {
  if (name === undefined) return hosted.capabilities[0] as HostedCapability
  const found = hosted.capabilities.find((c) => c.capability.name === name)
  if (found !== undefined) return found
  const names = hosted.capabilities.map((c) => c.capability.name).join(', ')
  const path = '/payload/metadata/capability'
  throw withDetails(new AH_ERR_VALIDATION(`Invalid request: ${path} must name a capability of the agent (${names})`), {
    errors: [{ path, message: `must be one of: ${names}` }]
  })
}

/**
 * The run engine: a run's life from submission to its last packet, with no HTTP in it. The CAP
 * route, the task runtime and other protocol bindings all go through it:
 * - {@link submit} checks access and the session, joins a known request id, or starts a run;
 * - {@link follow} yields a run's packets: its journal after a cursor, then the live run (here, or
 *   in another process on the same database) until its last packet;
 * - {@link answer} is the JSON answer; {@link cancel} ends a run wherever it runs.
 *
 * A running run is owned by a lease renewed by heartbeat (RUN_LEASE_MS); a run whose lease lapsed
 * is an orphan, whatever its PID or instance, and is recovered exactly once (at boot, by the
 * sweeper, or by whoever follows it).
 */
export class AssistEngine {
  readonly registry = new RunRegistry()
  readonly #o: EngineOptions
  readonly #s: Required<EngineSettings>
  /** Lease tokens of the runs this process holds. */
  readonly #tokens = new Map<string, string>()
  /** Each live run's finish (answer stored, interaction and audit recorded). */
  /** Each live run's finish: its answer, or undefined when the answer is the stored one (rebuilt from the journal when asked). */
  readonly #answers = new Map<string, Promise<RunAnswer | undefined>>()
  /** Submissions past the closing check: shutdown waits for them, so that no run starts once storage is closed. */
  readonly #starting = new Set<Promise<unknown>>()
  /** What {@link begin} needs of the new runs {@link prepare} returned, until they begin. */
  readonly #prepared = new WeakMap<PreparedRun, PreparedStart>()
  readonly #observers: RunObservers
  /** The chains the live runs go on from (a resumed run's chain is settled when it ends without asking again). */
  readonly #chains = new Map<string, WaitingRun>()
  #timer: NodeJS.Timeout | undefined
  #ticking: Promise<void> | undefined

  constructor (options: EngineOptions) {
    this.#o = options
    this.#s = { pollMs: 50, interruptExpiresS: 86400, auditRuns: 'all', ...options.settings }
    this.#observers = new RunObservers(options.log)
    options.ledger.onCancelRequested((requestId) => { this.registry.get(requestId)?.cancel() })
  }

  /** Tell `observer` of this process's runs from now on: first packets, tokens used, errors they ended with. */
  observe (observer: RunObserver): void {
    this.#observers.add(observer)
  }

  /** Begin the heartbeat: renew this process's leases, pick up cancel requests, recover orphans. */
  start (): void {
    this.#timer ??= setInterval(() => { this.#tick() }, Math.max(10, Math.floor(this.#s.leaseMs / 3))).unref()
  }

  /** Whether shutdown has begun (new runs are refused). */
  get closing (): boolean { return this.registry.closing }

  /**
   * Take a request with nothing to admit: {@link prepare}, then {@link begin}.
   * @throws the catalogue's 4xx errors, 503 `AH_ERR_SHUTTING_DOWN`, 503 `AH_ERR_STORAGE_BUSY`
   */
  async submit (envelope: ServiceRequest, options: SubmitOptions): Promise<Submission> {
    if (this.registry.closing) throw new AH_ERR_SHUTTING_DOWN()
    // one step: once it is under way, shutdown waits for its run, and ends it with the rest
    return await this.#whileOpen(this.#submit(envelope, options))
  }

  async #submit (envelope: ServiceRequest, options: SubmitOptions): Promise<Submission> {
    const prepared = await this.#prepare(envelope, options)
    return prepared.outcome === 'start' ? await this.#start(prepared, this.#take(prepared), options) : { requestId: prepared.requestId, mode: prepared.mode, outcome: prepared.outcome }
  }

  /**
   * Resolve and check a request (the agent, the caller's access to it, the capability, its input,
   * the delivery mode) and find what it asks for: the run of a known request id (same envelope; a
   * different one is a 409), a resumed one the journal no longer holds, or a new run, whose backends
   * must be configured. Stores nothing.
   * @throws the catalogue's 4xx errors, 503 `AH_ERR_SHUTTING_DOWN`, 503 `AH_ERR_STORAGE_BUSY`
   */
  async prepare (envelope: ServiceRequest, options: PrepareOptions): Promise<PreparedRun> {
    if (this.registry.closing) throw new AH_ERR_SHUTTING_DOWN()
    return await this.#whileOpen(this.#prepare(envelope, options))
  }

  /**
   * The envelope the caller's run of request id `requestId` was started with, if there is one: a
   * protocol binding's call sent again carries a new time and trace, so it submits this one when it
   * asks the same (`protocol/binding-envelope.ts:resentAs`) and the engine joins its run.
   */
  async sentBefore (requestId: string, identity: Identity): Promise<ServiceRequest | undefined> {
    const known = await this.#o.ledger.get(runKey(identity.id, requestId))
    return known === undefined ? undefined : JSON.parse(known.envelope) as ServiceRequest
  }

  /**
   * Start a prepared new run (or join it, when another process started it since), or answer a
   * prepared join or resume as it is. Once shutdown has begun a new run is refused (503), stored nowhere.
   * @throws 404 `AH_ERR_SESSION_NOT_FOUND` (another caller's session), 409, 503 `AH_ERR_SHUTTING_DOWN`, 503 `AH_ERR_STORAGE_BUSY`
   */
  begin (prepared: PreparedRun, options: StartOptions = {}): Promise<Submission> {
    const { requestId, mode } = prepared
    if (prepared.outcome !== 'start') return Promise.resolve({ requestId, mode, outcome: prepared.outcome })
    if (this.registry.closing) return Promise.reject(new AH_ERR_SHUTTING_DOWN())
    // not async, and no await of its own: a fresh run's first follower then usually attaches before
    // an agent that writes without waiting has its first rows committed, and skips the journal (see
    // follow's `fresh`); one that comes later reads the journal first, which is correct, only slower
    let state: PreparedStart
    try {
      state = this.#take(prepared)
    } catch (err) {
      return Promise.reject(err)
    }
    return this.#whileOpen(this.#start(prepared, state, options))
  }

  /** What {@link begin} needs of `prepared`, handed out once. */
  #take (prepared: PreparedRun): PreparedStart {
    const state = this.#prepared.get(prepared)
    if (state === undefined) throw new Error('begin() takes what this engine\'s prepare() returned, once')
    this.#prepared.delete(prepared)
    return state
  }

  /**
   * Wait for a step of taking a request; shutdown waits for the steps under way (a run they store
   * is ended with the rest). Each public step checks first that shutdown has not begun.
   */
  async #whileOpen<T> (running: Promise<T>): Promise<T> {
    this.#starting.add(running)
    try {
      return await running
    } finally {
      this.#starting.delete(running)
    }
  }

  async #prepare (envelope: ServiceRequest, options: PrepareOptions): Promise<PreparedRun> {
    const resolved = resolveAgentRequest(envelope)
    const hosted = this.#o.agents.get(envelope.context.agent_id)
    if (hosted === undefined) throw new AH_ERR_AGENT_NOT_FOUND(envelope.context.agent_id)
    const agent = { id: hosted.manifest.metadata.id, name: hosted.manifest.metadata.name }
    const who = options.identity
    const refusal = agentRefusal(who, { ...agent, requiresAuth: hosted.manifest.metadata.requires_auth })
    if (refusal !== undefined) {
      await this.#o.ledger.audit({ actor: who.id, action: 'auth.deny', resource: `agent:${agent.name}`, success: false, claimed_user: envelope.context.user.user_id, details: { reason: refusal.reason, name: who.name } })
      throw refusal.error
    }
    const admin = grants(who.scopes, 'admin')
    const hash = envelopeHash(envelope)
    // the caller's request id, scoped to the caller: another principal's run of the same id is another run
    const requestId = runKey(who.id, envelope.request_id)
    const answers = resumeOf(resolved.payload)
    let resume: PreparedStart['resume']
    let agentRequest = resolved
    if (answers !== undefined) {
      const known = await this.#o.ledger.get(requestId)
      if (known !== undefined) return { ...await this.#join(known, hash, this.#modeOf(options.delivery, pickCapability(hosted, (resolved.metadata as { capability?: string }).capability)), who, admin, resolved), agent }
      resume = await this.#resumable(answers, resolved.session_id, agent.id, who, admin, requestId)
      // the agent is entered again with the request that asked, under this one's ids
      const first = resolveAgentRequest(JSON.parse(resume.chain.envelope) as ServiceRequest)
      agentRequest = { ...resolved, payload: first.payload, metadata: { ...resolved.metadata, ...(first.metadata.capability !== undefined ? { capability: first.metadata.capability } : {}) } }
    }
    const metadata = agentRequest.metadata as { capability?: string, timeout_ms?: number, on_disconnect?: DisconnectPolicy }
    const capability = pickCapability(hosted, metadata.capability)
    if (resume === undefined && capability.validateInput !== undefined && !capability.validateInput(resolved.payload)) {
      const errors = toIssues(capability.validateInput.errors, '/payload/payload')
      throw withDetails(new AH_ERR_VALIDATION(`Invalid agent input: ${errors.slice(0, 3).map((e) => `${e.path} ${e.message}`).join('; ')}`), { errors })
    }
    const mode = this.#modeOf(options.delivery, capability)
    const known = resume === undefined ? await this.#o.ledger.get(requestId) : undefined
    if (known !== undefined) return { ...await this.#join(known, hash, mode, who, admin, resolved), agent }
    if (options.resuming === true && mode === 'server_sent_events') {
      // another's session is not there, whichever way the client asks (a new run in it would be refused the same)
      const key = admin ? undefined : await this.#o.ledger.sessionKey(resolved.session_id)
      if (key !== undefined && key !== who.id) throw new AH_ERR_SESSION_NOT_FOUND(resolved.session_id)
      return { requestId, mode, outcome: 'gone', agent }
    }
    const backends = [...(hosted.agent.backends ?? []), ...(hosted.agent.capabilityBackends?.[capability.capability.name] ?? [])]
    for (const name of backends) {
      const lent = options.lend?.get(name)
      if (lent === undefined) await this.#o.backends.require([name])
      else if (!await lent.available()) throw new AH_ERR_BACKEND_UNAVAILABLE(lent.unavailableReason())
    }
    // only an agent that calls the host's models can spend a budget (a lent backend is its lender's model)
    if (backends.some((name) => options.lend?.get(name) === undefined)) await this.#o.budgets?.admit(who.id)
    const prepared: PreparedRun = { requestId, mode, outcome: 'start', agent }
    this.#prepared.set(prepared, { envelope, resolved: agentRequest, hosted, capability, metadata, hash, who, admin, ...(resume !== undefined ? { resume } : {}), ...(options.lend !== undefined ? { lend: options.lend } : {}) })
    return prepared
  }

  #modeOf (delivery: Delivery, capability: HostedCapability): DeliveryMode {
    if (typeof delivery === 'object') throw new AH_ERR_NOT_ACCEPTABLE(delivery.refused)
    return delivery === 'own' ? capability.capability.delivery_mode : delivery
  }

  /**
   * Check a resume's answers against the chain that asked (read only: {@link #start} takes them).
   * The interrupts must be one run's, the caller's (or the caller an admin), open, not expired, and
   * each answer right for its question.
   */
  async #resumable (answers: ResumeItem[], sessionId: string, agentId: string, who: Identity, admin: boolean, requestId: string): Promise<NonNullable<PreparedStart['resume']>> {
    const store = this.#o.interrupts
    const firstId = (answers[0] as ResumeItem).interrupt_id
    const chains = store === undefined ? [] : await store.inSession(sessionId)
    const chain = chains.find((c) => c.interrupts.some((i) => i.id === firstId))
    if (chain === undefined || (!admin && chain.owner_key !== who.id) || chain.agent_id !== agentId) throw new AH_ERR_INTERRUPT_NOT_FOUND(firstId)
    const seen = new Set<string>()
    const taken: Array<{ interrupt: InterruptRecord, value: unknown }> = []
    for (const [n, answer] of answers.entries()) {
      const path = `/payload/payload/resume/${n}/interrupt_id`
      if (seen.has(answer.interrupt_id)) throw withDetails(new AH_ERR_VALIDATION(`Invalid request: ${path} answers interrupt ${answer.interrupt_id} twice`), { errors: [{ path, message: 'must not repeat an interrupt' }] })
      seen.add(answer.interrupt_id)
      const interrupt = chain.interrupts.find((i) => i.id === answer.interrupt_id)
      if (interrupt === undefined) {
        if (chains.some((c) => c.interrupts.some((i) => i.id === answer.interrupt_id))) throw withDetails(new AH_ERR_VALIDATION(`Invalid request: ${path} is another run's interrupt: a resume answers one run's`), { errors: [{ path, message: 'must be an interrupt of the same run as the first answer' }] })
        throw new AH_ERR_INTERRUPT_NOT_FOUND(answer.interrupt_id)
      }
      taken.push({ interrupt, value: answer.value })
    }
    // this request took these answers before, and its run was never stored (a crash, a refusal): it goes on
    if (taken.every(({ interrupt }) => interrupt.answer?.request === requestId) && chain.last_run === requestId) return { chain, answers: [] }
    const now = Date.now()
    // a question of the run that expired, answered now or not: the run is over
    const lapsed = chain.interrupts.find((i) => i.answer === undefined && i.expires_at <= now)
    if (chain.state === 'expired' || (chain.state === 'waiting' && lapsed !== undefined)) {
      const which = taken.find(({ interrupt }) => interrupt.expires_at <= now)?.interrupt ?? lapsed ?? (taken[0] as { interrupt: InterruptRecord }).interrupt
      if (chain.state === 'waiting') await store?.settle(chain.run_key, 'expired', now)
      throw new AH_ERR_INTERRUPT_EXPIRED(which.id, new Date(which.expires_at).toISOString())
    }
    for (const { interrupt } of taken) {
      if (interrupt.answer !== undefined) throw new AH_ERR_INTERRUPT_CLOSED(interrupt.id, 'it was answered already')
      if (chain.state !== 'waiting') throw new AH_ERR_INTERRUPT_CLOSED(interrupt.id, chain.state === 'resuming' ? 'its run went on with another answer' : 'its run ended')
    }
    for (const [n, { interrupt, value }] of taken.entries()) {
      const errors = answerIssues(interrupt, value).map((e) => ({ path: `/payload/payload/resume/${n}${e.path}`, message: e.message }))
      if (errors.length > 0) throw withDetails(new AH_ERR_INTERRUPT_ANSWER_INVALID(interrupt.id, errors.slice(0, 3).map((e) => `${e.path} ${e.message}`).join('; ')), { errors })
    }
    return { chain, answers: taken }
  }

  /** Take a resume's answers (compare and set on the chain, their audit rows in the same write): the chain as the run goes on from it. */
  async #takeAnswers (resume: NonNullable<PreparedStart['resume']>, requestId: string, wireId: string, who: Identity, claimedUser: string, traceId: string): Promise<WaitingRun> {
    const { chain, answers } = resume
    if (answers.length === 0) return chain
    const now = Date.now()
    const given = new Map(answers.map(({ interrupt, value }) => [interrupt.id, value]))
    const interrupts = chain.interrupts.map((i) => given.has(i.id) ? { ...i, answer: { value: given.get(i.id), by: who.id, at: now, request: requestId } } : i)
    const next: WaitingRun = {
      ...chain,
      // questions left open: the chain still waits (another request may answer them now); else the run goes on
      state: openInterrupts({ interrupts }).length > 0 ? 'waiting' : 'resuming',
      version: chain.version + 1,
      last_run: requestId,
      updated_at: now,
      interrupts
    }
    const audit: AuditInput[] = answers.map(({ interrupt, value }) => ({
      actor: who.id,
      action: interrupt.kind === 'approval' ? ((value as { approved: boolean }).approved ? 'interrupt.approve' : 'interrupt.reject') : 'interrupt.answer',
      resource: `run:${chain.request_id}`,
      success: true,
      claimed_user: claimedUser,
      request_id: wireId,
      root_request_id: chain.request_id,
      trace_id: traceId,
      details: { interrupt_id: interrupt.id, kind: interrupt.kind, message: cutText(interrupt.message, 256), ...(interrupt.call !== undefined ? { call: interrupt.call } : {}), ...(interrupt.kind === 'approval' ? { answer: value as JsonObject } : {}) }
    }))
    if (!await (this.#o.interrupts as InterruptStore).take(next, audit)) throw new AH_ERR_INTERRUPT_CLOSED((answers[0] as { interrupt: InterruptRecord }).interrupt.id, 'another answer came first')
    return next
  }

  async #start ({ requestId, mode, agent }: PreparedRun, { envelope, resolved, hosted, capability, metadata, hash, who, admin, resume, lend }: PreparedStart, options: StartOptions): Promise<Submission> {
    const { ledger } = this.#o
    const chain = resume === undefined ? undefined : await this.#takeAnswers(resume, requestId, envelope.request_id, who, envelope.context.user.user_id, envelope.context.trace.trace_id)
    const replay = this.#o.interrupts === undefined ? undefined : new RunReplay(chain, this.#s.interruptExpiresS)
    if (chain !== undefined) this.#chains.set(requestId, chain)
    const run = new AssistRun({
      ...(replay !== undefined ? { replay, onSuspend: async () => { await this.#suspend(replay, requestId, envelope, resolved, agent.id, who.id) } } : {}),
      requestId,
      capability,
      log: options.log?.child !== undefined ? lazyChild(options.log as Parameters<typeof lazyChild>[0], { agent: agent.name, requestId, mode }) : options.log ?? this.#o.log,
      supportedEvents: resolved.capabilities.supported_events,
      onDisconnect: metadata.on_disconnect ?? this.#s.disconnectPolicy,
      maxOutputBytes: this.#s.maxOutputBytes,
      onFirstPacket: (seconds) => { this.#observers.tell('firstPacket', { agent: agent.name, mode, seconds }) },
      onUsage: (usage, cost) => {
        // the usage a metered backend is handing over was told with its model already
        if (!repeatsBackendUsage()) this.#observers.tell('usage', { agent: agent.name, tenant: tenantOf(who.id), model: UNKNOWN_MODEL, input: usage.input_tokens, output: usage.output_tokens, ...(cost !== undefined ? { cost } : {}) })
      },
      recorder: this.#recorder(requestId, envelope.request_id, resolved, agent.name, envelope.context.trace.trace_id, who.id)
    })
    const token = randomUUID()
    // an admin owns every session; anyone else claims it (or finds it theirs) in the same write
    const started = await ledger.start({
      request_id: requestId,
      envelope_hash: hash,
      envelope: JSON.stringify(envelope),
      session_id: resolved.session_id,
      agent_id: agent.id,
      main_stream_id: run.mainStreamId,
      owner_instance: this.#o.instanceId,
      owner_pid: process.pid,
      owner_key: who.id,
      lease_token: token,
      lease_expires_at: Date.now() + this.#s.leaseMs
    }, admin ? undefined : { sessionId: resolved.session_id, userId: envelope.context.user.user_id, keyId: who.id })
    // another key's session: 404, not 403, so that session ids cannot be probed
    if (started === 'not-yours') throw new AH_ERR_SESSION_NOT_FOUND(resolved.session_id)
    if (started === 'taken') {
      // another process started it between our look and our insert: join it
      return await this.#join(await ledger.get(requestId) as RunRecord, hash, mode, who, admin, resolved)
    }
    // the agent sees only the permissions its caller holds
    resolved.context = { ...resolved.context, permissions: resolved.context.permissions.filter((p) => grants(who.scopes, p)) }
    this.#launch(run, token, resolved, hosted, mode, envelope, metadata.timeout_ms, who, options.trace, lend)
    return { requestId, mode, outcome: 'started' }
  }

  async #join (known: RunRecord, hash: string, mode: DeliveryMode, who: Identity, admin: boolean, resolved: ResolvedAgentRequest): Promise<{ requestId: string, mode: DeliveryMode, outcome: 'joined' }> {
    if (!admin && await this.#o.ledger.sessionKey(resolved.session_id) !== who.id) {
      throw new AH_ERR_SESSION_NOT_FOUND(resolved.session_id)
    }
    if (known.envelope_hash !== hash) throw new AH_ERR_REQUEST_CONFLICT(known.request_id)
    return { requestId: known.request_id, mode, outcome: 'joined' }
  }

  /**
   * What the agent gets as `host`: the backends, the bus with its events owned by the run's caller
   * (and held to its agent list), the external A2A agents and the MCP tools it may call; and, apart
   * (never lent to the agent), those callers' ends for calls marked `require_approval`, which only
   * `RunReplay.host` makes once a person approved them. Backends its caller lent (`lend`) come first.
   */
  #host (agent: string, owner: string, ownerAgents: ReadonlySet<string> | null, ownerScopes: ReadonlySet<string>, traceId: string, span: Span | undefined, run: { requestId: string, rootRequestId: string, sessionId: string, user: string, signal: AbortSignal }, lend: PreparedStart['lend']): { host: AgentHost, gates: Omit<HostApprovals, 'ask'> } {
    const { backends, bus, tracer, budgets } = this.#o
    const tenant = tenantOf(owner)
    const hold = budgets?.enabled === true ? budgets.holder(owner) : undefined
    // every call's tokens are told with the model it used, whether or not the agent reports them
    const metered = (name: string): AgentProtocol => {
      const lent = lend?.get(name)
      const protocol = meteredBackend(lent ?? backends.backend(name), (usage, cost, model) => {
        this.#observers.tell('usage', { agent, tenant, model: model ?? UNKNOWN_MODEL, input: usage.input, output: usage.output, cost })
      })
      // the host's models are held to the caller's budgets; a lent one is its lender's
      return lent !== undefined || hold === undefined ? protocol : budgetedBackend(protocol, hold)
    }
    const backend = span === undefined || tracer === undefined ? metered : (name: string): AgentProtocol => tracedBackend(metered(name), tracer, span)
    // what the host lends this run: calls made on behalf of its caller, recorded in its events and given up with it
    const a2a = this.#o.a2a?.caller({ agent, owner, traceId, ...run, usage: (usage) => { this.#observers.tell('usage', { agent, tenant, ...usage }) } })
    const tools = this.#o.tools?.caller({ agent, owner, traceId, ...run })
    const gates = { ...(a2a !== undefined ? { a2a } : {}), ...(tools !== undefined ? { tools } : {}) }
    const lent = {
      ...(a2a !== undefined ? { a2a: { call: async (...args: Parameters<typeof a2a.call>) => await a2a.call(...args) } } : {}),
      ...(tools !== undefined ? { tools: { call: async (call: Parameters<typeof tools.call>[0]) => await tools.call(call) } } : {})
    }
    if (bus === undefined) return { host: { backend, ...lent }, gates }
    return {
      host: {
        backend,
        ...lent,
        bus: { publish: async (publication) => await bus.publish(publication, { source: `agent:${agent}`, owner_key: owner, owner_agents: ownerAgents === null ? null : [...ownerAgents], owner_scopes: [...ownerScopes], trace_id: traceId }) }
      },
      gates
    }
  }

  #launch (run: AssistRun, token: string, resolved: ResolvedAgentRequest, hosted: HostedAgent, mode: DeliveryMode, envelope: ServiceRequest, timeoutMs: number | undefined, who: Identity, trace: RunTrace | undefined, lend: PreparedStart['lend']): void {
    const requestId = run.requestId
    this.#tokens.set(requestId, token)
    const owner = who.id
    const limit = this.#s.runTimeoutMs
    const timeout = timeoutMs === undefined ? limit : limit === 0 ? timeoutMs : Math.min(timeoutMs, limit)
    if (timeout > 0) run.expireAfter(timeout)
    const session = this.#o.sessions.open(resolved.session_id, envelope.context.user)
    const metadata = hosted.manifest.metadata
    const span = this.#o.tracer === undefined ? undefined : startRunSpan(this.#o.tracer, trace, { agent: metadata, mode, requestId: envelope.request_id, envelopeTrace: envelope.context.trace })
    const finished = run.ended.then(async () => await this.#finish(run, token, resolved, hosted, envelope, mode, owner))
    // the run's span ends once the run is recorded
    const answer = span === undefined ? finished : finished.finally(() => { endRunSpan(span, run) })
    this.#answers.set(requestId, answer)
    const { host, gates } = this.#host(metadata.name, owner, who.agents, who.scopes, envelope.context.trace.trace_id, span,
      { requestId: envelope.request_id, rootRequestId: resolved.root_request_id, sessionId: resolved.session_id, user: envelope.context.user.user_id, signal: run.signal }, lend)
    const open = run.replay?.chain === undefined ? [] : openInterrupts(run.replay.chain)
    // questions still open after this request's answers: asked again, and the agent waits for all of them
    const agent: Agent = open.length > 0 ? { manifest: hosted.agent.manifest, assist: async () => { await run.askAgain(open) } } : hosted.agent
    // calls marked require_approval ask the person through the run (without an interrupt store they are refused)
    const settled = run.execute(agent, resolved, session, run.replay?.host(host, { ...gates, ask: run.approval.bind(run) }) ?? host)
    this.registry.track(run, Promise.all([settled, answer]).then(() => {
      this.#answers.delete(requestId)
      this.#tokens.delete(requestId)
    }))
  }

  /**
   * The JSON answer of a run: waits for a live one (counting as one of its clients: when `signal`
   * fires the run's disconnect policy applies), waits for one owned elsewhere, and recovers one
   * whose owner's lease lapsed.
   * @throws AH_ERR_RUN_NOT_FOUND for an unknown request id; the signal's reason when it fires
   */
  async answer (requestId: string, options: { signal?: AbortSignal } = {}): Promise<RunAnswer> {
    const live = this.registry.get(requestId)
    const pending = this.#answers.get(requestId)
    if (live !== undefined && pending !== undefined) {
      live.wait()
      const gone = (): void => { live.detach(undefined, 'client_disconnected') }
      options.signal?.addEventListener('abort', gone, { once: true })
      try {
        return await pending ?? await storedAnswer(await this.#o.ledger.get(requestId) as RunRecord, this.#o.ledger)
      } finally {
        options.signal?.removeEventListener('abort', gone)
      }
    }
    for (;;) {
      const record = await this.#current(requestId)
      if (record === undefined) throw new AH_ERR_RUN_NOT_FOUND(requestId)
      if (record.state === 'ended') return await storedAnswer(record, this.#o.ledger)
      options.signal?.throwIfAborted()
      await this.#o.ledger.journalGrew(record, this.#s.pollMs, options.signal)
      options.signal?.throwIfAborted()
    }
  }

  /**
   * A run's packets for one client, in order, in batches of what is ready (never empty): the
   * journal after `after`, then the live run until its main stream's CLOSE (the last frame of the
   * last batch, `final`). The same iterator serves a fresh run, a second client, a resume, and a
   * run owned by another process. A resume cursor for a request the journal no longer holds yields
   * ERROR `resume_gap` and CLOSE. Leaving the loop (or `signal`) detaches the client.
   * Ends early, without the final CLOSE, when the client could not keep up.
   */
  async * follow (requestId: string, options: FollowOptions = {}): AsyncGenerator<Frame[], void, undefined> {
    const store = this.#o.ledger
    const signal = options.signal
    const running = this.registry.get(requestId)
    let record = running === undefined ? await store.get(requestId) : undefined
    if (running === undefined && record === undefined) {
      if (options.after === undefined) throw new AH_ERR_RUN_NOT_FOUND(requestId)
      const { streamId } = options.after
      yield resumeGapPackets(streamId, options.after.seq).map((packet) => ({ ord: 0, stream_id: packet.stream_id, seq: packet.seq, json: JSON.stringify(packet), final: packet.stream_id === streamId && packet.op === 'CLOSE' }))
      return
    }
    const main = running?.mainStreamId ?? (record as RunRecord).main_stream_id
    let ord = options.after?.seq === undefined ? 0 : (await store.ordOf(requestId, options.after.streamId, options.after.seq) ?? 0)
    const frameOf = (row: { ord: number, stream_id: string, seq: number | null, frame: string }): Frame =>
      ({ ord: row.ord, stream_id: row.stream_id, seq: row.seq as number, json: row.frame, final: row.stream_id === main && isCloseFrame(row.frame) })
    // a client that has everything the live run has delivered (a fresh run's first client) skips the journal
    let fresh = (running?.written ?? Infinity) <= ord
    for (;;) {
      const skip = fresh
      fresh = false
      // the journal first, a page at a time, as fast as the client takes it
      for (let rows = skip ? [] : await store.rows(requestId, ord, 256); rows.length > 0; rows = await store.rows(requestId, ord, 256)) {
        const page: Frame[] = []
        let final = false
        for (const row of rows) {
          ord = row.ord
          if (row.seq === null) continue
          const frame = frameOf(row)
          page.push(frame)
          if ((final = frame.final)) break
        }
        if (page.length > 0) yield page
        if (final || signal?.aborted === true) return
      }
      if (signal?.aborted === true) return
      const live = this.registry.get(requestId)
      if (live !== undefined && !live.lost && live.endReason === undefined) {
        // what was journaled since the last page, then the live run, attached with no await between
        // the last read and the attach, so no packet falls between (one delivered while the journal
        // was being read is in the journal: read again)
        let tail: JournalRow[] = []
        while (live.written > (tail.at(-1)?.ord ?? ord)) {
          const more = await store.rows(requestId, tail.at(-1)?.ord ?? ord)
          if (more.length === 0) break
          tail = tail.concat(more)
        }
        const queue: FrameQueue = new FrameQueue(main, Math.min(64 * 1024, Math.floor(this.#s.followerMaxBytes / 2)), this.#s.followerMaxBytes, () => {
          live.detach(queue, 'slow_consumer')
          options.onSlow?.()
        })
        live.attach(queue, tail.at(-1)?.ord ?? ord)
        const leave = (): void => { live.detach(queue, signal?.reason === 'slow_consumer' ? 'slow_consumer' : 'client_disconnected'); queue.close() }
        signal?.addEventListener('abort', leave, { once: true })
        try {
          const journaled: Frame[] = []
          for (const row of tail) {
            ord = row.ord
            if (row.seq !== null) journaled.push(frameOf(row))
          }
          if (journaled.length > 0) yield journaled
          for (let frames = await queue.take(); frames !== undefined; frames = await queue.take()) {
            ord = (frames.at(-1) as Frame).ord
            const last = frames.findIndex((frame) => frame.final)
            if (last >= 0) {
              yield frames.slice(0, last + 1)
              return
            }
            yield frames
          }
          if (queue.ended === 'overflow') return
        } finally {
          signal?.removeEventListener('abort', leave)
          if (queue.ended === undefined) leave()
        }
        if ((signal as AbortSignal | undefined)?.aborted === true) return
        continue
      }
      record = await this.#current(requestId)
      if (record === undefined || (record.state === 'ended' && (await store.rows(requestId, ord, 1)).length === 0)) return
      if (record.state === 'running') await store.journalGrew(record, this.#s.pollMs, signal)
    }
  }

  /**
   * Cancel a running run, wherever it runs. Only the caller who submitted it, or one who sees it (a
   * tenant's admin, the host's admin: `auth/scopes.ts:viewerOf`), may; for anyone else it does not
   * exist (404, as for sessions).
   * @throws AH_ERR_RUN_NOT_FOUND
   */
  async cancel (wireId: string, identity: Identity): Promise<void> {
    const viewer = viewerOf(identity)
    const others = !('owner' in viewer)
    // an admin may cancel the running run of this id of anyone it sees; anyone else only their own
    const { ledger } = this.#o
    const record = await ledger.get(runKey(identity.id, wireId)) ?? (others ? (await ledger.runningByRequestId(wireId)).find((r) => sees(viewer, r.owner_key)) : undefined)
    const mine = record !== undefined && sees(viewer, record.owner_key)
    if (!mine) {
      // an admin may also end another caller's run that waits for an answer, named by the request that asked
      const waiting = others && record === undefined ? (await this.#o.interrupts?.waitingByRequestId(wireId))?.find((chain) => sees(viewer, chain.owner_key)) : undefined
      if (waiting === undefined) throw new AH_ERR_RUN_NOT_FOUND(wireId)
      await this.#o.interrupts?.settle(waiting.run_key, 'ended', Date.now())
      await ledger.audit({ actor: identity.id, action: 'assist.cancel', resource: waiting.agent_id, success: true, request_id: wireId, details: { waiting: true } })
      return
    }
    const requestId = record.request_id
    const audit = { actor: identity.id, action: 'assist.cancel', resource: record.agent_id, success: true, request_id: wireId }
    if (record.state !== 'running') {
      // a run that waits for an answer: its questions take none from now on
      const store = this.#o.interrupts
      const chain = store === undefined ? undefined : (await store.byLastRun(requestId) ?? await store.get(requestId))
      if (chain?.state !== 'waiting') throw new AH_ERR_RUN_NOT_FOUND(wireId)
      await store?.settle(chain.run_key, 'ended', Date.now())
      await ledger.audit({ ...audit, details: { waiting: true } })
      return
    }
    const live = this.registry.get(requestId)
    if (live !== undefined) {
      if (!live.cancel()) throw new AH_ERR_RUN_NOT_FOUND(wireId)
      await ledger.audit(audit)
      return
    }
    if (!await ledger.requestCancel(requestId, audit)) throw new AH_ERR_RUN_NOT_FOUND(wireId)
  }

  /** Cancel this process's live runs of a session and wait until they are recorded (before erasure). */
  async cancelSession (sessionId: string): Promise<void> {
    const pending: Array<Promise<unknown>> = []
    for (const run of this.registry.list()) {
      if ((await this.#o.ledger.get(run.requestId))?.session_id !== sessionId) continue
      run.cancel()
      const answer = this.#answers.get(run.requestId)
      if (answer !== undefined) pending.push(answer)
    }
    await Promise.all(pending)
  }

  /** Recover every run whose lease has lapsed (boot, and each heartbeat). Returns how many this call recovered. */
  async recoverExpired (): Promise<number> {
    let n = 0
    for (const record of await this.#o.ledger.expired(Date.now())) {
      if (this.registry.has(record.request_id)) continue
      if ((await recoverRun(this.#o.ledger, record.request_id, SUMMARY_BYTES)).recovered) {
        n++
        this.#o.log.warn({ requestId: record.request_id }, 'recovered a run whose owner\'s lease lapsed')
      }
    }
    return n
  }

  /**
   * Begin shutdown: new runs are refused, every open run gets its shutdown packets and its agent
   * its abort; resolves once every run is recorded and every agent has returned, or after
   * `graceMs`, whichever is first (an agent that ignores its abort cannot hold the process).
   */
  async shutdown (graceMs: number): Promise<void> {
    clearInterval(this.#timer)
    await this.#ticking
    this.registry.close()
    // a run being stored now starts after this (and is ended at once): its end must be recorded too
    await Promise.allSettled(this.#starting)
    await this.registry.shutdown(graceMs)
  }

  /** The run record, recovering it first when its lease has lapsed (the follower of an orphan finishes it). */
  async #current (requestId: string): Promise<RunRecord | undefined> {
    const record = await this.#o.ledger.get(requestId)
    if (record === undefined || record.state !== 'running' || this.registry.has(requestId)) return record
    if (record.lease_expires_at !== null && record.lease_expires_at >= Date.now()) return record
    return await retryBusy(async () => (await recoverRun(this.#o.ledger, requestId, SUMMARY_BYTES)).record, this.#s.writeBudgetMs)
  }

  /** Renew this process's leases, act on cancel requests and lost leases, recover orphans (one beat at a time). */
  #tick (): void {
    this.#ticking ??= this.#beat().finally(() => { this.#ticking = undefined })
  }

  async #beat (): Promise<void> {
    try {
      const held = [...this.#tokens].filter(([id]) => this.registry.get(id)?.endReason === undefined)
      if (held.length > 0) {
        const { lost, cancelled } = await this.#o.ledger.renew(held, Date.now() + this.#s.leaseMs)
        for (const id of lost) this.registry.get(id)?.leaseLost()
        for (const id of cancelled) this.registry.get(id)?.cancel()
      }
      await this.recoverExpired()
    } catch (err) {
      // a lock held elsewhere: the next beat tries again (a lease outlives two missed beats)
      if (!isBusy(err)) this.#o.log.error({ err }, 'run heartbeat failed')
    }
  }

  /** The run's link to storage: packets are queued per run and written in one transaction per turn. */
  #recorder (requestId: string, wireId: string, resolved: ResolvedAgentRequest, agentName: string, traceId: string, owner: string): ConstructorParameters<typeof AssistRun>[0]['recorder'] {
    const { ledger } = this.#o
    const tokenOf = (): string => this.#tokens.get(requestId) ?? ''
    return {
      packet: (ord, streamId, seq, json) => { ledger.append(requestId, tokenOf(), { ord, stream_id: streamId, seq, frame: json }) },
      event: async (kind, event) => {
        await ledger.event({
          kind,
          id: String(kind === 'cloudevent' ? event.id : `${String(event.run_id)}:${String(event.node_id)}:${String(event.timestamp)}`),
          type: String(kind === 'cloudevent' ? event.type : event.event_type),
          source: kind === 'cloudevent' ? String(event.source) : `agents/${agentName}`,
          time: String(kind === 'cloudevent' ? (event.time ?? new Date().toISOString()) : event.timestamp),
          session_id: resolved.session_id,
          request_id: wireId,
          trace_id: traceId,
          owner_key: owner,
          event
        })
      },
      flush: async () => {
        for (const id of await ledger.flush(requestId)) this.registry.get(id)?.leaseLost()
      },
      commitNow: () => ledger.commitNow(),
      audit: async (actor, action, resource, success) => {
        // the row's actor is the caller; who the agent says acted is its claim
        await ledger.audit({ actor: owner, action, resource, success, claimed_user: resolved.context.user.user_id, request_id: wireId, root_request_id: resolved.root_request_id, trace_id: traceId, details: { by: `agent:${agentName}`, agent_says_actor: cutText(actor, 256) } })
      }
    }
  }

  /** Store the chain of a run that stops to ask (before its CLOSE reaches anyone, so an answer always finds it). */
  async #suspend (replay: RunReplay, requestId: string, envelope: ServiceRequest, resolved: ResolvedAgentRequest, agentId: string, owner: string): Promise<void> {
    const now = Date.now()
    const base = replay.chain
    // a run that only asks again what its answers left open: the chain waits as it was stored
    if (base !== undefined && base.state === 'waiting') return
    const chain: WaitingRun = base === undefined
      ? { run_key: requestId, request_id: envelope.request_id, owner_key: owner, session_id: resolved.session_id, agent_id: agentId, state: 'waiting', version: 1, last_run: requestId, envelope: JSON.stringify(envelope), interrupts: replay.interrupts, memo: replay.memo, created_at: now, updated_at: now }
      : { ...base, state: 'waiting', version: base.version + 1, last_run: requestId, interrupts: replay.interrupts, memo: replay.memo, updated_at: now }
    if (!await retryBusy(async () => await (this.#o.interrupts as InterruptStore).save(chain), this.#s.writeBudgetMs)) throw new Error(`the chain of run ${chain.request_id} changed under it`)
  }

  /** Store the answer, record a summary in the session and audit the call, in one write fenced by the lease. */
  async #finish (run: AssistRun, token: string, resolved: ResolvedAgentRequest, hosted: HostedAgent, envelope: ServiceRequest, mode: DeliveryMode, owner: string): Promise<RunAnswer | undefined> {
    const reason = run.endReason ?? 'aborted'
    const metrics = { latency_ms: Math.round((performance.now() - run.startedAt) * 1000) / 1000, packets: run.packets, ...run.usage }
    const answer = answerOf({
      requestId: envelope.request_id,
      reason,
      produced: run.transcript.produced,
      ...(run.fatalError !== undefined ? { fatal: run.fatalError } : {}),
      ...(run.transcript.lastError !== undefined ? { lastError: run.transcript.lastError } : {}),
      metrics
    })
    if (reason === 'input_required' && answer.status === 200) answer.body.interrupts = run.interrupts.map(wireInterrupt)
    const output: JsonObject | undefined = reason === 'done' && run.result !== undefined ? run.result : undefined
    const success = reason === 'done' && run.fatalError === undefined
    const record = async (): Promise<boolean> => {
      const summary = output !== undefined && JSON.stringify(output).length <= SUMMARY_BYTES ? output : run.transcript.summary()
      const { ended, lost } = await this.#o.ledger.finish({ requestId: run.requestId, token, reason, status: answer.status, response: answer.body }, {
        request_id: envelope.request_id,
        session_id: resolved.session_id,
        user_id: envelope.context.user.user_id,
        agent_id: hosted.manifest.metadata.id,
        agent_request_id: resolved.request_id,
        root_request_id: resolved.root_request_id,
        ...(resolved.parent_request_id !== undefined ? { parent_request_id: resolved.parent_request_id } : {}),
        timestamp: resolved.timestamp,
        status: reason,
        input: resolved.payload,
        output: summary
      }, success && this.#s.auditRuns === 'failed'
        ? undefined
        : {
            actor: owner,
            claimed_user: envelope.context.user.user_id,
            action: 'assist',
            resource: hosted.manifest.metadata.id,
            success,
            request_id: envelope.request_id,
            root_request_id: resolved.root_request_id,
            trace_id: envelope.context.trace.trace_id,
            details: { agent: hosted.manifest.metadata.name, end: reason, packets: run.packets }
          })
      for (const id of lost) if (id !== run.requestId) this.registry.get(id)?.leaseLost()
      return ended
    }
    let ours = !run.lost
    let unreachable = false
    if (ours) {
      // the lock may be held elsewhere for longer than one budget: keep trying, the lease fences a late write
      for (;;) {
        try {
          ours = await record()
          break
        } catch (err) {
          if (!isBusy((err as { cause?: unknown }).cause)) { run.leaseLost(); this.#o.log.error({ err, requestId: run.requestId }, 'recording the run failed'); ours = false; unreachable = isUnavailable(err); break }
        }
      }
    }
    const chain = this.#chains.get(run.requestId)
    this.#chains.delete(run.requestId)
    if (chain !== undefined && reason !== 'input_required' && ours) {
      try {
        await this.#o.interrupts?.settle(chain.run_key, 'ended', Date.now())
      } catch (err) {
        this.#o.log.error({ err, requestId: run.requestId }, 'marking the run\'s questions ended failed')
      }
    }
    run.log.info({ reason, packets: run.packets, recorded: ours }, 'run ended')
    this.#o.onRunEnded?.({ agent: hosted.manifest.metadata.name, mode, reason, seconds: (performance.now() - run.startedAt) / 1000 })
    // a run whose lease was taken ended in the journal of whoever recovered it, not with its own error
    const error = run.fatalError?.code ?? (reason === 'shutdown' ? 'shutting_down' : undefined)
    if (ours && error !== undefined) this.#observers.tell('failed', { agent: hosted.manifest.metadata.name, mode, code: error })
    if (!ours) {
      let stored: RunRecord | undefined
      try {
        stored = await this.#o.ledger.get(run.requestId)
      } catch (err) {
        this.#o.log.error({ err, requestId: run.requestId }, 'reading the run\'s stored answer failed')
        unreachable ||= isUnavailable(err)
      }
      if (stored?.state === 'ended') return await storedAnswer(stored, this.#o.ledger)
      // the database went away before the answer was stored: acknowledged now, it would be lost (a
      // retry would get the answer of the run's recovery); the retry gets whatever is stored by then
      if (unreachable) return { status: 503, body: errorBody(new AH_ERR_STORAGE_UNAVAILABLE()) }
    }
    if (answer.status !== 200) return answer
    const body = { ...answer.body }
    delete body.metrics
    // past the transcript's bound the whole output is in the journal only: rebuilt from it if a client asks (answer())
    if (output === undefined && run.transcript.truncated && ours) return undefined
    return { status: 200, body: { ...body, output: output ?? run.transcript.build(), metrics } }
  }
}
