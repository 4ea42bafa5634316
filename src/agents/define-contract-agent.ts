import { randomUUID } from 'node:crypto'
import { AgentOutput as AgentOutputSchema, type AgentInput, type AgentOutput, type EventPublication } from '../protocol/contract.js'
import type { BusEvent } from '../storage/bus.js'
import { AH_ERR_AGENT_INVALID, AH_ERR_BACKEND_UNAVAILABLE } from '../errors.js'
import { CONTRACT_VERSION, incompatibility } from './contract-version.js'
import type { Agent, AgentHost, JsonObject, ManifestSpec, ResponseHandler } from './contract.js'
import { defineAgent } from './define-agent.js'
import { COMMON_EVENT_DATA, compileSchema, lazySchema } from './json-schema.js'
import type { ValidateFunction } from 'ajv'
import { AH_ERR_TASK_AGENT_FAILED as AgentError } from '../errors.js'
import type { BaseAgent, TaskContext } from '../runtime/base-agent.js'
import type { AgentResult } from '../runtime/agent-runtime.js'
import { ownerAgentsOf, ownerOf, ownerScopesOf, type TaskNode } from '../storage/tasks/task.js'

/** One capability of a contract agent: what it is asked (`intent`) and the arguments it takes. */
export interface ContractCapability {
  name: string
  description: string
  /** `AgentInput.intent` for this capability (default: its name). */
  intent?: string
  /** JSON Schema of `AgentInput.payload`; the host validates every call against it before `execute`. */
  inputs?: JsonObject
  /** The longest a call may run before its signal fires (a caller's `constraints.timeout` may only shorten it). */
  timeout_ms?: number
  /** Backends a call of this capability needs besides the agent's `backends` (checked the same way). */
  backends?: readonly string[]
}

/** What `execute` is handed besides its input. */
export interface ContractContext {
  /** Fires when the call must stop: timeout, cancel, disconnect (per policy) or shutdown. */
  readonly signal: AbortSignal
  /** The W3C trace id of the call; put it in every log line and event of your own. */
  readonly traceId: string
  /** A structured log line, stamped with the trace id, the agent and the task id. */
  log(level: 'debug' | 'info' | 'warn' | 'error', message: string, metadata?: JsonObject): Promise<void>
  /** The backends (`host.backend('llm')`); the ones in the spec's `backends` are checked available before `execute`. */
  readonly host: AgentHost
  /**
   * Publish to the event bus now, with a priority, TTL or targets of your own (the events of the
   * output are published too, once it is accepted, with the defaults). Without a bus it does nothing.
   */
  publish(publication: EventPublication): Promise<void>
}

/**
 * A subscription of a contract agent to the event bus (seed 003 `EventSubscription`). The host
 * registers it wherever the agent runs as a task agent (the server, `agent-host worker`); its
 * deliveries are at least once, so a handler must tolerate an event twice.
 */
export interface ContractSubscription {
  /** Unique in the agent (the seed's `handler`); the subscription's id is `<agent name>:<name>`. */
  name: string
  /** Glob patterns over the dotted event type: `*` one segment, `**` any (`code.*`, `research.complete`). */
  patterns: string[]
  /** Dotted paths of the event's `data` and the values they must have (an array: any of them). */
  filter?: JsonObject
  /**
   * Start a task of this agent for each event: its inputs are what this returns (`true`: the event's
   * `data`), undefined skips the event. The task id is derived from the event, so a redelivery starts nothing twice.
   */
  startTask?: true | ((event: BusEvent) => JsonObject | undefined)
  /** The intent (capability) the started task calls; default the first capability. */
  intent?: string
  /** Handle the event in the agent; throwing retries it (with backoff), then dead-letters it. */
  handle?: (event: BusEvent, context: { signal: AbortSignal }) => Promise<void> | void
  /** Attempts before a delivery is dead-lettered (default BUS_MAX_ATTEMPTS). */
  maxAttempts?: number
  backoffMs?: number
}

/** What an author passes to {@link defineContractAgent} (seed 003's `BaseAgent`). */
export interface ContractAgentSpec {
  metadata: ManifestSpec['metadata']
  /** The agent contract version this agent was written against (semver; see `CONTRACT_VERSION`). */
  contractVersion: string
  capabilities: ContractCapability[]
  /** Do the work. Return `status: "retry"` for a passing failure, `"fail"` for a final one. */
  execute(input: AgentInput, context: ContractContext): Promise<AgentOutput>
  /** The agent's own check of its output; `false` makes it a contract violation, never passed on. */
  validate?(output: AgentOutput): boolean | Promise<boolean>
  /** Extra facts for discovery, served under `custom_metadata.contract.capabilities`. */
  getCapabilities?(): JsonObject
  /** Subscriptions to the event bus: handlers, and tasks started by events. */
  subscriptions?: ContractSubscription[]
  /**
   * Backends the agent needs (names from `GET /v1/backends`, e.g. `llm`). While one is unavailable
   * a call behind `/v1/assist` is a 503 `AH_ERR_BACKEND_UNAVAILABLE` and a task a retryable failure.
   */
  backends?: readonly string[]
}

const validOutput = lazySchema<AgentOutput>(AgentOutputSchema)

function timeoutOf (capability: ContractCapability, constraints: JsonObject | undefined): number | undefined {
  const asked = typeof constraints?.timeout === 'number' && constraints.timeout > 0 ? constraints.timeout * 1000 : undefined
  const limits = [capability.timeout_ms, asked].filter((ms): ms is number => ms !== undefined)
  return limits.length === 0 ? undefined : Math.min(...limits)
}

/** Why `output` breaks the contract for `input` (schema, task id, the agent's own validate), or undefined. */
async function violation (spec: ContractAgentSpec, input: AgentInput, output: AgentOutput): Promise<string | undefined> {
  if (!validOutput(output)) return `its output does not match the AgentOutput schema: ${(validOutput.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''}`).join('; ')}`
  if (output.task_id !== input.task_id) return `its output is for task ${output.task_id}, not ${input.task_id}`
  for (const [i, event] of (output.events ?? []).entries()) {
    const common = COMMON_EVENT_DATA.get(event.type)
    if (common !== undefined && !common(event.data)) return `its event ${i} (${event.type}) does not carry the common event's data: ${(common.errors ?? []).map((e) => `/events/${i}/data${e.instancePath} ${e.message ?? ''}`).join('; ')}`
  }
  if (spec.validate !== undefined && !(await spec.validate(output))) return 'its own validate() refused its output'
  return undefined
}

/** The call's signal: the caller's, and the timeout if there is one. */
function callSignal (signal: AbortSignal, timeoutMs: number | undefined): AbortSignal {
  return timeoutMs === undefined ? signal : AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
}

/**
 * One task of the graph as a contract call: the task's inputs are the payload (validated against the
 * capability), `retry` is a retryable failure (backoff and attempts are the task's), `fail` a final
 * one, a violation a final one too, and `next_tasks` become child tasks.
 */
async function runTask (spec: ContractAgentSpec, capabilities: ReadonlyArray<{ capability: ContractCapability, validInput: ValidateFunction }>, task: TaskNode, context: TaskContext): Promise<AgentResult> {
  const { capability, validInput } = taskCapability(capabilities, task)
  const input: AgentInput = {
    intent: capability.intent ?? capability.name,
    task_id: task.id,
    payload: task.inputs,
    context: { ...task.context, ...(task.metadata.conversation_id !== undefined ? { conversation_id: task.metadata.conversation_id } : {}) },
    ...(isObject(task.metadata.constraints) ? { constraints: task.metadata.constraints } : {})
  }
  if (!validInput(task.inputs)) {
    const errors = (validInput.errors ?? []).map((e) => `/inputs${e.instancePath} ${e.message ?? ''}`)
    throw new AgentError(`invalid input: ${errors.join('; ')}`, { retryable: false, details: { reason: 'invalid_input', errors } })
  }
  const backends = [...(spec.backends ?? []), ...(capability.backends ?? [])]
  if (backends.length > 0) {
    if (context.host === undefined) throw new AgentError(`backend_unavailable: this worker has no backends (${backends.join(', ')})`, { retryable: true, details: { reason: 'backend_unavailable' } })
    const host = context.host as AgentHost & { require?: (names: readonly string[]) => Promise<void> }
    try {
      await host.require?.(backends)
    } catch (err) {
      throw new AgentError(`backend_unavailable: ${(err as Error).message}`, { retryable: true, details: { reason: 'backend_unavailable' } })
    }
  }
  const traceId = typeof task.context.trace_id === 'string' ? task.context.trace_id : task.id
  const timeoutMs = timeoutOf(capability, input.constraints)
  const signal = callSignal(context.signal, timeoutMs)
  await context.runtime.emitUpdate(task.id, 'contract.started')
  const origin = { source: `agent:${spec.metadata.name}`, owner_key: ownerOf(task), owner_agents: ownerAgentsOf(task), owner_scopes: ownerScopesOf(task), trace_id: traceId }
  const publish = async (publication: EventPublication): Promise<void> => { await context.bus?.publish(publication, origin) }
  let output: AgentOutput
  try {
    // a task's log lines are its updates (GET /v1/tasks/:id/events), with the trace id
    const log: ContractContext['log'] = async (level, message, metadata = {}) => {
      await context.runtime.emitUpdate(task.id, `${level}: ${message} ${JSON.stringify({ ...metadata, trace_id: traceId })}`)
    }
    output = await spec.execute(input, { signal, traceId, log, publish, host: context.host ?? NO_BACKENDS })
  } catch (err) {
    if (signal.aborted && !context.signal.aborted) throw new AgentError(`contract_timeout: the call ran past ${timeoutMs as number} ms`, { retryable: true, details: { reason: 'contract_timeout' } })
    throw err
  }
  const broken = await violation(spec, input, output)
  if (broken !== undefined) throw new AgentError(`agent_contract_violation: ${broken}`, { retryable: false, details: { reason: 'agent_contract_violation' } })
  for (const event of output.events ?? []) await publish({ event })
  if (output.status === 'retry') throw new AgentError(output.error ?? 'the agent asked to try again', { retryable: true, details: { reason: 'retry_requested' } })
  if (output.status === 'fail') throw new AgentError(output.error ?? 'the agent failed the task', { retryable: false, details: { reason: 'failed' } })
  const next = (output.next_tasks ?? []).map((t) => {
    if (typeof t.type !== 'string' || t.type === '') throw new AgentError('agent_contract_violation: a next task without a type', { retryable: false })
    return { type: t.type, ...(isObject(t.inputs) ? { inputs: t.inputs } : {}), ...(typeof t.priority === 'number' ? { priority: t.priority } : {}), ...(isObject(t.metadata) ? { metadata: t.metadata } : {}) }
  })
  return { task_id: task.id, outcome: 'completed', artifacts: (output.artifacts ?? []) as JsonObject[], ...(next.length > 0 ? { next_actions: next } : {}) }
}

/**
 * The capability a task calls: the one whose intent (or name) is the task's `metadata.intent`, or the
 * `type` of the plan task in its inputs (a task made by `POST /v1/plans`), else the first.
 */
function taskCapability<C extends { capability: ContractCapability }> (capabilities: readonly C[], task: TaskNode): C {
  const plan = isObject(task.inputs.task) ? task.inputs.task.type : undefined
  for (const wanted of [task.metadata.intent, plan]) {
    const found = capabilities.find((c) => typeof wanted === 'string' && (c.capability.intent ?? c.capability.name) === wanted)
    if (found !== undefined) return found
  }
  return capabilities[0] as C
}

/** The host of a worker given no backends: every backend is unavailable. */
const NO_BACKENDS: AgentHost = {
  backend (name) { throw new AH_ERR_BACKEND_UNAVAILABLE(`this worker has no backends, so not "${name}"`) }
}

const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value)

async function runContract (spec: ContractAgentSpec, capability: ContractCapability, input: AgentInput, response: ResponseHandler, traceId: string, host: AgentHost): Promise<void> {
  // recorded as CloudEvents: internal, in the event log with the call's trace id
  const record = async (type: string, data: JsonObject): Promise<void> => {
    await response.emit({
      specversion: '1.0',
      id: randomUUID(),
      source: `agent-host/contract-agents/${spec.metadata.name}`,
      type,
      time: new Date().toISOString(),
      subject: input.task_id,
      datacontenttype: 'application/json',
      data: { agent: spec.metadata.name, task_id: input.task_id, intent: input.intent, trace_id: traceId, ...data }
    })
  }
  const state = async (state: string, data: JsonObject = {}): Promise<void> => { await record(`contract.${state}`, data) }
  const timeoutMs = timeoutOf(capability, input.constraints)
  const signal = callSignal(response.signal, timeoutMs)
  const context: ContractContext = {
    signal,
    traceId,
    host,
    publish: async (publication) => { await host.bus?.publish(publication) },
    log: async (level, message, metadata = {}) => { await response.log(level, message, { ...metadata, trace_id: traceId, task_id: input.task_id, agent: spec.metadata.name }) }
  }
  await state('started')
  let output: AgentOutput
  try {
    output = await spec.execute(input, context)
  } catch (err) {
    if (signal.aborted && !response.signal.aborted) {
      await state('timed_out', { timeout_ms: timeoutMs as number })
      await response.error(`The contract call ran past its timeout of ${timeoutMs as number} ms`, { code: 'contract_timeout', timeout_ms: timeoutMs as number })
      return
    }
    await state('failed', { error: (err as Error).message })
    throw err
  }
  if (!validOutput(output)) {
    await state('violated', { reason: 'output_schema' })
    // result() checks the output against the capability's outputs (the AgentOutput schema) and ends the run as a contract violation
    await response.result(output as unknown as JsonObject)
    return
  }
  const reason = await violation(spec, input, output)
  if (reason !== undefined) {
    await state('violated', { reason })
    await response.error(`The agent broke its contract: ${reason}`, { code: 'agent_contract_violation', reason })
    return
  }
  for (const artifact of output.artifacts ?? []) await response.data({ artifact } as JsonObject, `${artifact.kind}: ${artifact.ref}`, 'JSON')
  for (const event of output.events ?? []) {
    await record(event.type, { key: event.key, visibility: event.visibility ?? 'internal', data: event.data as JsonObject })
    await context.publish({ event })
  }
  await state(output.status === 'ok' ? 'completed' : output.status === 'retry' ? 'retry_requested' : 'failed', output.error === undefined ? {} : { error: output.error })
  await response.result(output as unknown as JsonObject)
}

/** A contract agent as the host sees it: a CAP agent, a task agent, and its bus subscriptions (with their ids). */
export type ContractAgent = Agent & Pick<BaseAgent, 'agentType' | 'handleTask'> & { subscriptions: Array<ContractSubscription & { id: string }> }

/**
 * Author a contract agent (seed 003): `execute(AgentInput) → AgentOutput`, an optional `validate`,
 * and a `contractVersion` the host must be compatible with (checked here, so an incompatible agent
 * is refused at boot with both versions named). The host serves it behind `POST /v1/assist`: the
 * envelope becomes an AgentInput (`intent` from the capability, `task_id` the request id, `payload`
 * the agent's arguments after they were validated against the capability's `inputs`, `context` the
 * session, `constraints` from `payload.metadata.constraints`), and the AgentOutput, once it passed
 * the contract's schema and the agent's own `validate`, is the run's `result`, its artifacts DATA
 * events, its events internal events. Every state change of the call is an internal event
 * (`contract.started`, `.completed`, `.retry_requested`, `.failed`, `.timed_out`, `.violated`).
 *
 * It is a task agent too (`agentType` = its name): a task of that type is a call of the capability
 * whose intent is the task's `metadata.intent` or its plan task's `type` (else the first), with the
 * task's inputs as payload (validated first), `retry` (and a timeout) a retryable
 * failure with the task's backoff and attempts, `fail`, a violation or bad input a final failure, and
 * `next_tasks` (each with a `type`) child tasks.
 */
export function defineContractAgent (spec: ContractAgentSpec): ContractAgent {
  const refused = incompatibility(spec.contractVersion)
  if (refused !== undefined) throw new AH_ERR_AGENT_INVALID(spec.metadata.name, refused)
  if (spec.capabilities.length === 0) throw new AH_ERR_AGENT_INVALID(spec.metadata.name, 'a contract agent needs at least one capability')
  const forTasks = spec.capabilities.map((capability) => ({ capability, validInput: compileSchema(capability.inputs ?? { type: 'object' }) }))
  const capabilityBackends = Object.fromEntries(spec.capabilities.filter((c) => c.backends !== undefined).map((c) => [c.name, c.backends as readonly string[]]))
  const agent = defineAgent({
    manifest: {
      metadata: spec.metadata,
      capabilities: spec.capabilities.map((c) => ({
        name: c.name,
        description: c.description,
        delivery_mode: 'request_response',
        inputs: c.inputs ?? { type: 'object' },
        outputs: JSON.parse(JSON.stringify(AgentOutputSchema)) as JsonObject
      })),
      custom_metadata: {
        contract: {
          version: spec.contractVersion,
          host_version: CONTRACT_VERSION,
          intents: spec.capabilities.map((c) => c.intent ?? c.name),
          ...(spec.getCapabilities !== undefined ? { capabilities: spec.getCapabilities() } : {})
        }
      }
    },
    ...(spec.backends !== undefined ? { backends: spec.backends } : {}),
    ...(Object.keys(capabilityBackends).length > 0 ? { capabilityBackends } : {}),
    async assist (request, _session, response, host) {
      const metadata = request.metadata as { capability?: string, constraints?: JsonObject }
      const capability = spec.capabilities.find((c) => c.name === metadata.capability) ?? spec.capabilities[0] as ContractCapability
      const input: AgentInput = {
        intent: capability.intent ?? capability.name,
        task_id: request.request_id,
        payload: request.payload,
        context: { session_id: request.session_id, user: request.context.user, trace: request.context.trace } as JsonObject,
        ...(metadata.constraints !== undefined ? { constraints: metadata.constraints } : {})
      }
      await runContract(spec, capability, input, response, request.context.trace.trace_id, host)
    }
  })
  return {
    ...agent,
    subscriptions: (spec.subscriptions ?? []).map((s) => ({ ...s, id: `${spec.metadata.name}:${s.name}` })),
    agentType: spec.metadata.name,
    handleTask: async (task, context) => await runTask(spec, forTasks, task, context)
  }
}
