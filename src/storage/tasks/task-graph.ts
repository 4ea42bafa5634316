import { AH_ERR_INTERRUPT_CLOSED, AH_ERR_TASK_APPROVAL_NOT_FOUND, AH_ERR_TASK_STALE_CLAIM, AH_ERR_TASK_INVALID, AH_ERR_TASK_STATE } from '../../errors.js'
import { approvalsOf, newTaskNode, type ClaimToken, type JsonObject, type NewTask, type TaskApprovalAnswer, type TaskFailure, type TaskNode, type TaskWait } from './task.js'

/**
 * The task graph's rules as pure functions over task nodes, shared by every TaskStore: what may be
 * created, which task a worker gets, and each state transition with its fencing check. Stores
 * supply atomicity; these functions supply the semantics.
 */

const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/

/**
 * Check a batch of new tasks and make their nodes. Dependencies must name a task that exists or one
 * of the batch; the batch must not repeat ids or reuse existing ones, and must not form a cycle
 * (existing tasks never depend on new ones, so a cycle can only lie within the batch).
 */
export function createNodes (batch: NewTask[], exists: (id: string) => boolean, now: Date): TaskNode[] {
  if (!Array.isArray(batch) || batch.length === 0) throw new AH_ERR_TASK_INVALID('no tasks given')
  const nodes = batch.map((task) => newTaskNode(task, now))
  const ids = new Set<string>()
  for (const node of nodes) {
    if (typeof node.type !== 'string' || node.type === '') throw new AH_ERR_TASK_INVALID(`task ${node.id} has no type`)
    if (!ID.test(node.id)) throw new AH_ERR_TASK_INVALID(`task id "${node.id}" must be 1-128 letters, digits, ".", "_", ":" or "-"`)
    if (ids.has(node.id) || exists(node.id)) throw new AH_ERR_TASK_INVALID(`task id "${node.id}" is already used`)
    if (!Number.isInteger(node.max_attempts) || node.max_attempts < 1) throw new AH_ERR_TASK_INVALID(`task ${node.id}: max_attempts must be a positive integer`)
    if (!Number.isFinite(node.priority)) throw new AH_ERR_TASK_INVALID(`task ${node.id}: priority must be a number`)
    ids.add(node.id)
  }
  for (const node of nodes) {
    for (const dep of node.dependency_ids) {
      if (dep === node.id) throw new AH_ERR_TASK_INVALID(`task ${node.id} depends on itself`)
      if (!ids.has(dep) && !exists(dep)) throw new AH_ERR_TASK_INVALID(`task ${node.id} depends on unknown task "${dep}"`)
    }
    if (node.parent_id !== null && !ids.has(node.parent_id) && !exists(node.parent_id)) {
      throw new AH_ERR_TASK_INVALID(`task ${node.id} has unknown parent "${node.parent_id}"`)
    }
  }
  const cycle = findCycle(nodes)
  if (cycle !== undefined) throw new AH_ERR_TASK_INVALID(`dependency cycle: ${cycle.join(' -> ')}`)
  return nodes
}

/** A dependency cycle among `nodes` (as a path that ends where it starts), if there is one. */
export function findCycle (nodes: TaskNode[]): string[] | undefined {
  const deps = new Map(nodes.map((n) => [n.id, n.dependency_ids.filter((d) => d !== n.id)]))
  const state = new Map<string, 'visiting' | 'done'>()
  const path: string[] = []
  const visit = (id: string): string[] | undefined => {
    if (state.get(id) === 'done' || !deps.has(id)) return undefined
    if (state.get(id) === 'visiting') return [...path.slice(path.indexOf(id)), id]
    state.set(id, 'visiting')
    path.push(id)
    for (const dep of deps.get(id) ?? []) {
      const found = visit(dep)
      if (found !== undefined) return found
    }
    path.pop()
    state.set(id, 'done')
    return undefined
  }
  for (const id of deps.keys()) {
    const found = visit(id)
    if (found !== undefined) return found
  }
  return undefined
}

/** Claim order: highest priority, then oldest, then id. */
export function claimOrder (a: TaskNode, b: TaskNode): number {
  return b.priority - a.priority || a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id)
}

// nodes are never changed in place, so a node's parsed available_at holds for its life; the file
// store claims from one set of nodes again and again, and Date.parse was a third of a claim's CPU
const availableAt = new WeakMap<TaskNode, number>()

/** PENDING, of `type`, available now, and every dependency COMPLETED. */
export function claimable (task: TaskNode, type: string, now: Date, status: (id: string) => TaskNode['status'] | undefined): boolean {
  if (task.status !== 'PENDING' || task.type !== type) return false
  let at = availableAt.get(task)
  if (at === undefined) {
    at = Date.parse(task.available_at)
    availableAt.set(task, at)
  }
  return at <= now.getTime() && task.dependency_ids.every((dep) => status(dep) === 'COMPLETED')
}

/** PENDING → IN_PROGRESS for `owner`, attempt + 1, leased until now + `leaseMs`. */
export function claimNode (task: TaskNode, owner: string, leaseMs: number, now: Date): TaskNode {
  const at = now.toISOString()
  return {
    ...task,
    status: 'IN_PROGRESS',
    owner,
    attempt: task.attempt + 1,
    lease_expires_at: new Date(now.getTime() + leaseMs).toISOString(),
    last_heartbeat_at: at,
    updated_at: at
  }
}

/** The fencing check: the task is IN_PROGRESS under exactly this claim. */
export function assertClaim (task: TaskNode, token: ClaimToken): void {
  if (task.status !== 'IN_PROGRESS' || task.owner !== token.owner || task.attempt !== token.attempt) {
    throw new AH_ERR_TASK_STALE_CLAIM(task.id, token.owner, token.attempt)
  }
}

/** A heartbeat: the lease is extended and `last_heartbeat_at` stamped. */
export function heartbeatNode (task: TaskNode, token: ClaimToken, leaseMs: number, now: Date): TaskNode {
  assertClaim(task, token)
  return { ...task, last_heartbeat_at: now.toISOString(), lease_expires_at: new Date(now.getTime() + leaseMs).toISOString(), updated_at: now.toISOString() }
}

export function completeNode (task: TaskNode, token: ClaimToken, outputs: JsonObject, now: Date): TaskNode {
  assertClaim(task, token)
  return { ...task, status: 'COMPLETED', outputs, lease_expires_at: null, error: null, updated_at: now.toISOString() }
}

/**
 * Back to PENDING after `delayMs` when the failure is retryable and attempts remain, else FAILED.
 * Used for a worker's failure and for the reaper's expired lease alike.
 */
export function retryOrFail (task: TaskNode, failure: TaskFailure, delayMs: number, now: Date): TaskNode {
  const error = { reason: failure.reason, retryable: failure.retryable, attempt: task.attempt, ...(failure.details !== undefined ? { details: failure.details } : {}) }
  const retry = failure.retryable && task.attempt < task.max_attempts
  return {
    ...task,
    status: retry ? 'PENDING' : 'FAILED',
    owner: retry ? null : task.owner,
    lease_expires_at: null,
    available_at: retry ? new Date(now.getTime() + delayMs).toISOString() : task.available_at,
    error,
    updated_at: now.toISOString()
  }
}

export function failNode (task: TaskNode, token: ClaimToken, failure: TaskFailure, delayMs: number, now: Date): TaskNode {
  assertClaim(task, token)
  return retryOrFail(task, failure, delayMs, now)
}

/**
 * IN_PROGRESS → PENDING at once, and the attempt does not count: its worker was stopped (a graceful
 * shutdown), the task did not fail.
 */
export function releaseNode (task: TaskNode, token: ClaimToken, now: Date): TaskNode {
  assertClaim(task, token)
  const at = now.toISOString()
  return { ...task, status: 'PENDING', owner: null, attempt: task.attempt - 1, lease_expires_at: null, available_at: at, updated_at: at }
}

/**
 * IN_PROGRESS → WAITING: the agent asked a person (a host call marked `require_approval`). The claim
 * is given back as by {@link releaseNode} (no owner, no lease, the attempt not counted), and
 * `metadata` keeps the questions asked so far and the host calls to replay. A wait with no open
 * question is refused: nobody could ever answer it.
 */
export function waitNode (task: TaskNode, token: ClaimToken, wait: TaskWait, now: Date): TaskNode {
  assertClaim(task, token)
  if (!wait.approvals.some((a) => a.answer === undefined)) throw new AH_ERR_TASK_STATE(task.id, task.status, 'wait with no open approval')
  const at = now.toISOString()
  return {
    ...task,
    status: 'WAITING',
    owner: null,
    attempt: task.attempt - 1,
    lease_expires_at: null,
    metadata: { ...task.metadata, approvals: wait.approvals, host_calls: wait.host_calls },
    updated_at: at
  }
}

/**
 * A person's answer to one of a WAITING task's approvals; once none is left open the task is
 * PENDING again, claimable at once (its agent is entered from the start, its earlier host calls
 * replayed). An approval takes one answer.
 * @throws AH_ERR_TASK_APPROVAL_NOT_FOUND (404) for an id the task never asked
 * @throws AH_ERR_INTERRUPT_CLOSED (409) for one answered already, or a task that no longer waits (cancelled)
 */
export function answerNode (task: TaskNode, approvalId: string, answer: Omit<TaskApprovalAnswer, 'at'>, now: Date): TaskNode {
  const approvals = approvalsOf(task)
  const asked = approvals.find((a) => a.id === approvalId)
  if (asked === undefined) throw new AH_ERR_TASK_APPROVAL_NOT_FOUND(task.id, approvalId)
  if (asked.answer !== undefined) throw new AH_ERR_INTERRUPT_CLOSED(approvalId, 'it was answered already')
  if (task.status !== 'WAITING') throw new AH_ERR_INTERRUPT_CLOSED(approvalId, `its task is ${task.status}`)
  const at = now.toISOString()
  const given: TaskApprovalAnswer = { approved: answer.approved, ...(answer.comment !== undefined ? { comment: answer.comment } : {}), by: answer.by, at }
  const next = approvals.map((a) => a.id === approvalId ? { ...a, answer: given } : a)
  const open = next.some((a) => a.answer === undefined)
  return {
    ...task,
    status: open ? 'WAITING' : 'PENDING',
    available_at: open ? task.available_at : at,
    metadata: { ...task.metadata, approvals: next },
    updated_at: at
  }
}

/** An IN_PROGRESS task whose lease has run out. */
export function leaseExpired (task: TaskNode, now: Date): boolean {
  return task.status === 'IN_PROGRESS' && task.lease_expires_at !== null && Date.parse(task.lease_expires_at) <= now.getTime()
}

/** PENDING, IN_PROGRESS or WAITING → CANCELLED; anything else is final. */
export function cancelNode (task: TaskNode, now: Date): TaskNode {
  if (task.status !== 'PENDING' && task.status !== 'IN_PROGRESS' && task.status !== 'WAITING') throw new AH_ERR_TASK_STATE(task.id, task.status, 'cancel')
  return { ...task, status: 'CANCELLED', lease_expires_at: null, updated_at: now.toISOString() }
}
