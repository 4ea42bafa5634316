import type { Awaitable } from './awaitable.js'
import type { Viewer } from './tenants.js'

type Json = Record<string, unknown>

/** One event on the bus, as stored. Times are ms since the epoch. */
export interface BusEvent {
  seq: number
  id: string
  type: string
  key: string
  visibility: 'internal' | 'a2a'
  priority: number
  /** Only these agents' subscriptions get it; null: every matching subscription. */
  target_agents: string[] | null
  data: unknown
  /** Who published it: `agent:<name>`, `api`, `host`. */
  source: string
  /** The caller it belongs to (the identity id of the request or plan it came from); null: the host's own. */
  owner_key: string | null
  /**
   * The agents that caller may have work for it (its key's or token's agent list, names or manifest
   * ids); null: any. A subscription of another agent neither handles the event nor starts a task for it.
   */
  owner_agents: string[] | null
  /**
   * That caller's scopes (its key's or token's), which a task the event starts carries as
   * `metadata.owner_scopes` and its agent's host calls are held to; null: none recorded (an event of
   * the host's own, or of an earlier version), and the task's host calls are refused.
   */
  owner_scopes: string[] | null
  trace_id: string | null
  published_at: number
  expires_at: number
}

/** What {@link BusStore.publish} stores (the rest it fills in; no `owner_agents`: any agent; no `owner_scopes`: none). */
export type NewBusEvent = Omit<BusEvent, 'seq' | 'owner_agents' | 'owner_scopes'> & { owner_agents?: string[] | null, owner_scopes?: string[] | null }

/** A durable subscription: its handler may run in any process that registers the same id. */
export interface SubscriptionRecord {
  id: string
  /** The subscribing agent (name); events with `target_agents` reach only the agents they name. */
  agent: string | null
  patterns: string[]
  filter: Json | null
  max_attempts: number
  backoff_ms: number
}

/** An event handed to one subscription, leased to one process until it is acknowledged or fails. */
export interface Delivery {
  subscription_id: string
  event: BusEvent
  /** Attempts before this one. */
  attempts: number
}

/** A delivery that failed `max_attempts` times, with its event. */
export interface DeadLetter {
  id: number
  subscription_id: string
  event: BusEvent
  attempts: number
  last_error: string
  dead_at: number
}

/** A bus event as stored (both stores): its lists and data as JSON text. */
export interface EventRow extends Omit<BusEvent, 'target_agents' | 'owner_agents' | 'owner_scopes' | 'data'> { target_agents: string | null, owner_agents: string | null, owner_scopes: string | null, data: string }
/** A subscription as stored (both stores). */
export interface SubscriptionRow extends Omit<SubscriptionRecord, 'patterns' | 'filter'> { patterns: string, filter: string | null }
export interface DeliveryRow extends EventRow { subscription_id: string, attempts: number, event_seq: number }
/** A dead letter as stored (both stores). */
export interface DeadRow { id: number, subscription_id: string, event: string, attempts: number, last_error: string, dead_at: number }

/** A stored subscription row as a {@link SubscriptionRecord} (both stores). */
export function toSubscription (row: SubscriptionRow): SubscriptionRecord {
  return { id: row.id, agent: row.agent, patterns: JSON.parse(row.patterns) as string[], filter: row.filter === null ? null : JSON.parse(row.filter) as Json, max_attempts: row.max_attempts, backoff_ms: row.backoff_ms }
}

/** A stored dead letter row as a {@link DeadLetter} (both stores). */
export function toDeadLetter (row: DeadRow): DeadLetter {
  return { id: row.id, subscription_id: row.subscription_id, event: JSON.parse(row.event) as BusEvent, attempts: row.attempts, last_error: row.last_error, dead_at: row.dead_at }
}

/** A list of names as stored (both stores): JSON text, or null. */
export const listText = (list: string[] | null | undefined): string | null => list == null ? null : JSON.stringify(list)

/** A stored event row as a {@link BusEvent} (both stores). */
export function toEvent (row: EventRow): BusEvent {
  return {
    seq: row.seq,
    id: row.id,
    type: row.type,
    key: row.key,
    visibility: row.visibility,
    priority: row.priority,
    target_agents: row.target_agents === null ? null : JSON.parse(row.target_agents) as string[],
    data: JSON.parse(row.data) as unknown,
    source: row.source,
    owner_key: row.owner_key,
    owner_agents: row.owner_agents === null ? null : JSON.parse(row.owner_agents) as string[],
    owner_scopes: row.owner_scopes == null ? null : JSON.parse(row.owner_scopes) as string[],
    trace_id: row.trace_id,
    published_at: row.published_at,
    expires_at: row.expires_at
  }
}

/**
 * The event bus's store (seed 003 "Event Bus Contracts"): subscriptions, events with their dedup
 * key, one delivery per matching subscription, leases, retries and dead letters. One contract, two
 * stores: {@link SqliteBusStore} answers at once (inside the group writer), `PgBusStore`
 * (`storage/postgres/bus.ts`) with promises; callers `await` every call. Times are ms since the epoch.
 */
export interface BusStore {
  /** Create or update a subscription (its id is its identity across processes and restarts). */
  saveSubscription(sub: SubscriptionRecord, now: number): Awaitable<void>
  /** Remove a subscription and the deliveries it has not handled; false when there was none. */
  removeSubscription(id: string): Awaitable<boolean>
  /** Every subscription, by id. */
  subscriptions(): Awaitable<SubscriptionRecord[]>
  /**
   * Store an event and a delivery for each subscription `matches` accepts, in one transaction,
   * unless an event of the same owner (`owner_key`, null included) with the same key is still alive
   * (`expires_at` after the event's `published_at`): then nothing is stored and that event is the
   * answer (`duplicate`). A key is its owner's: another owner's event with it is never the answer,
   * nor keeps this one from being stored. Two publications of one owner's key at the same moment,
   * from any processes, store it once.
   */
  publish(event: NewBusEvent, matches: (sub: SubscriptionRecord) => boolean): Awaitable<{ event: BusEvent, duplicate: boolean }>
  /** The event `seq`, while it is stored. */
  event(seq: number): Awaitable<BusEvent | undefined>
  /**
   * Lease up to `limit` due deliveries of these subscriptions to `owner` until `now + leaseMs`:
   * highest priority first, then oldest; none is leased to two owners at once. Deliveries whose
   * event expired are dropped instead (counted in `expired`), never handed out.
   */
  claim(subscriptionIds: readonly string[], owner: string, leaseMs: number, now: number, limit: number): Awaitable<{ deliveries: Delivery[], expired: number }>
  /** The handler is done with it: the delivery goes (only if `owner` still holds its lease; false otherwise). */
  ack(subscriptionId: string, seq: number, owner: string): Awaitable<boolean>
  /**
   * The handler threw: try again after the subscription's backoff (doubling per attempt, at most
   * a minute), or, at its last attempt, move the delivery to the dead letters with a copy of its
   * event. `lost`: `owner` no longer holds it, nothing changed.
   */
  fail(subscriptionId: string, seq: number, owner: string, error: string, now: number): Awaitable<'retry' | 'dead' | 'lost'>
  /** When the next delivery of these subscriptions falls due (its retry, or its lease's end), if any waits. */
  nextDue(subscriptionIds: readonly string[]): Awaitable<number | undefined>
  /** Dead letters after `after` (by id), oldest first, at most `limit` (100); only those `viewer` sees when given. */
  deadLetters(query: { after?: number, limit?: number, viewer?: Viewer }): Awaitable<DeadLetter[]>
  /**
   * Deliver a dead letter again: its delivery is back, due now, with no attempt counted, and the
   * letter is gone. Only one `viewer` sees when given.
   * @returns `missing` (no such letter, or one the viewer does not see), `expired` (its event is past its TTL or
   *   pruned: it would never be delivered), `unsubscribed` (its subscription was removed), or `retried`
   */
  redrive(id: number, now: number, viewer?: Viewer): Awaitable<'retried' | 'missing' | 'expired' | 'unsubscribed'>
  /**
   * Live `a2a` events after the cursor, oldest first, one page of at most `limit` events looked at:
   * `next` is the last seq looked at (a page may hold none of the caller's events and still move
   * the cursor). A cursor never passes an event that commits later: tailing from any process sees
   * every event once.
   */
  feed(query: { after: number, now: number, limit: number, viewer?: Viewer }): Awaitable<{ events: BusEvent[], next: number }>
  /** The newest event's seq (0 when none): where a feed without a cursor starts. */
  head(): Awaitable<number>
  /** Delete up to `limit` expired events (their deliveries go with them; dead letters keep their copy); how many. */
  prune(now: number, limit?: number): Awaitable<number>
}
