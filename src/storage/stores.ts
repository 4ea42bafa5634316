import type { FastifyRateLimitStoreCtor } from '@fastify/rate-limit'
import type { Tracer } from '@opentelemetry/api'
import type { A2APushStore, PushConfigChanges } from './a2a-push.js'
import type { StoredSecrets } from './secrets.js'
import type { KeyStore } from './api-keys.js'
import type { AuditStore } from './audit.js'
import type { Awaitable } from './awaitable.js'
import type { BudgetStore } from './budgets.js'
import type { BusStore } from './bus.js'
import type { EventLog } from './events.js'
import type { RunLedger } from './run-ledger.js'
import type { InterruptStore } from './interrupts.js'
import type { McpSessionStore } from './mcp-sessions.js'
import type { HostSessionStore } from './sessions.js'
import type { TaskNarrator } from './tasks/narration.js'
import type { TaskStore } from './tasks/task-store.js'

/** The drivers: SQLite under DATA_DIR (one machine), PostgreSQL at DATABASE_URL (any number of instances). */
export type Driver = 'sqlite' | 'postgres'

/**
 * Told before each pending migration step: `index` steps of `pending` are done (a step another
 * process applies first is told too, and then skipped).
 */
export type MigrationProgress = (step: { version: number, description: string }, index: number, pending: number) => void

/** Where a driver reports what it does in the background (pino's methods, a command's lines). */
export interface StoresLog {
  info: (obj: object, msg: string) => void
  warn: (obj: object, msg: string) => void
  error: (obj: object, msg: string) => void
  /** The same log with these fields on every line (pino's `child`); without it, the same log. */
  child?: (bindings: Record<string, unknown>) => StoresLog
}

/** How a process opens its stores. */
export interface StoresOptions {
  /** This process's name in the database: the stream slots' lease holder, PostgreSQL's `application_name`. */
  instanceId: string
  log: StoresLog
  /**
   * A server (true): the background work of serving starts with the stores (SQLite's interaction
   * indexing and WAL checkpoints off the request path; PostgreSQL's `LISTEN` connection, which the
   * run ledger and `/health` need). A command or a worker process (false): none of it, and no run ledger.
   */
  serving: boolean
  /** Told before each pending migration step runs (a command shows it as progress). */
  onMigration?: MigrationProgress
}

/** A driver's audit log opened read-only (`agent-host audit verify`), or why it cannot be (said to the operator). */
export type AuditReader = { audit: AuditStore, close: () => Promise<void> } | { problem: string }

/** The SSE slots of a driver whose per-caller quota is shared by every instance (`http/stream-gate.ts:StreamGate`'s contract, with an async `acquire`). */
export interface SharedStreamSlots {
  /** Streams this instance serves now. */
  readonly open: number
  /** Take a slot for `caller`: the function that gives it back (safe to call twice), or which limit is full. */
  acquire: (caller: string) => Promise<(() => void) | 'caller' | 'total'>
}

/**
 * Everything durable of one deployment, opened by one driver (`storage/sqlite/index.ts`,
 * `storage/postgres/index.ts`) and picked in one place (`plugins/storage.ts:openStores`). Each
 * store is the port of its file in this folder; the drivers add what their tests may look at.
 *
 * Lifecycle: {@link ready} once the process serves; {@link quiesce} stops the background work and
 * commits what is queued (the audit log's last row is written after it); {@link close} closes the
 * database, quiescing first when that was not done (a second call does nothing).
 */
export interface Stores {
  readonly driver: Driver
  /** Everything the run engine reads and writes (a server's only: see {@link StoresOptions.serving}). */
  readonly ledger: RunLedger
  readonly audit: AuditStore
  readonly events: EventLog
  readonly sessions: HostSessionStore
  readonly bus: BusStore
  /** API keys, with those of API_KEYS held beside the stored ones. */
  readonly keys: KeyStore
  /** The task graph where TASK_STORE keeps it (the file store's folder, or this driver's database). */
  readonly tasks: TaskStore
  readonly narrator: TaskNarrator
  /** A2A push configs (each change with its audit row) and their delivery state. */
  readonly push: { store: A2APushStore, changes: PushConfigChanges }
  /** The secrets stored sealed (the push configs' tokens and credentials), the keyring that seals them, and the keys in use. */
  readonly secrets: StoredSecrets
  /** Runs waiting for a person's answer (human in the loop). */
  readonly interrupts: InterruptStore
  /** MCP sessions and their streams' events, and the signals instances exchange about them. */
  readonly mcp: McpSessionStore
  /** Model budgets' counters and the reservations of backend calls in flight, shared by every instance. */
  readonly budgets: BudgetStore
  /** The rate limits' counts shared by every instance, for @fastify/rate-limit; undefined: kept in this process. */
  readonly rateLimits: FastifyRateLimitStoreCtor | undefined
  /** The SSE slots shared by every instance; undefined: counted in this process. */
  readonly streams: SharedStreamSlots | undefined
  /** False while the database cannot be reached (only a server on PostgreSQL can lose it). */
  readonly connected: boolean
  /**
   * Run `op`, a call of this driver's stores, as one durable write: inside the group commit's
   * transaction on SQLite (so `op` must be synchronous there), as it is on PostgreSQL (each store's
   * write is its own transaction).
   */
  write: <T>(op: () => Awaitable<T>) => Promise<T>
  /** Trace each commit of the run engine's writes with `tracer` (SQLite's group writer; PostgreSQL's commits are not traced). */
  trace: (tracer: Tracer | undefined) => void
  /** The process serves now: serving's settings apply (SQLite waits no longer for another process's lock than DB_BUSY_TIMEOUT_MS) and shared slots are leased. */
  ready: () => Promise<void>
  quiesce: () => Promise<void>
  close: () => Promise<void>
}

/** A driver's store made on first use: {@link value} makes it once; {@link made} says whether it was (what `quiesce` must close). */
export class Lazy<T> {
  #make: (() => T) | undefined
  #value: T | undefined

  constructor (make: () => T) {
    this.#make = make
  }

  get value (): T {
    if (this.#make !== undefined) {
      this.#value = this.#make()
      this.#make = undefined
    }
    return this.#value as T
  }

  get made (): boolean { return this.#make === undefined }
}

/** `step` run once however often it is called (a driver's `quiesce` and `close`): every call waits for that run. */
export function runOnce (step: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined
  return async () => {
    running ??= step()
    await running
  }
}
