import type { ServiceRequest } from '../protocol/envelope.js'
import type { Awaitable } from './awaitable.js'
import type { AuditInput } from './audit.js'
import type { RunRecord } from './runs.js'

/** What an interrupt asks for: a value (`input`, matching its schema) or a yes or no (`approval`). */
export type InterruptKind = 'input' | 'approval'

/** An approval's answer. */
export interface ApprovalAnswer {
  approved: boolean
  comment?: string
}

/** Who answered an interrupt, when, with what, in which request. */
export interface InterruptAnswer {
  /** The input (for `input`), or an {@link ApprovalAnswer} (for `approval`). */
  value: unknown
  /** The principal that answered (the run's owner, or an admin). */
  by: string
  /** When, ms since the epoch. */
  at: number
  /** The run key of the request that carried the answer (answers are idempotent by request id). */
  request: string
}

/** One question a run asked. Its id is a UUID made when it was first asked, never reused. */
export interface InterruptRecord {
  id: string
  kind: InterruptKind
  message: string
  /** The JSON Schema an `input` answer must match. */
  schema?: Record<string, unknown>
  /** What the approval is of (a tool call's `{ tool, action, args }`, an A2A call's `{ agent, capability, payload }`). */
  call?: Record<string, unknown>
  /** Asked by the host rather than by the agent: `auth` for credentials (A2A's `auth-required`). */
  reason?: 'auth'
  /** Past this time (ms since the epoch) the interrupt can no longer be answered. */
  expires_at: number
  answer?: InterruptAnswer
}

/** One recorded call the agent made through its host (a backend's answer, a tool's, a remote agent's), replayed after an answer instead of made again. */
export interface MemoEntry {
  /** What was called and with what: a hash of the call. */
  key: string
  /** What it answered (JSON). */
  result: unknown
}

/**
 * Where a waiting run stands: `waiting` (open interrupts, no process holds it), `resuming` (an
 * answer was taken: a run of the request that carried it goes on), `ended` (it went on to its end,
 * or was cancelled), `expired` (an interrupt expired before its answer).
 */
export type WaitState = 'waiting' | 'resuming' | 'ended' | 'expired'

/**
 * A run that stopped to ask, and everything needed to go on without holding a process: the first
 * request (its envelope: the agent is entered again with it), the interrupts asked so far (in the
 * order the agent asked them) with their answers, and the host calls it made (replayed). One per
 * chain of runs: the first run's key names it; each run that goes on after an answer adds to it.
 */
export interface WaitingRun {
  /** The run key of the chain's first run (its A2A task). */
  run_key: string
  /** The first run's request id as its caller sent it (the A2A task id). */
  request_id: string
  owner_key: string
  session_id: string
  agent_id: string
  state: WaitState
  /** Bumped by each change: a change presents the version it read. */
  version: number
  /** The run key of the chain's latest run (the one that asked last, or goes on now). */
  last_run: string
  /** The first request's envelope (JSON), as the agent is entered with it again. */
  envelope: string
  interrupts: InterruptRecord[]
  memo: MemoEntry[]
  created_at: number
  updated_at: number
}

/** The open interrupts of a waiting run: not answered yet. */
export function openInterrupts (run: Pick<WaitingRun, 'interrupts'>): InterruptRecord[] {
  return run.interrupts.filter((i) => i.answer === undefined)
}

/**
 * Waiting runs (human in the loop). A run that interrupts is stored here when it ends; an answer
 * {@link InterruptStore.take}s it (compare and set on its version, with the answers' audit rows in
 * the same transaction), and the run that goes on {@link InterruptStore.save}s it again, asking
 * more, or {@link InterruptStore.settle}s it. Nothing here holds a timer or a process: expiry is
 * checked when someone looks. One contract, two stores: `SqliteInterruptStore` answers at once
 * (inside the group writer), `PgInterruptStore` with promises.
 */
export interface InterruptStore {
  /** Store a chain as it stands now (insert, or replace the one of the same `run_key` if its version is `version - 1`). False: another change came first. */
  save(run: WaitingRun): Awaitable<boolean>
  get(runKey: string): Awaitable<WaitingRun | undefined>
  /** The chains of a session, whatever their state, oldest first. */
  inSession(sessionId: string): Awaitable<WaitingRun[]>
  /** The waiting chains whose first request had this id, whoever sent it (an admin's lookup). */
  waitingByRequestId(wireId: string): Awaitable<WaitingRun[]>
  /** The chain whose run `lastRun` is (the run that asked last, or goes on now). */
  byLastRun(lastRun: string): Awaitable<WaitingRun | undefined>
  /**
   * Take answers: store `run` (its interrupts answered, its state `resuming`, its version one more
   * than the stored one's) only if the stored version is `run.version - 1`, and append `audit`, in one
   * transaction. False: another answer came first (nothing changed).
   */
  take(run: WaitingRun, audit: readonly AuditInput[]): Awaitable<boolean>
  /**
   * Delete the chains done with before `before` (ended, expired, or going on since then: a run that
   * went on and never came back; or waiting on questions that all
   * expired then), as the run journals are pruned (JOURNAL_RETENTION_MS). Returns how many.
   */
  prune(before: number): Awaitable<number>
  /** Mark a chain `ended` or `expired` (whatever its version). */
  settle(runKey: string, state: 'ended' | 'expired', now: number): Awaitable<void>
}

/** A chain's row: its fields, with the JSON ones as text, and when its last open question expires (ms; 0 when none is open: a waiting chain past it is pruned). */
export type WaitingRunRow = Omit<WaitingRun, 'interrupts' | 'memo'> & { interrupts: string, memo: string, expires_at: number }

/** A chain from its row. */
export function waitingRunOf ({ expires_at: _expires, ...row }: WaitingRunRow): WaitingRun {
  return { ...row, version: Number(row.version), created_at: Number(row.created_at), updated_at: Number(row.updated_at), interrupts: JSON.parse(row.interrupts) as InterruptRecord[], memo: JSON.parse(row.memo) as MemoEntry[] }
}

/** A chain as its row. */
export function rowOf (run: WaitingRun): WaitingRunRow {
  const open = openInterrupts(run).map((i) => i.expires_at)
  return { ...run, interrupts: JSON.stringify(run.interrupts), memo: JSON.stringify(run.memo), expires_at: open.length === 0 ? 0 : Math.max(...open) }
}

/** Whether a run answers questions (its payload has `resume`): it goes on with a chain, whose task it is part of. */
export function answersQuestions (record: RunRecord): boolean {
  const payload = (JSON.parse(record.envelope) as ServiceRequest).payload.payload
  return typeof payload === 'object' && payload !== null && 'resume' in payload
}

/**
 * The chain a run is part of (human in the loop: `storage/interrupts.ts:WaitingRun`), if any: as
 * its first run (which stopped to ask), or as a later one (which carried answers).
 */
export async function chainOf (interrupts: InterruptStore, record: RunRecord): Promise<WaitingRun | undefined> {
  if (answersQuestions(record)) {
    return await interrupts.byLastRun(record.request_id) ??
      (await interrupts.inSession(record.session_id)).find((c) => c.interrupts.some((i) => i.answer?.request === record.request_id))
  }
  // the first run of a chain ends `input_required` (its chain is stored just before)
  if (record.state === 'ended' && record.end_reason !== 'input_required') return undefined
  return await interrupts.get(record.request_id)
}

/** The run keys of a chain, in the order they ran: the first, then each that carried answers, then the latest. */
export function chainRunKeys (chain: WaitingRun): string[] {
  const keys = [chain.run_key]
  const answers = chain.interrupts.flatMap((i) => i.answer !== undefined ? [i.answer] : []).sort((a, b) => a.at - b.at)
  for (const key of [...answers.map((a) => a.request), chain.last_run]) if (!keys.includes(key)) keys.push(key)
  return keys
}

/** Whether a chain waits for its caller now: an answer can go on with it (no open question has expired). */
export function waitsForAnswer (chain: WaitingRun, now = Date.now()): boolean {
  return chain.state === 'waiting' && !openInterrupts(chain).some((i) => i.expires_at <= now)
}
