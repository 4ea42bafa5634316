import type { AgentHost, AgentProtocol } from '../backends/protocol.js'
import type { A2ACallers } from '../a2a-client/remote-agents.js'
import type { ToolCallers } from '../tools/tool-caller.js'
import { mayInvoke } from '../auth/agent-access.js'
import { grants } from '../auth/scopes.js'
import type { TaskAgentName } from '../auth/task-access.js'
import { AH_ERR_TASK_APPROVAL_REQUIRED } from '../errors.js'
import type { ApprovalAnswer, InterruptRecord } from '../storage/interrupts.js'
import { approvalsOf, hostCallsOf, ownerAgentsOf, ownerOf, ownerScopesOf, type TaskApproval, type TaskNode, type TaskWait } from '../storage/tasks/task.js'
import { tenantOf } from '../storage/tenants.js'
import { RunReplay, type HostApprovals } from './replay.js'
import { meteredBackend } from './metered-backend.js'
import { budgetedBackend } from './budgeted-backend.js'
import type { Budgets } from './budgets.js'
import { UNKNOWN_MODEL, type RunUsage } from './run-observers.js'

/**
 * The scope a task's owner must hold for its agent's host calls (`host.tools`, `host.a2a`): calling
 * a tool or another agent on someone's behalf is invoking an agent for them, which a run's caller
 * needs `assist:invoke` for (its route's scope). `admin` and `tenant-admin` grant it.
 */
export const TASK_HOST_SCOPE = 'assist:invoke'

/** The actor of the calls of a task that has no owner (the host's own). */
const HOST = 'host'

/** What the task hosts are made of: the same backends, tools and external agents a run's host lends. */
export interface TaskHostOptions {
  /** The backends (`require` too, which a contract agent asks before it starts). */
  backends: AgentHost & { require?: (names: readonly string[]) => Promise<void> }
  /** The MCP tools (MCP_SERVERS_FILE); none: no `host.tools`. */
  tools?: ToolCallers
  /** The external A2A agents (A2A_AGENTS_FILE); none: no `host.a2a`. */
  a2a?: A2ACallers
  /** The task agents here, whose manifest ids an agent list may name instead of their type. */
  agents?: readonly TaskAgentName[]
  /** Model budgets (BUDGETS_FILE): each backend call is held to the task's owner's, as a run's to its caller's. None: no budgets. */
  budgets?: Pick<Budgets, 'enabled' | 'holder'>
  /** Told the tokens each backend call and each remote's billing reports, with the task's owner (null: the host's own). */
  usage?: (usage: RunUsage & { owner: string | null }) => void
}

/**
 * The host each task's agent gets (`TaskContext.host`, made by the worker for each task it claims):
 * the backends, metered and held to the budgets as a run's are (`meteredBackend`, `budgetedBackend`:
 * the engine's wrappers) with the task's owner; and the MCP tools and external A2A agents called as a run's are, on behalf of the task's
 * owner (`metadata.owner_key`, the actor of each call's audit row; its tenant is the owner's), named
 * by the task's id where a run's calls name its request, in the task's trace when it has one
 * (`context.trace_id`), and given up when `signal` fires (cancel, shutdown, a lost claim, the end of
 * the task). A call of an action marked `require_approval` asks a person, as a run's does, through
 * the task ({@link taskApprovals}): answered, it is made or refused `approval_rejected`; not yet, the
 * task waits (WAITING) and is run again from the start once answered, its earlier host calls
 * (backends, tools, A2A) replayed from `metadata.host_calls`. The owner must hold {@link TASK_HOST_SCOPE} (`metadata.owner_scopes`) and may have
 * the task's agent work for it (`metadata.owner_agents`); otherwise every call is refused
 * (`forbidden`) and recorded as any refusal.
 */
export function taskHosts (options: TaskHostOptions): (task: TaskNode, signal: AbortSignal) => AgentHost {
  const ids = new Map((options.agents ?? []).map((a) => [a.type, a.id]))
  const { backends } = options
  return (task, signal) => {
    const agent = task.type
    const owner = ownerOf(task)
    const tenant = tenantOf(owner ?? HOST)
    const usage = (told: Omit<RunUsage, 'tenant'>): void => { options.usage?.({ ...told, tenant, owner }) }
    // a task of nobody is the host's own: no one's budget
    const hold = owner !== null && options.budgets?.enabled === true ? options.budgets.holder(owner) : undefined
    const backend = (name: string): AgentProtocol => {
      const protocol = meteredBackend(backends.backend(name), (used, cost, model) => {
        usage({ agent, model: model ?? UNKNOWN_MODEL, input: used.input, output: used.output, cost })
      })
      return hold === undefined ? protocol : budgetedBackend(protocol, hold)
    }
    const traceId = task.context.trace_id
    const forbidden = refusal(task, ids.get(agent))
    const context = {
      agent,
      owner: owner ?? HOST,
      taskId: task.id,
      ...(typeof traceId === 'string' ? { traceId } : {}),
      signal,
      ...(forbidden !== undefined ? { forbidden } : {})
    }
    const tools = options.tools?.caller(context)
    const a2a = options.a2a?.caller({ ...context, usage: (billed) => { usage({ agent, ...billed }) } })
    // only the calls are lent: the ends of calls that wait for an approval are the replay's, made once a person approved them
    const host: AgentHost = {
      backend,
      ...(backends.require !== undefined ? { require: backends.require.bind(backends) } : {}),
      ...(tools !== undefined ? { tools: { call: async (call: Parameters<typeof tools.call>[0]) => await tools.call(call) } } : {}),
      ...(a2a !== undefined ? { a2a: { call: async (...args: Parameters<typeof a2a.call>) => await a2a.call(...args) } } : {})
    }
    // no tools and no external agents: nothing could ever wait for an approval, nothing to replay
    if (tools === undefined && a2a === undefined) return host
    const { replay, ask } = taskApprovals(task)
    return { ...host, ...replay.host(host, { ask, ...(tools !== undefined ? { tools } : {}), ...(a2a !== undefined ? { a2a } : {}) }) }
  }
}

/** The longest `RunReplay` lets a question wait (a task's approvals do not expire: this only fills the field). */
const NO_EXPIRY_S = 366 * 24 * 3600

/** A task's approval as the replay holds a run's question. */
function interruptOf (taskId: string, approval: TaskApproval): InterruptRecord {
  const { answer } = approval
  return {
    id: approval.id,
    kind: 'approval',
    message: approval.message,
    call: approval.call,
    expires_at: Number.MAX_SAFE_INTEGER,
    ...(answer !== undefined
      ? { answer: { value: { approved: answer.approved, ...(answer.comment !== undefined ? { comment: answer.comment } : {}) }, by: answer.by, at: Date.parse(answer.at), request: `task:${taskId}` } }
      : {})
  }
}

/**
 * One execution of a task's view of its approvals, as `RunReplay` keeps a run's chain: the n-th
 * approval its agent asks in this execution is the n-th recorded in `metadata.approvals`. Answered,
 * `ask` gives its answer; asked for the first time, it is recorded (a new UUID) and `ask` throws
 * `AH_ERR_TASK_APPROVAL_REQUIRED`, whose `waiting()` gives what the task keeps while it waits
 * (`TaskWait`: every question so far and the host calls made, once none is in flight), for the
 * worker (`BaseAgent.executeOnce`) to store.
 */
export function taskApprovals (task: TaskNode): { replay: RunReplay, ask: HostApprovals['ask'] } {
  const recorded = approvalsOf(task)
  const known = new Map(recorded.map((a) => [a.id, a]))
  const replay = new RunReplay(undefined, NO_EXPIRY_S, { interrupts: recorded.map((a) => interruptOf(task.id, a)), memo: hostCallsOf(task) })
  const askedAt = new Map<string, string>()
  const waiting = async (): Promise<TaskWait> => {
    // a call still in flight (the agent's other branch) is recorded once it has answered, as a run waits before it suspends
    for (let idle = replay.idle(); idle !== undefined; idle = replay.idle()) await idle
    const approvals = replay.interrupts.map((i): TaskApproval => known.get(i.id) ?? { id: i.id, message: i.message, call: i.call ?? {}, asked_at: askedAt.get(i.id) ?? new Date().toISOString() })
    return { approvals, host_calls: replay.memo }
  }
  const ask = async (message: string, call: Record<string, unknown>): Promise<ApprovalAnswer> => {
    const asked = replay.ask({ kind: 'approval', message }, Date.now(), { call })
    if ('answered' in asked) return asked.answered as ApprovalAnswer
    if (!known.has(asked.open.id)) askedAt.set(asked.open.id, new Date().toISOString())
    throw new AH_ERR_TASK_APPROVAL_REQUIRED(task.id, { id: asked.open.id, message, call }, async () => ({ ...await waiting() }))
  }
  return { replay, ask }
}

/** Why `task`'s owner may not have its agent call tools or agents on its behalf, if it may not. */
function refusal (task: TaskNode, id: string | undefined): string | undefined {
  const who = `the owner of task ${task.id} (${ownerOf(task) ?? 'none: the host\'s own'})`
  if (!grants(new Set(ownerScopesOf(task)), TASK_HOST_SCOPE)) {
    return `${who} does not hold the scope ${TASK_HOST_SCOPE}, which calling a tool or an agent on its behalf needs`
  }
  const agents = ownerAgentsOf(task)
  if (agents !== null && !mayInvoke(new Set(agents), { name: task.type, ...(id !== undefined ? { id } : {}) })) {
    return `${who} may not invoke agent "${task.type}" (its key's agent list)`
  }
  return undefined
}
