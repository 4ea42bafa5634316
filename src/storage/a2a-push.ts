import type { Awaitable } from './awaitable.js'
import type { AuditInput } from './audit.js'
import type { SecretKeyring } from './secret-keyring.js'
import { secretContext } from './secrets.js'
import type { Viewer } from './tenants.js'

/** Where a config's delivery stands: pushing (`active`), the task's final status pushed (`done`), or given up (`failed`). */
export type PushState = 'active' | 'done' | 'failed'

/** An A2A push notification config of one task, with its delivery state. Times are ms since the epoch. */
export interface PushConfigRecord {
  /** Its place in the table (the delivery-state list's cursor). */
  seq: number
  /** The run (the task) it belongs to: the run's key. */
  run_key: string
  /** The config's id, unique within its task. */
  id: string
  /** The task's id as its caller knows it (the run's request id). */
  task_id: string
  agent_id: string
  /** Who the task belongs to (the run's owner); null for runs stored before owners were recorded. */
  owner_key: string | null
  /** Who made the config (the task's owner, or an admin). */
  created_by: string
  url: string
  /** The config's token: sent in `X-A2A-Notification-Token`, and the key of every update's signature. */
  token: string
  auth_scheme: string | null
  auth_credentials: string | null
  created_at: number
  updated_at: number
  /** The last journal `ord` pushed (or passed over: a packet that makes no update); updates after it are pending. */
  cursor: number
  /** Updates pushed so far; the first is the task itself. */
  delivered: number
  /** Failed attempts of the pending update (0 after a success). */
  attempts: number
  last_status: number | null
  last_error: string | null
  /** When the pending update may be tried (again). */
  next_attempt_at: number
  state: PushState
  /** The fencing token of the process pushing it now; only its holder's writes count. Set with both auth fields or neither. */
  lease_token: string | null
  lease_expires_at: number | null
}

/** What {@link A2APushStore.save} stores: the config itself (its delivery state starts, or goes on, in the store). */
export type NewPushConfig = Pick<PushConfigRecord, 'run_key' | 'id' | 'task_id' | 'agent_id' | 'owner_key' | 'created_by' | 'url' | 'token' | 'auth_scheme' | 'auth_credentials'>

/** A config leased to this process, with the state of its run. */
export interface ClaimedPushConfig extends PushConfigRecord {
  lease_token: string
  lease_expires_at: number
  /** The run's state when it was claimed. */
  run_state: 'running' | 'ended'
}

/** One line of the delivery-state list: a config (without its secrets) and how far its pushes are. */
export interface PushDeliveryRow {
  seq: number
  id: string
  task_id: string
  agent_id: string
  url: string
  state: PushState
  delivered: number
  /** Journal packets after the cursor (and the task itself while it was not pushed yet): an estimate of the updates to come. */
  pending: number
  attempts: number
  last_status: number | null
  last_error: string | null
  next_attempt_at: number
  created_at: number
}

/**
 * A2A push notification configs and their delivery state. Each config keeps a cursor into its
 * task's journal (the last `ord` pushed), so a restart, or another process, resumes where the last
 * one stopped. A config is pushed by one process at a time: {@link A2APushStore.claim} leases it
 * under a fencing token, and every write of its holder presents the token (false: the lease lapsed
 * and was taken or released, nothing changed). One contract, two stores: {@link SqlitePushStore}
 * answers at once (inside the group writer), `PgPushStore` (`storage/postgres/a2a-push.ts`) with
 * promises; callers `await` every call. Times are ms since the epoch.
 */
export interface A2APushStore {
  /**
   * Store a config, or replace the URL and credentials of the task's config with the same id (its
   * delivery goes on from where it is; a `failed` one is tried again). A new config starts `from`
   * the start of the task's journal (its first update is the task as submitted) or from `now` (the
   * task as it stands, then the updates after it).
   */
  save(config: NewPushConfig, from: 'start' | 'now', now: number): Awaitable<PushConfigRecord>
  get(runKey: string, id: string): Awaitable<PushConfigRecord | undefined>
  /** A task's configs, oldest first. */
  list(runKey: string): Awaitable<PushConfigRecord[]>
  /** Delete a task's config; false when it has none of that id. */
  delete(runKey: string, id: string): Awaitable<boolean>
  /**
   * Lease up to `limit` `active` configs that have something to push now (the task itself not
   * pushed yet, journal packets after the cursor, or a run that ended), are due, and are not leased
   * elsewhere: each under a fencing token of its own, until `now + leaseMs`. Soonest due first.
   */
  claim(now: number, leaseMs: number, limit: number): Awaitable<ClaimedPushConfig[]>
  /**
   * Updates were pushed (or packets passed over) up to journal `cursor`: `delivered` in all, the
   * last answered `status` (null when nothing was sent). Clears the failures; extends the lease to
   * `expiresAt`. Fenced by `token`.
   */
  advance(seq: number, token: string, progress: { cursor: number, delivered: number, status: number | null }, expiresAt: number): Awaitable<boolean>
  /**
   * An attempt failed: count it, keep its status and error, and either wait until `retryAt` (the
   * lease is released) or, with `retryAt` null, give up: the config is `failed`. Fenced.
   */
  fail(seq: number, token: string, failure: { status: number | null, error: string, retryAt: number | null }): Awaitable<boolean>
  /** The task's final status was pushed (or its run ended with nothing left to push): `done`, and the lease released. Fenced. */
  finish(seq: number, token: string): Awaitable<boolean>
  /** Give the lease up (nothing more to push now, or closing). Fenced. */
  release(seq: number, token: string): Awaitable<boolean>
  /** When the next `active` config waiting for a retry falls due (after `now`), if one waits. */
  nextRetry(now: number): Awaitable<number | undefined>
  /**
   * The delivery state of configs after `after` (by seq), oldest first, at most `limit` (100): only
   * those of `owner`'s tasks when given, of one task (its A2A task id) or in one state when asked.
   */
  deliveries(query: { after?: number, limit?: number, viewer?: Viewer, taskId?: string, state?: PushState }): Awaitable<PushDeliveryRow[]>
}

/**
 * How a task's configs change together with their audit row, in one transaction: `decide` is given
 * the task's configs as they are (no other change of that task's configs can come between) and
 * returns what to store and the audit row, or throws to refuse (nothing is written).
 */
export interface PushConfigChanges {
  save(runKey: string, decide: (known: PushConfigRecord[]) => { config: NewPushConfig, audit: AuditInput }, from: 'start' | 'now', now: number): Promise<PushConfigRecord>
  /** Delete the task's config `id`, with `audit` when there was one; false when there was none. */
  delete(runKey: string, id: string, audit: AuditInput): Promise<boolean>
}

/** `fn` of `value`, at once when it is there, else when it comes (so a synchronous store stays synchronous). */
function mapAwaitable<T, U> (value: Awaitable<T>, fn: (v: T) => U): Awaitable<U> {
  return value instanceof Promise ? value.then(fn) : fn(value)
}

/**
 * A driver's push stores with the configs' secrets (`token`, `auth_credentials`) sealed on the way
 * in and opened on the way out, each bound to its config (`a2a_push_configs.<column>` of its run key
 * and id): callers see plain values, the database holds none. Done here, at the stores' edge, so
 * both drivers' SQL stays free of keys and contexts, and both seal alike.
 */
export function sealedPushStores (push: { store: A2APushStore, changes: PushConfigChanges }, keyring: SecretKeyring): { store: A2APushStore, changes: PushConfigChanges } {
  const seal = (config: NewPushConfig): NewPushConfig => ({
    ...config,
    token: keyring.seal(config.token, secretContext('a2a_push_configs', 'token', [config.run_key, config.id])),
    auth_credentials: config.auth_credentials === null ? null : keyring.seal(config.auth_credentials, secretContext('a2a_push_configs', 'auth_credentials', [config.run_key, config.id]))
  })
  const open = <R extends PushConfigRecord>(record: R): R => ({
    ...record,
    token: keyring.open(record.token, secretContext('a2a_push_configs', 'token', [record.run_key, record.id])),
    auth_credentials: record.auth_credentials === null ? null : keyring.open(record.auth_credentials, secretContext('a2a_push_configs', 'auth_credentials', [record.run_key, record.id]))
  })
  const inner = push.store
  const store: A2APushStore = {
    save: (config, from, now) => mapAwaitable(inner.save(seal(config), from, now), open),
    get: (runKey, id) => mapAwaitable(inner.get(runKey, id), (found) => found === undefined ? undefined : open(found)),
    list: (runKey) => mapAwaitable(inner.list(runKey), (found) => found.map(open)),
    delete: (runKey, id) => inner.delete(runKey, id),
    claim: (now, leaseMs, limit) => mapAwaitable(inner.claim(now, leaseMs, limit), (found) => found.map(open)),
    advance: (seq, token, progress, expiresAt) => inner.advance(seq, token, progress, expiresAt),
    fail: (seq, token, failure) => inner.fail(seq, token, failure),
    finish: (seq, token) => inner.finish(seq, token),
    release: (seq, token) => inner.release(seq, token),
    nextRetry: (now) => inner.nextRetry(now),
    deliveries: (query) => inner.deliveries(query)
  }
  const changes: PushConfigChanges = {
    save: async (runKey, decide, from, now) => open(await push.changes.save(runKey, (known) => {
      const change = decide(known.map(open))
      return { config: seal(change.config), audit: change.audit }
    }, from, now)),
    delete: async (runKey, id, audit) => await push.changes.delete(runKey, id, audit)
  }
  return { store, changes }
}
