import { randomUUID } from 'node:crypto'
import type { MemoEntry } from '../interrupts.js'
import type { Viewer } from '../tenants.js'

/**
 * Where a task is in its life. WAITING: its agent asked a person (a host call marked
 * `require_approval`) and it waits for the answer, unclaimable and unreaped, PENDING again once
 * every question is answered.
 */
export const TASK_STATUSES = ['PENDING', 'IN_PROGRESS', 'WAITING', 'COMPLETED', 'FAILED', 'CANCELLED'] as const
export type TaskStatus = typeof TASK_STATUSES[number]

export type JsonObject = Record<string, unknown>

/**
 * A node of the task graph (`DATA_DIR/tasks.graph.json` holds `{ "tasks": [TaskNode, ...] }`).
 * `attempt` doubles as the fencing token: a worker must present the attempt it claimed.
 */
export interface TaskNode {
  id: string
  /** Routes the task to agents of this `agentType`. */
  type: string
  status: TaskStatus
  /** The agent id holding the task while IN_PROGRESS. */
  owner: string | null
  /** Higher runs first. */
  priority: number
  attempt: number
  max_attempts: number
  inputs: JsonObject
  outputs: JsonObject | null
  context: JsonObject
  /** `conversation_id` ties the task to a conversation's event feed. */
  metadata: JsonObject
  parent_id: string | null
  dependency_ids: string[]
  created_at: string
  updated_at: string
  lease_expires_at: string | null
  last_heartbeat_at: string | null
  /** Not claimable before this (retry backoff). */
  available_at: string
  /** The last failure, if any. */
  error: JsonObject | null
}

/** What a caller gives to create a task; `input` is accepted as an alias of `inputs`. */
export interface NewTask {
  id?: string
  type: string
  priority?: number
  max_attempts?: number
  inputs?: JsonObject
  input?: JsonObject
  context?: JsonObject
  metadata?: JsonObject
  parent_id?: string | null
  dependency_ids?: string[]
}

/** A claim's proof of ownership: who holds the task and which attempt. */
export interface ClaimToken {
  owner: string
  attempt: number
}

/** Why a task failed, and whether to try again. */
export interface TaskFailure {
  reason: string
  retryable: boolean
  details?: JsonObject
}

/** A person's answer to one of a task's approvals. */
export interface TaskApprovalAnswer {
  approved: boolean
  comment?: string
  /** The principal that answered. */
  by: string
  /** When (ISO 8601). */
  at: string
}

/**
 * A question a task's agent asked through its host (`metadata.approvals`, in the order asked): may
 * this call marked `require_approval` be made? Its id is a UUID made when it was first asked.
 */
export interface TaskApproval {
  id: string
  message: string
  /** What would be called: a tool call's `{ tool, action, args }`, an A2A call's `{ agent, capability, payload }`. */
  call: JsonObject
  asked_at: string
  answer?: TaskApprovalAnswer
}

/**
 * What a task that stops to ask keeps (in `metadata`) to go on after the answer: the questions asked
 * so far, and its agent's host calls, replayed when it is entered again (as a run's are: `storage/interrupts.ts`).
 */
export interface TaskWait {
  approvals: TaskApproval[]
  host_calls: MemoEntry[]
}

/** A task's approvals (`metadata.approvals`), oldest first; none when absent or malformed. */
export function approvalsOf (task: Pick<TaskNode, 'metadata'>): TaskApproval[] {
  const approvals = task.metadata.approvals
  return Array.isArray(approvals) ? approvals.filter((a): a is TaskApproval => typeof a === 'object' && a !== null && typeof (a as TaskApproval).id === 'string') : []
}

/** The host calls a task recorded before it stopped to ask (`metadata.host_calls`); none when absent or malformed. */
export function hostCallsOf (task: Pick<TaskNode, 'metadata'>): MemoEntry[] {
  const calls = task.metadata.host_calls
  return Array.isArray(calls) ? calls.filter((c): c is MemoEntry => typeof c === 'object' && c !== null && typeof (c as MemoEntry).key === 'string') : []
}

/** Filters of `list()`. */
export interface TaskQuery {
  status?: TaskStatus
  type?: string
  conversation_id?: string
  /** Only the tasks this viewer sees (by `metadata.owner_key`: `storage/tenants.ts`). */
  viewer?: Viewer
  limit?: number
  offset?: number
}

/** Whose a task is: the principal that created it (or its plan, or the event that started it), from `metadata.owner_key`; null: the host's own. */
export function ownerOf (task: Pick<TaskNode, 'metadata'>): string | null {
  return typeof task.metadata.owner_key === 'string' ? task.metadata.owner_key : null
}

/**
 * `metadata` of a task `who` creates: it is theirs (`owner_key`), held to their agent list
 * (`owner_agents`, absent when they may use any agent) and to their scopes (`owner_scopes`: what
 * its agent's host calls are held to, as a run's are to its caller's), whatever `metadata` said of any.
 */
export function ownedBy (who: { id: string, agents: ReadonlySet<string> | null, scopes: ReadonlySet<string> }, metadata: JsonObject = {}): JsonObject {
  const { owner_agents: _claimed, owner_scopes: _widened, ...rest } = metadata
  return { ...rest, owner_key: who.id, ...(who.agents !== null ? { owner_agents: [...who.agents] } : {}), owner_scopes: [...who.scopes] }
}

/**
 * The scopes of the key or token that created the task (its plan, the task whose follow-up it is),
 * `metadata.owner_scopes`, set where the task is made and carried to its follow-ups, which cannot
 * widen them. Absent (a task made before they were recorded, or started by a bus event, which does
 * not carry them) or not a list of strings: none.
 */
export function ownerScopesOf (task: Pick<TaskNode, 'metadata'>): string[] {
  const scopes = task.metadata.owner_scopes
  return Array.isArray(scopes) && scopes.every((s) => typeof s === 'string') ? scopes as string[] : []
}

/**
 * The agents a task's owner may have work for it: its key's or token's agent list (names or manifest
 * ids), `metadata.owner_agents`, set where the task is made and carried to its follow-ups and the bus
 * events it publishes; null (absent): any agent. A value that is not a list of strings allows none.
 */
export function ownerAgentsOf (task: Pick<TaskNode, 'metadata'>): string[] | null {
  const agents = task.metadata.owner_agents
  if (agents === undefined) return null
  return Array.isArray(agents) && agents.every((a) => typeof a === 'string') ? agents as string[] : []
}

/** Backoff before retry `attempt` (1-based): exponential from `baseMs`, capped, with full jitter. */
export function retryDelayMs (attempt: number, baseMs = 1000, capMs = 60_000, random = Math.random): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.max(0, attempt - 1))
  return Math.floor(ceiling / 2 + random() * ceiling / 2)
}

/**
 * A new task's metadata without what only a task that stopped to ask may hold (`approvals`,
 * `host_calls`): a creator (or a parent whose metadata a follow-up copies) cannot hand a task
 * answers no one gave, or host calls it never made.
 */
function fresh (metadata: JsonObject): JsonObject {
  if (!('approvals' in metadata) && !('host_calls' in metadata)) return metadata
  const { approvals: _answered, host_calls: _made, ...rest } = metadata
  return rest
}

/** Fill a new task's defaults. */
export function newTaskNode (task: NewTask, now: Date): TaskNode {
  const at = now.toISOString()
  return {
    id: task.id ?? randomUUID(),
    type: task.type,
    status: 'PENDING',
    owner: null,
    priority: task.priority ?? 0,
    attempt: 0,
    max_attempts: task.max_attempts ?? 3,
    inputs: task.inputs ?? task.input ?? {},
    outputs: null,
    context: task.context ?? {},
    metadata: fresh(task.metadata ?? {}),
    parent_id: task.parent_id ?? null,
    dependency_ids: task.dependency_ids ?? [],
    created_at: at,
    updated_at: at,
    lease_expires_at: null,
    last_heartbeat_at: null,
    available_at: at,
    error: null
  }
}
