import { randomUUID } from 'node:crypto'
import { AH_ERR_REMOTE_CALL_INVALID, AH_ERR_RUN_ABORTED } from '../errors.js'
import { lazySchema, toIssues } from '../agents/json-schema.js'
import { A2ARequest, type A2ACallOptions, type A2ACaller, type A2AResponse } from '../protocol/a2a-client.js'
import type { HostCallContext } from '../backends/protocol.js'
import type { RunLedger } from '../storage/run-ledger.js'
import { cutText } from '../storage/audit-text.js'
import { AgentCards, reasonOf, type AgentCardOptions } from './agent-cards.js'
import { requiresApproval, type A2AAgentConfig } from './agents-file.js'
import { answerOf, refusal, type CallFacts } from './call-answer.js'
import { callRemote, type RemoteOutcome } from './remote-call.js'
import { usageOf } from './remote-content.js'

/** The run an `A2ACaller` calls for (`HostCallContext`), and where the remote's billing goes. */
export interface A2ACallContext extends HostCallContext {
  /** Told the tokens and cost a remote's billing reports (the run's usage metrics), with the model `a2a:<agent>`. */
  usage?: (usage: { model: string, input: number, output: number, cost?: number }) => void
}

/**
 * One run's caller of the external agents, with what a person's approval of a call needs (the
 * engine lends the agent only `call`; `assist/replay.ts:RunReplay.host` asks the person). `call`
 * refuses (`failure`, `approval_required`) a call of an agent marked `require_approval`: only
 * `approved` makes one.
 */
export interface RunA2ACaller extends A2ACaller {
  /** Whether this call waits for a person's approval: a well-formed call the file lets through (the agent, this caller, the capability) of an agent marked `require_approval`. */
  needsApproval(agent: unknown, capability: unknown, payload: unknown, options?: unknown): boolean
  /** Make a call a person approved, as `call` makes any. */
  approved(agent: string, capability: string, payload: Record<string, unknown>, options?: A2ACallOptions): Promise<A2AResponse>
  /** Answer a call a person rejected: a `failure` (`approval_rejected: <reason>`) that never reached the agent, recorded as every refusal. */
  rejected(agent: string, capability: string, reason: string): Promise<A2AResponse>
}

/** What the engine needs: a caller of the configured external agents for each run. */
export interface A2ACallers {
  caller(context: A2ACallContext): RunA2ACaller
}

/** A person's answer to a call that waits for one: approved, or rejected and why. */
type Approval = { approved: true } | { approved: false, reason: string }

/** The minimal logger the registry writes to (pino's shape). */
export interface RemoteAgentsLog {
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
}

export interface RemoteAgentsOptions {
  agents: readonly A2AAgentConfig[]
  /** Where each call's event and audit row are written, in one transaction. */
  ledger: Pick<RunLedger, 'record'>
  log: RemoteAgentsLog
  cards?: AgentCardOptions
}

const checkRequest = lazySchema<A2ARequest>(A2ARequest)

/** The seed's A2ARequest of a call, or AH_ERR_REMOTE_CALL_INVALID naming what is wrong with it. */
function requestOf (agent: unknown, capability: unknown, payload: unknown, options: unknown): A2ARequest & { options: A2ACallOptions } {
  const problems: string[] = []
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new AH_ERR_REMOTE_CALL_INVALID('options must be an object ({ timeout, signal, onUpdate, callback_url })')
  }
  const given = options as A2ACallOptions
  const request = {
    agent_id: agent,
    capability,
    payload,
    ...(given.timeout !== undefined ? { timeout: given.timeout } : {}),
    ...(given.callback_url !== undefined ? { callback_url: given.callback_url } : {})
  }
  if (!checkRequest(request)) problems.push(...toIssues(checkRequest.errors).map((i) => `${i.path} ${i.message}`))
  else if (request.callback_url !== undefined && !/^https?:\/\//i.test(String(request.callback_url))) problems.push('/callback_url must be an http or https URL')
  if (given.signal !== undefined && !(given.signal instanceof AbortSignal)) problems.push('signal must be an AbortSignal')
  if (given.onUpdate !== undefined && typeof given.onUpdate !== 'function') problems.push('onUpdate must be a function')
  if (problems.length > 0) throw new AH_ERR_REMOTE_CALL_INVALID(problems.join('; '))
  return { ...(request as A2ARequest), options: given }
}

/**
 * The external A2A agents of A2A_AGENTS_FILE, called on behalf of runs (`host.a2a`). A call is
 * refused (`failure`, never a throw) when the agent is not in the file, the calling agent is not
 * among its `callers`, the capability is not among its `capabilities` or its card's skills, or its
 * card cannot be fetched or is refused (and, for a task whose owner may not have its agent call,
 * `forbidden`). Every call, refused or made, is recorded: an `a2a.call` CloudEvent in the run's (or
 * task's: its `task_id`) events, an `a2a.call` audit row (resource `<agent>.<capability>`; a task's
 * in `details.task`), and the tokens and cost its billing reports in the run's usage metrics.
 */
export class RemoteAgents implements A2ACallers {
  readonly #agents: ReadonlyMap<string, A2AAgentConfig>
  readonly #cards: AgentCards
  readonly #o: RemoteAgentsOptions
  readonly #closing = new AbortController()
  readonly #calls = new Set<Promise<unknown>>()

  constructor (options: RemoteAgentsOptions) {
    this.#o = options
    this.#agents = new Map(options.agents.map((a) => [a.name, a]))
    this.#cards = new AgentCards(options.cards)
  }

  /** The names agents call the configured agents by. */
  get names (): string[] {
    return [...this.#agents.keys()]
  }

  caller (context: A2ACallContext): RunA2ACaller {
    const tracked = async (agent: string, capability: string, payload: Record<string, unknown>, options: A2ACallOptions, approval?: Approval): Promise<A2AResponse> => {
      const call = this.#call(context, agent, capability, payload, options, approval)
      this.#calls.add(call)
      try {
        return await call
      } finally {
        this.#calls.delete(call)
      }
    }
    return {
      call: async (agent, capability, payload, options = {}) => await tracked(agent, capability, payload, options),
      needsApproval: (agent, capability, payload, options = {}) => {
        try {
          requestOf(agent, capability, payload, options)
        } catch {
          return false
        }
        const config = this.#agents.get(agent as string)
        return config !== undefined && requiresApproval(config) && (config.callers === undefined || config.callers.includes(context.agent)) && config.capabilities.includes(capability as string)
      },
      approved: async (agent, capability, payload, options = {}) => await tracked(agent, capability, payload, options, { approved: true }),
      rejected: async (agent, capability, reason) => {
        const response = refusal({ agent, callId: randomUUID(), capability, durationMs: 0 }, `approval_rejected: ${reason}`)
        return await this.#record(context, response)
      }
    }
  }

  /** Give up every call still going (their remote tasks are cancelled) and forget the cards. */
  async close (): Promise<void> {
    this.#closing.abort(new AH_ERR_RUN_ABORTED('shutdown'))
    await Promise.allSettled([...this.#calls])
    this.#cards.clear()
  }

  async #call (context: A2ACallContext, agent: string, capability: string, payload: Record<string, unknown>, options: A2ACallOptions, approval?: Approval): Promise<A2AResponse> {
    const request = requestOf(agent, capability, payload, options)
    const callId = randomUUID()
    const started = performance.now()
    const facts = (): CallFacts => ({ agent, callId, capability, durationMs: performance.now() - started })
    const signal = AbortSignal.any([context.signal, this.#closing.signal, ...(options.signal !== undefined ? [options.signal] : [])])
    const refuse = async (reason: string): Promise<A2AResponse> => await this.#record(context, refusal(facts(), reason))

    if (context.forbidden !== undefined) return await refuse(`forbidden: ${context.forbidden}`)
    const config = this.#agents.get(agent)
    if (config === undefined) {
      return await refuse(`no external agent "${agent}" is configured (A2A_AGENTS_FILE)${this.#agents.size > 0 ? `; there are: ${this.names.join(', ')}` : ''}`)
    }
    if (config.callers !== undefined && !config.callers.includes(context.agent)) {
      return await refuse(`agent "${context.agent}" may not call "${agent}" (its callers in A2A_AGENTS_FILE: ${config.callers.join(', ')})`)
    }
    if (!config.capabilities.includes(capability)) {
      return await refuse(`"${capability}" is not a capability agents may ask of "${agent}" (A2A_AGENTS_FILE allows: ${config.capabilities.join(', ')})`)
    }
    if (approval === undefined && requiresApproval(config)) {
      return await refuse(`approval_required: calls of "${agent}" wait for a person's approval (require_approval in A2A_AGENTS_FILE), which this ${context.taskId !== undefined ? 'task' : 'run'} cannot ask`)
    }
    const stopped = async (reason: unknown): Promise<never> => {
      await this.#record(context, refusal(facts(), `the call was stopped: ${reasonOf(reason)}`))
      throw reason
    }
    let remote
    try {
      remote = await this.#cards.get(config, signal)
    } catch (err) {
      if (signal.aborted) return await stopped(signal.reason)
      return await refuse(`"${agent}" cannot be called: ${reasonOf(err)}`)
    }
    const skills = remote.card.skills ?? []
    if (!skills.some((s) => s.id === capability)) {
      return await refuse(`"${agent}" offers no skill "${capability}" (its card's skills: ${skills.map((s) => s.id).join(', ') || 'none'})`)
    }
    if (request.callback_url != null && remote.card.capabilities?.pushNotifications !== true) {
      return await refuse(`"${agent}" does not send push notifications (its card), so callback_url cannot be used`)
    }
    if (signal.aborted) return await stopped(signal.reason)
    const timeoutS = request.timeout ?? config.timeoutS
    const outcome: RemoteOutcome = await callRemote({
      remote,
      callId,
      capability,
      payload,
      ...(request.callback_url != null ? { callbackUrl: request.callback_url } : {}),
      timeoutMs: timeoutS * 1000,
      signal,
      ...(options.onUpdate !== undefined ? { onUpdate: options.onUpdate } : {})
    })
    const response = await this.#record(context, answerOf(facts(), outcome, timeoutS))
    if (outcome.end === 'aborted') throw outcome.reason
    if (outcome.end === 'update_failed') throw outcome.error
    return response
  }

  /** Record a call's answer (the run's event, the audit row, the usage it reports) and return it. A record that cannot be written is logged, not failed. */
  async #record (context: A2ACallContext, response: A2AResponse): Promise<A2AResponse> {
    const metadata = response.metadata as { capability: string, duration_ms: number, error?: string, task_id?: string, state?: string, cancelled?: boolean }
    const resource = cutText(`${response.agent_id}.${metadata.capability}`, 512)
    const data = {
      caller: context.agent,
      agent: response.agent_id,
      capability: metadata.capability,
      request_id: response.request_id,
      status: response.status,
      duration_ms: metadata.duration_ms,
      ...(metadata.task_id !== undefined ? { task_id: metadata.task_id, state: metadata.state } : {}),
      ...(metadata.cancelled !== undefined ? { cancelled: metadata.cancelled } : {}),
      ...(metadata.error !== undefined ? { error: metadata.error } : {}),
      ...(response.billing != null ? { billing: response.billing } : {})
    }
    const ids = { requestId: context.requestId, taskId: context.taskId }
    this.#o.log.info({ ...ids, a2a: data }, 'a2a call')
    const time = new Date().toISOString()
    try {
      await this.#o.ledger.record({
        kind: 'cloudevent',
        id: response.request_id,
        type: 'a2a.call',
        source: 'agent-host/a2a-client',
        time,
        session_id: context.sessionId,
        request_id: context.requestId,
        trace_id: context.traceId,
        task_id: context.taskId,
        owner_key: context.owner,
        event: { specversion: '1.0', id: response.request_id, source: 'agent-host/a2a-client', type: 'a2a.call', subject: resource, time, datacontenttype: 'application/json', data }
      }, {
        actor: context.owner,
        action: 'a2a.call',
        resource,
        success: response.status === 'success',
        claimed_user: context.user ?? null,
        request_id: context.requestId ?? null,
        root_request_id: context.rootRequestId ?? null,
        trace_id: context.traceId ?? null,
        details: { by: `agent:${context.agent}`, ...(context.taskId !== undefined ? { task: context.taskId } : {}), call_id: response.request_id, status: response.status, ...(data.task_id !== undefined ? { task_id: data.task_id } : {}), ...(data.error !== undefined ? { error: cutText(data.error, 512) } : {}) }
      })
    } catch (err) {
      this.#o.log.warn({ err, ...ids, a2a: data }, 'an A2A call could not be recorded')
    }
    const usage = usageOf(response.billing ?? undefined)
    if (usage !== undefined) context.usage?.({ model: `a2a:${response.agent_id}`, ...usage })
    return response
  }
}
