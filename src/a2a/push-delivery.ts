import { setTimeout as sleep } from 'node:timers/promises'
import { StreamResponse } from '@a2a-js/sdk'
import type { StreamPacket } from '../protocol/packets.js'
import type { A2APushStore, ClaimedPushConfig } from '../storage/a2a-push.js'
import type { Awaitable } from '../storage/awaitable.js'
import type { RunReader } from '../storage/run-ledger.js'
import type { RunRecord } from '../storage/runs.js'
import type { PushSender } from './push-sender.js'
import type { TaskProjection } from './task-projection.js'

/** How one process pushes updates. */
export interface PushDeliverySettings {
  /** How often to look for updates to push (configs other processes made, runs other processes journal). */
  pollMs: number
  /** How long one POST may take (A2A_PUSH_TIMEOUT_MS). */
  timeoutMs: number
  /** How long one write may wait for another process's lock (DB_WRITE_BUDGET_MS). */
  writeBudgetMs: number
  /** The wait before a failed update's second attempt, doubling after each. */
  retryBaseMs: number
  /** Attempts of one update before its config is `failed`. */
  maxAttempts: number
}

export interface PushDeliveryOptions {
  store: A2APushStore
  runs: RunReader
  /** How a write of the store is made durable (SQLite: the group writer; PostgreSQL: the store's own transaction). */
  write: <T>(write: () => Awaitable<T>) => Promise<T>
  sender: PushSender
  /** The task a run is before its first packet (the same seed `GetTask` replays the journal onto). */
  projectionOf: (record: RunRecord) => TaskProjection
  settings: PushDeliverySettings
  log: { warn(obj: object, msg?: string): void, error(obj: object, msg?: string): void }
}

/** Configs pushed at once by one process (each to its own receiver, in order). */
const CONCURRENCY = 16
/** Journal rows read at a time. */
const PAGE = 200
/** The longest wait between two attempts of an update. */
const MAX_BACKOFF_MS = 300_000
/** Tasks as pushed so far this process keeps (the configs of running tasks between their packets); past it, the oldest is replayed again when needed. */
const MAX_KEPT = 1024

/** What this process knows of a config it pushes: the task as pushed so far, so the next packets continue it. */
interface Progress {
  cursor: number
  delivered: number
  projection: TaskProjection
}

/** One round of pushing a claimed config. */
interface Job {
  config: ClaimedPushConfig
  /** Failed attempts of the pending update. */
  attempts: number
  /** The last status a receiver answered in this round. */
  status: number | null
  progress: Progress
  signal: AbortSignal
}

/**
 * The delivery loop of A2A push notifications: durable, in order, at least once. Each config has a
 * cursor into its task's journal (the last `ord` pushed); its updates are the events a streaming
 * client gets (`TaskProjection` over the journal): first the task itself (as it stood when the
 * config began), then one POST per event, each only after the one before was answered 2xx. After
 * each packet's events the cursor is stored, so a restart (or another process) goes on from there:
 * an update may come twice after a crash, never be missed. A failed POST is tried again after a
 * backoff that doubles (at most five minutes), `maxAttempts` times, then the config is `failed`.
 * The task's final status pushed, the config is `done`.
 *
 * Configs are leased, with a fencing token, to the process pushing them, so two processes sharing
 * a database never push one config at once; a lease lapses if its holder stops, and a holder whose
 * lease was taken stores nothing more.
 */
export class PushDelivery {
  readonly #o: PushDeliveryOptions
  readonly #leaseMs: number
  readonly #closing = new AbortController()
  readonly #active = new Set<Promise<void>>()
  readonly #progress = new Map<number, Progress>()
  #wake: (() => void) | undefined
  #woken = false
  #loop: Promise<void> | undefined

  constructor (options: PushDeliveryOptions) {
    this.#o = options
    // a holder stores its progress after every POST, renewing its lease: the lease outlasts a POST and a write, three times over
    this.#leaseMs = 3 * (options.settings.timeoutMs + options.settings.writeBudgetMs)
  }

  /** Start pushing (idempotent). */
  start (): void {
    this.#loop ??= this.#run()
  }

  /** Look for work now (a config was made, or a job ended). */
  wake (): void {
    this.#woken = true
    this.#wake?.()
  }

  /** Stop: POSTs in flight are aborted (their updates come again later), leases released, connections closed. */
  async close (): Promise<void> {
    this.#closing.abort(new Error('push notifications are closing'))
    this.wake()
    await this.#loop
    this.#o.sender.close()
  }

  async #run (): Promise<void> {
    const signal = this.#closing.signal
    while (!signal.aborted) {
      this.#woken = false
      let wait = this.#o.settings.pollMs
      try {
        const claimed = await this.#o.write(() => this.#o.store.claim(Date.now(), this.#leaseMs, CONCURRENCY - this.#active.size))
        for (const config of claimed) this.#track(config, signal)
        const due = await this.#o.store.nextRetry(Date.now())
        if (due !== undefined) wait = Math.min(wait, Math.max(0, due - Date.now()))
      } catch (err) {
        this.#o.log.error({ err }, 'looking for push notifications to send failed; trying again')
      }
      await this.#idle(wait, signal)
    }
    await Promise.allSettled([...this.#active])
  }

  #track (config: ClaimedPushConfig, signal: AbortSignal): void {
    const job: Promise<void> = this.#push(config, signal)
      .catch((err: unknown) => {
        this.#progress.delete(config.seq)
        this.#o.log.error({ err, task: config.task_id, config: config.id }, 'pushing a task\'s updates failed; its lease lapses and it is tried again')
      })
      .finally(() => {
        this.#active.delete(job)
        this.wake()
      })
    this.#active.add(job)
  }

  /** Wait `wait` ms (until the poll, or the next retry), or less when woken. */
  async #idle (wait: number, signal: AbortSignal): Promise<void> {
    if (this.#woken || signal.aborted) return
    const woken = new Promise<void>((resolve) => { this.#wake = resolve })
    await Promise.race([woken, sleep(wait, undefined, { signal }).catch(() => {})])
    this.#wake = undefined
  }

  /** Push a claimed config's pending updates, in order, until none is left, one fails, or its lease is lost. */
  async #push (config: ClaimedPushConfig, signal: AbortSignal): Promise<void> {
    const { store, runs, write } = this.#o
    const record = await runs.get(config.run_key)
    // its run was pruned since: the config went with it
    if (record === undefined) return
    const job: Job = { config, attempts: config.attempts, status: null, progress: await this.#resume(config, record), signal }
    const { progress } = job
    if (progress.delivered === 0) {
      if (!await this.#post(job, { payload: { $case: 'task', value: progress.projection.task() } })) return
      progress.delivered = 1
      if (!await this.#store(job)) return
    }
    for (;;) {
      // the run's state before its rows: ended then, every row it will ever have is in what follows
      const ended = (await runs.get(config.run_key))?.state === 'ended'
      const rows = await runs.rows(config.run_key, progress.cursor, PAGE)
      if (rows.length === 0) {
        if (ended) await this.#finish(job)
        else await write(() => store.release(config.seq, config.lease_token))
        return
      }
      for (const row of rows) {
        // a packet kept off the wire, or one that changes nothing a client sees, is passed over without a POST
        const events = row.seq === null ? [] : progress.projection.apply(JSON.parse(row.frame) as StreamPacket)
        for (const event of events) {
          if (!await this.#post(job, event)) return
          progress.delivered++
        }
        progress.cursor = row.ord
        // stored after every POST, which renews the lease: it runs out only when its holder stops
        if (events.length > 0 && !await this.#store(job)) return
        if (progress.projection.ended) { await this.#finish(job); return }
      }
      // the packets passed over at the end of the page
      if (!await this.#store(job)) return
    }
  }

  /**
   * POST one update. A failure is stored (with its backoff, or the config given up) and the lease
   * released; closing, the lease is only released. Returns whether the receiver took it.
   */
  async #post (job: Job, event: StreamResponse): Promise<boolean> {
    const { store, write, sender, settings } = this.#o
    const { config } = job
    const target = { url: config.url, token: config.token, ...(config.auth_scheme !== null ? { authentication: { scheme: config.auth_scheme, credentials: config.auth_credentials as string } } : {}) }
    const outcome = await sender.send(target, JSON.stringify(StreamResponse.toJSON(event)), `${config.id}/${job.progress.delivered + 1}`, job.signal)
    if (outcome.ok) {
      job.status = outcome.status
      return true
    }
    // the projection took the packet whose update failed: the next attempt replays the journal
    this.#progress.delete(config.seq)
    if (job.signal.aborted) {
      await write(() => store.release(config.seq, config.lease_token)).catch(() => {})
      return false
    }
    const attempts = job.attempts + 1
    const retryAt = attempts >= settings.maxAttempts ? null : Date.now() + Math.min(settings.retryBaseMs * 2 ** (attempts - 1), MAX_BACKOFF_MS)
    await write(() => store.fail(config.seq, config.lease_token, { status: outcome.status, error: outcome.error, retryAt }))
    this.#o.log.warn({ task: config.task_id, config: config.id, update: job.progress.delivered + 1, attempt: attempts, status: outcome.status, err: outcome.error, ...(retryAt === null ? {} : { retry_at: new Date(retryAt).toISOString() }) },
      retryAt === null ? 'a push notification failed its last attempt: the config is marked failed' : 'a push notification failed; it is tried again later')
    return false
  }

  /** Store the progress (cursor, count, last status); false when the lease was lost (taken, or the config deleted). */
  async #store (job: Job): Promise<boolean> {
    const { config, progress } = job
    const expiresAt = Date.now() + this.#leaseMs
    const stored = await this.#o.write(() => this.#o.store.advance(config.seq, config.lease_token, { cursor: progress.cursor, delivered: progress.delivered, status: job.status }, expiresAt))
    if (!stored) {
      this.#progress.delete(config.seq)
      return false
    }
    job.attempts = 0
    return true
  }

  async #finish (job: Job): Promise<void> {
    this.#progress.delete(job.config.seq)
    await this.#o.write(() => this.#o.store.finish(job.config.seq, job.config.lease_token))
  }

  /** The task as pushed up to the config's cursor: kept from this process's last round, or replayed from the journal. */
  async #resume (config: ClaimedPushConfig, record: RunRecord): Promise<Progress> {
    const known = this.#progress.get(config.seq)
    if (known !== undefined && known.cursor === config.cursor && known.delivered === config.delivered) return known
    const projection = this.#o.projectionOf(record)
    for (let after = 0; after < config.cursor;) {
      const rows = await this.#o.runs.rows(config.run_key, after, PAGE)
      for (const row of rows) {
        if (row.ord > config.cursor) break
        if (row.seq !== null) projection.apply(JSON.parse(row.frame) as StreamPacket)
      }
      after = rows.length === 0 ? config.cursor : (rows.at(-1) as { ord: number }).ord
    }
    const progress = { cursor: config.cursor, delivered: config.delivered, projection }
    this.#progress.set(config.seq, progress)
    if (this.#progress.size > MAX_KEPT) this.#progress.delete(this.#progress.keys().next().value as number)
    return progress
  }
}
