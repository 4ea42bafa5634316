import type { ClaimToken, JsonObject, NewTask, TaskApprovalAnswer, TaskFailure, TaskNode, TaskQuery, TaskWait } from './task.js'

/**
 * Where the task graph lives. Every operation is atomic across the processes sharing DATA_DIR.
 * Mutations by a worker present its {@link ClaimToken}; a stale one throws `AH_ERR_TASK_STALE_CLAIM` and
 * changes nothing. Two implementations pass the same contract tests: the file store (default) and
 * the SQLite store (`TASK_STORE=sqlite`).
 */
export interface TaskStore {
  /** Create tasks (one, or a graph whose members depend on each other). All or nothing. */
  create(batch: NewTask[]): Promise<TaskNode[]>
  get(id: string): Promise<TaskNode | undefined>
  /** Tasks matching `query`, oldest first. */
  list(query?: TaskQuery): Promise<TaskNode[]>
  /** Claim the best claimable task of `type` for `owner`: highest priority, then oldest. */
  claim(type: string, owner: string, leaseMs: number): Promise<TaskNode | undefined>
  /** Extend the lease and stamp `last_heartbeat_at`. */
  heartbeat(id: string, token: ClaimToken, leaseMs: number): Promise<TaskNode>
  complete(id: string, token: ClaimToken, outputs: JsonObject): Promise<TaskNode>
  /** Back to PENDING with backoff when retryable and attempts remain, else FAILED. */
  fail(id: string, token: ClaimToken, failure: TaskFailure): Promise<TaskNode>
  /** Give a claimed task back (its worker is shutting down): PENDING at once, the attempt not counted. */
  release(id: string, token: ClaimToken): Promise<TaskNode>
  /**
   * The claimed task's agent asked a person (a host call marked `require_approval`): WAITING, the
   * claim given back as by {@link TaskStore.release}, with the questions and the host calls to replay
   * in `metadata` (`task-graph.ts:waitNode`).
   */
  wait(id: string, token: ClaimToken, wait: TaskWait): Promise<TaskNode>
  /**
   * A person's answer to approval `approvalId` of a WAITING task; PENDING again once none is open
   * (`task-graph.ts:answerNode`). Of two answers to one approval one wins, the other is refused.
   */
  answer(id: string, approvalId: string, answer: Omit<TaskApprovalAnswer, 'at'>): Promise<TaskNode>
  /** PENDING, IN_PROGRESS or WAITING → CANCELLED. */
  cancel(id: string): Promise<TaskNode>
  /** Return IN_PROGRESS tasks whose lease expired to PENDING (or FAILED after max_attempts). */
  reap(): Promise<TaskNode[]>
  close(): Promise<void>
}

/** Knobs shared by the stores (tests set a clock and short backoffs). */
export interface TaskStoreOptions {
  now?: () => Date
  /** First retry delay; doubles per attempt, with jitter. */
  retryBaseMs?: number
  retryCapMs?: number
}
