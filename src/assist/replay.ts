import { createHash, randomUUID } from 'node:crypto'
import type { ValidateFunction } from 'ajv'
import { AH_ERR_EVENT_INVALID } from '../errors.js'
import type { AgentHost, AgentProtocol, ProtocolContext } from '../backends/protocol.js'
import type { InterruptRequest } from '../agents/contract.js'
import type { A2ACaller } from '../protocol/a2a-client.js'
import { ResumeAnswer, type Interrupt } from '../protocol/interrupts.js'
import { Type } from 'typebox'
import { AH_ERR_VALIDATION, withDetails } from '../errors.js'
import { lazySchema } from '../agents/json-schema.js'
import type { ToolCaller } from '../backends/protocol.js'
import { createAjv, toIssues, type SchemaIssue } from '../agents/json-schema.js'
import { canonicalJson } from '../storage/canonical-json.js'
import type { ApprovalAnswer, InterruptRecord, MemoEntry, WaitingRun } from '../storage/interrupts.js'
import type { RunToolCaller } from '../tools/tool-caller.js'
import type { RunA2ACaller } from '../a2a-client/remote-agents.js'

/**
 * What `RunReplay.host` needs to hold back the calls an operator marked `require_approval` (MCP
 * tools in MCP_SERVERS_FILE, external agents in A2A_AGENTS_FILE) until a person approves them.
 */
export interface HostApprovals {
  /** Ask the person (an `approval` interrupt whose `call` shows what would be called): the answer once given; until then the run suspends. */
  ask(message: string, call: Record<string, unknown>): Promise<ApprovalAnswer>
  /** The run's tools: which calls wait for approval, and their two ends. */
  tools?: Pick<RunToolCaller, 'needsApproval' | 'inScope' | 'approved' | 'rejected'>
  /** The run's external agents: likewise. */
  a2a?: Pick<RunA2ACaller, 'needsApproval' | 'approved' | 'rejected'>
}

/** One answer of a resume request. */
export type ResumeItem = ResumeAnswer

const checkResume = lazySchema<ResumeItem[]>(Type.Array(ResumeAnswer, { minItems: 1, maxItems: 64 }))

/**
 * The answers a request carries in `payload.payload.resume` (CAP: a resume of a run that stopped
 * to ask), or undefined when it carries none.
 * @throws AH_ERR_VALIDATION (400) when `resume` is there but not a list of `{ interrupt_id, value }`
 */
export function resumeOf (payload: Record<string, unknown>): ResumeItem[] | undefined {
  if (!('resume' in payload)) return undefined
  const resume = payload.resume
  if (checkResume(resume)) return resume
  const errors = toIssues(checkResume.errors, '/payload/payload/resume')
  throw withDetails(new AH_ERR_VALIDATION(`Invalid request: ${errors.slice(0, 3).map((e) => `${e.path} ${e.message}`).join('; ')}`), { errors })
}

/** What `response.interrupt()` resolves with: the input given, or an approval's answer. */
export type InterruptResult = unknown

/** The longest an interrupt may wait: a year. */
const MAX_EXPIRY_S = 366 * 24 * 3600

// the agents' schemas, never kept by Ajv (which holds every schema object it compiled: a schema
// literal made in each run's assist() would pile up), but by their JSON, the last 256 of them
const answerAjv = createAjv({ coerceTypes: false, useDefaults: false, addUsedSchema: false })
const compiled = new Map<string, ValidateFunction | { error: string }>()

/** The validator of an interrupt's schema, or why it is not a JSON Schema. */
function validatorOf (schema: Record<string, unknown>): ValidateFunction | { error: string } {
  const key = JSON.stringify(schema)
  let validate = compiled.get(key)
  if (validate !== undefined) {
    compiled.delete(key)
  } else {
    try {
      validate = answerAjv.compile(schema)
    } catch (err) {
      validate = { error: (err as Error).message }
    }
    answerAjv.removeSchema(schema)
    if (compiled.size >= 256) compiled.delete(compiled.keys().next().value as string)
  }
  compiled.set(key, validate)
  return validate
}

/** Check what an agent asks (a bad request is the agent's fault: AH_ERR_EVENT_INVALID). */
export function checkInterruptRequest (request: unknown, defaultExpiryS: number): Required<Pick<InterruptRequest, 'kind' | 'message'>> & { schema?: Record<string, unknown>, expiresInS: number, auth: boolean } {
  const r = request as Partial<InterruptRequest> | undefined
  if (typeof r !== 'object' || r === null) throw new AH_ERR_EVENT_INVALID('interrupt() takes { kind, message, schema?, expires_in_s? }')
  if (r.kind !== 'input' && r.kind !== 'approval') throw new AH_ERR_EVENT_INVALID('interrupt() kind must be "input" or "approval"')
  if (typeof r.message !== 'string' || r.message.length === 0) throw new AH_ERR_EVENT_INVALID('interrupt() message must be a non-empty string')
  if (r.schema !== undefined) {
    if (r.kind !== 'input') throw new AH_ERR_EVENT_INVALID('interrupt() takes a schema for kind "input" only')
    if (typeof r.schema !== 'object' || r.schema === null || Array.isArray(r.schema)) throw new AH_ERR_EVENT_INVALID('interrupt() schema must be a JSON Schema object')
    const validate = validatorOf(r.schema)
    if ('error' in validate) throw new AH_ERR_EVENT_INVALID(`interrupt() schema is not a valid JSON Schema: ${validate.error}`)
  }
  const expires = r.expires_in_s ?? defaultExpiryS
  if (!Number.isFinite(expires) || expires <= 0 || expires > MAX_EXPIRY_S) throw new AH_ERR_EVENT_INVALID(`interrupt() expires_in_s must be a number of seconds, more than 0 and at most ${MAX_EXPIRY_S}`)
  return { kind: r.kind, message: r.message, ...(r.schema !== undefined ? { schema: r.schema } : {}), expiresInS: expires, auth: r.auth === true }
}

/** Where an answer to `interrupt` is wrong (empty: it is right). */
export function answerIssues (interrupt: InterruptRecord, value: unknown): SchemaIssue[] {
  if (interrupt.kind === 'approval') {
    const v = value as Partial<ApprovalAnswer> | null
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return [{ path: '/value', message: 'must be { approved: boolean, comment?: string }' }]
    const issues: SchemaIssue[] = []
    if (typeof v.approved !== 'boolean') issues.push({ path: '/value/approved', message: 'must be a boolean' })
    if (v.comment !== undefined && (typeof v.comment !== 'string' || v.comment.length > 4000)) issues.push({ path: '/value/comment', message: 'must be a string of at most 4000 characters' })
    for (const key of Object.keys(v)) if (key !== 'approved' && key !== 'comment') issues.push({ path: `/value/${key}`, message: 'is not a field of an approval' })
    return issues
  }
  if (value === undefined) return [{ path: '/value', message: 'is required' }]
  if (interrupt.schema === undefined) return []
  const validate = validatorOf(interrupt.schema)
  if ('error' in validate) return [{ path: '/value', message: 'the interrupt\'s schema cannot be compiled' }]
  return validate(value) ? [] : toIssues(validate.errors, '/value')
}

/** An interrupt as the protocols show it. */
export function wireInterrupt (interrupt: InterruptRecord): Interrupt {
  return {
    id: interrupt.id,
    kind: interrupt.kind,
    message: interrupt.message,
    ...(interrupt.schema !== undefined ? { schema: interrupt.schema } : {}),
    ...(interrupt.call !== undefined ? { call: interrupt.call } : {}),
    ...(interrupt.reason !== undefined ? { reason: interrupt.reason } : {}),
    expires_at: new Date(interrupt.expires_at).toISOString()
  }
}

/** What an answered interrupt gives the agent: the input, or the approval's `{ approved, comment? }`. */
function resultOf (interrupt: InterruptRecord): InterruptResult {
  return interrupt.answer?.value
}

/** A call's memo key: what was called and with what. */
function keyOf (kind: string, what: unknown): string {
  return `${kind}:${createHash('sha256').update(canonicalJson(what as object)).digest('base64url')}`
}

/**
 * One execution's view of its chain (see `storage/interrupts.ts:WaitingRun`): the agent is entered
 * again from the start with the first request, and this replays what it did before the answer:
 * its n-th `interrupt()` gets the n-th question's answer, its host calls (backends' `send` and
 * `resume`, `host.tools.call`, `host.a2a.call`) the recorded answers of the same calls, in order,
 * and its packets are kept off the wire until it has asked again every question asked before (they
 * were sent then). Past that it runs as any run, and what it asks and calls is recorded.
 */
export class RunReplay {
  readonly #asked: InterruptRecord[]
  readonly #memo: MemoEntry[]
  /** Memo entries still to replay (a call that differs from its entry ends the replay of calls). */
  #memoAt = 0
  #memoLive = false
  #calls = 0
  readonly #expiryS: number
  #inFlight = 0
  #idle: Array<() => void> = []
  /** The chain this run goes on from (undefined: the first run). */
  readonly chain: WaitingRun | undefined

  /** @param from what to go on from when it is not a run's chain (a task's approvals and host calls: `task-host.ts`) */
  constructor (chain: WaitingRun | undefined, defaultExpiryS: number, from: Pick<WaitingRun, 'interrupts' | 'memo'> | undefined = chain) {
    this.chain = chain
    this.#asked = from === undefined ? [] : from.interrupts.map((i) => ({ ...i }))
    this.#memo = from === undefined ? [] : [...from.memo]
    this.#expiryS = defaultExpiryS
  }

  /** True while the agent has not yet asked again every question asked before: its packets were sent then. */
  get replaying (): boolean { return this.#calls < this.#asked.length }

  /** Every interrupt of the chain, in the order asked (the new ones included). */
  get interrupts (): InterruptRecord[] { return this.#asked }

  /**
   * The calls to record: the replayed ones that matched, then the ones made since. Results are kept
   * as the calls returned them and made JSON only here, when a run stops to ask (most runs never do);
   * one that is not JSON (a function, a cycle) is recorded as not replayable, and made again.
   */
  get memo (): MemoEntry[] {
    return this.#memo.map((entry) => {
      try {
        return { key: entry.key, result: JSON.parse(JSON.stringify(entry.result ?? null)) as unknown }
      } catch {
        return { key: `${entry.key}:unrecorded`, result: null }
      }
    })
  }

  /** The agent's next `interrupt()`: its answer when it has one, else the question, open. */
  ask (request: unknown, now: number, extra: Pick<InterruptRecord, 'call'> = {}): { answered: InterruptResult } | { open: InterruptRecord } {
    const spec = checkInterruptRequest(request, this.#expiryS)
    const n = this.#calls++
    const known = this.#asked[n]
    if (known !== undefined) return known.answer !== undefined ? { answered: resultOf(known) } : { open: known }
    const asked: InterruptRecord = {
      id: randomUUID(),
      kind: spec.kind,
      message: spec.message,
      ...(spec.schema !== undefined ? { schema: spec.schema } : {}),
      ...(extra.call !== undefined ? { call: extra.call } : {}),
      ...(spec.auth ? { reason: 'auth' as const } : {}),
      expires_at: now + Math.round(spec.expiresInS * 1000)
    }
    this.#asked.push(asked)
    return { open: asked }
  }

  /** Settles once no host call is in flight (a run suspends only then, so no answer it waits for is lost). */
  idle (): Promise<void> | undefined {
    if (this.#inFlight === 0) return undefined
    return new Promise((resolve) => { this.#idle.push(resolve) })
  }

  /** Make a host call, or replay its recorded answer. */
  async call<T> (kind: string, what: unknown, make: () => Promise<T>): Promise<T> {
    const key = keyOf(kind, what)
    if (!this.#memoLive) {
      const entry = this.#memo[this.#memoAt]
      if (entry !== undefined && entry.key === key) {
        this.#memoAt++
        return structuredClone(entry.result) as T
      }
      // the agent did something else than before: what was recorded after here no longer applies
      this.#memo.length = this.#memoAt
      this.#memoLive = true
    }
    const at = this.#memo.length
    this.#memo.push({ key, result: null })
    this.#inFlight++
    try {
      const result = await make();
      (this.#memo[at] as MemoEntry).result = result
      return result
    } catch (err) {
      (this.#memo[at] as MemoEntry).key = `${key}:failed`
      throw err
    } finally {
      if (--this.#inFlight === 0) for (const resolve of this.#idle.splice(0)) resolve()
    }
  }

  /**
   * `host` with its calls replayed and recorded. A call that `approvals` says waits for a person's
   * approval asks first, outside the recorded call (a run suspends only with no call in flight),
   * then is made if approved, or answered as refused (`approval_rejected`, the callee never asked)
   * if not; either answer is recorded as the call's, so a later replay neither asks nor calls again.
   */
  host (host: AgentHost, approvals?: HostApprovals): AgentHost {
    const replay = this
    const backend = (name: string): AgentProtocol => {
      const protocol = host.backend(name)
      return new Proxy(protocol, {
        get: (target, key) => {
          const value = Reflect.get(target, key, target) as unknown
          if (typeof value !== 'function') return value
          const method = value.bind(target) as (...args: unknown[]) => Promise<unknown>
          if (key !== 'send' && key !== 'resume') return method
          return async (sessionId: string, messages: unknown, ctx?: ProtocolContext) =>
            await replay.call(`backend:${name}:${key}`, messages ?? null, async () => await method(sessionId, messages, ctx))
        }
      })
    }
    // the person's answer, and for a rejection its reason: the comment, else who said no (the
    // question is the run's next one: `ask` asks before it first awaits, as `interrupt()` does)
    const approvalOf = async (message: string, call: Record<string, unknown>, ask: HostApprovals['ask']): Promise<{ approved: true } | { approved: false, reason: string }> => {
      const at = replay.#calls
      const answer = await ask(message, call)
      if (answer.approved) return { approved: true }
      const comment = answer.comment?.trim() ?? ''
      const asked = replay.#asked[at]
      const by = asked?.kind === 'approval' && asked.answer !== undefined ? asked.answer.by : undefined
      return { approved: false, reason: comment !== '' ? comment : `rejected by ${by ?? 'the person asked'}` }
    }
    const hostTools = host.tools
    const toolGate = approvals?.tools
    const tools: ToolCaller | undefined = hostTools === undefined
      ? undefined
      : {
          call: async (call) => {
            const what = { tool: call?.tool, action: call?.action, args: call?.args ?? null }
            // a call the rules refuse anyway (its scopes) is refused as any, without asking anyone
            if (approvals === undefined || toolGate === undefined || !toolGate.needsApproval(call) || !await toolGate.inScope(call)) return await replay.call('tool', what, async () => await hostTools.call(call))
            const answer = await approvalOf(`Allow the tool "${call.tool}" to run "${call.action}"?`, what, approvals.ask)
            return await replay.call('tool', what, async () => answer.approved ? await toolGate.approved(call) : await toolGate.rejected(call, answer.reason))
          }
        }
    const hostA2a = host.a2a
    const a2aGate = approvals?.a2a
    const a2a: A2ACaller | undefined = hostA2a === undefined
      ? undefined
      : {
          call: async (agent, capability, payload, options) => {
            const what = { agent, capability, payload: payload ?? null }
            if (approvals === undefined || a2aGate === undefined || !a2aGate.needsApproval(agent, capability, payload, options)) {
              return await replay.call('a2a', what, async () => await hostA2a.call(agent, capability, payload, options))
            }
            const answer = await approvalOf(`Allow a call of the external agent "${agent}" for "${capability}"?`, what, approvals.ask)
            return await replay.call('a2a', what, async () => answer.approved ? await a2aGate.approved(agent, capability, payload, options) : await a2aGate.rejected(agent, capability, answer.reason))
          }
        }
    const bus = host.bus
    return {
      backend,
      ...(bus !== undefined ? { bus: { publish: async (publication) => await replay.call('bus', publication ?? null, async () => await bus.publish(publication)) } } : {}),
      ...(tools !== undefined ? { tools } : {}),
      ...(a2a !== undefined ? { a2a } : {})
    }
  }
}
