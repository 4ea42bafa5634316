import type { Awaitable } from '../storage/awaitable.js'
import { EventEmitter } from 'node:events'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { AH_ERR_BUS_DEAD_LETTER_NOT_FOUND, AH_ERR_BUS_EVENT_INVALID, AH_ERR_BUS_REDRIVE_REFUSED, withDetails } from '../errors.js'
import { EventPublication, type EventPublication as Publication } from '../protocol/contract.js'
import { COMMON_EVENT_DATA, lazySchema } from '../agents/json-schema.js'
import type { BusEvent, BusStore, DeadLetter, SubscriptionRecord } from '../storage/bus.js'
import type { Viewer } from '../storage/tenants.js'
import { filterMatches, typeMatcher } from './match.js'

type Json = Record<string, unknown>

/** What a handler is given besides the event. */
export interface DeliveryContext {
  /** Fires when the delivery's lease runs out or the bus closes: stop, the event comes again. */
  signal: AbortSignal
  /** 1 on the first delivery. */
  attempt: number
  subscription: string
}

/** Handle one event. Throwing (or rejecting) means "not handled": it is retried, then dead-lettered. */
export type BusHandler = (event: BusEvent, context: DeliveryContext) => Promise<void> | void

/** A subscription and its handler in this process. */
export interface Subscription {
  /** Stable across processes and restarts: every process registering this id shares its deliveries. */
  id: string
  /** The subscribing agent's name: events with `target_agents` reach only the agents they name. */
  agent?: string
  /** Glob patterns over the dotted type, any of which matches (see `typeMatcher`). */
  patterns: string[]
  /** Dotted paths of `data` and the values they must have (an array: any of them). */
  filter?: Json
  /** Attempts before the delivery is dead-lettered (default BUS_MAX_ATTEMPTS). */
  maxAttempts?: number
  /** Wait before the second attempt, doubling after (default BUS_RETRY_BACKOFF_MS). */
  backoffMs?: number
  handler: BusHandler
}

/** Who a publication comes from. */
export interface PublishOrigin {
  /** `agent:<name>`, `api`, `host`. */
  source: string
  /** The caller the event belongs to (who may see it on the feed); null or absent: the host's own. */
  owner_key?: string | null
  /** The agents that caller may have work for it (its agent list); null or absent: any. */
  owner_agents?: readonly string[] | null
  /** That caller's scopes, carried to the tasks the event starts; null or absent: none. */
  owner_scopes?: readonly string[] | null
  trace_id?: string | null
}

/** What {@link EventBus.publish} answers: the event stored, or the live one with the same key. */
export interface Published {
  event: BusEvent
  duplicate: boolean
}

export interface EventBusOptions {
  store: BusStore
  /** How a write of the store is made durable (SQLite: the group writer, or a busy retry; PostgreSQL: the store's own transaction). */
  write: <T>(write: () => Awaitable<T>) => Promise<T>
  instanceId: string
  /** How often this process looks for deliveries other processes published (it is woken at once by its own). */
  pollMs: number
  /** How long a delivery is leased to this process; a handler still running then is aborted. */
  leaseMs: number
  maxAttempts: number
  backoffMs: number
  log: { warn(obj: object, msg?: string): void, error(obj: object, msg?: string): void }
  now?: () => number
  /** Told of each publication and of each delivery's outcome (metrics). */
  observe?: {
    published(duplicate: boolean): void
    delivered(outcome: 'handled' | 'retried' | 'dead_lettered' | 'expired', count?: number): void
  }
}

const validPublication = lazySchema<Publication>(EventPublication)
const BATCH = 16
const PRUNE_EVERY_MS = 60_000

/**
 * The event bus of seed 003: durable in the embedded store, at least once. A publication is checked
 * (the common events' `data` against their schemas), deduplicated by `key` while an event with that
 * key lives, and stored with one delivery per matching subscription in one transaction. Each process
 * that registers a subscription's handler competes for its deliveries: highest priority first,
 * leased, deleted once handled, retried with backoff when the handler throws, dead-lettered after
 * `maxAttempts`. An event whose TTL passed is never handed to a handler.
 *
 * `published` emits each event this process stored (the SSE feed's wake-up; it also polls, for the
 * events of other processes).
 */
export class EventBus {
  readonly published = new EventEmitter()
  readonly #o: EventBusOptions
  readonly #handlers = new Map<string, Subscription>()
  readonly #closing = new AbortController()
  readonly #now: () => number
  #wake: (() => void) | undefined
  #loop: Promise<void> | undefined
  #pruned = 0

  constructor (options: EventBusOptions) {
    this.#o = options
    this.#now = options.now ?? Date.now
    this.published.setMaxListeners(0)
  }

  /**
   * Publish an event.
   * @throws AH_ERR_BUS_EVENT_INVALID (400) naming the failing paths; nothing is stored
   */
  async publish (publication: Publication, origin: PublishOrigin): Promise<Published> {
    if (!validPublication(publication)) throw invalid('the publication', validPublication.errors)
    const { event } = publication
    const common = COMMON_EVENT_DATA.get(event.type)
    if (common !== undefined && !common(event.data)) throw invalid(`the data of a ${event.type} event`, common.errors, '/event/data')
    const now = this.#now()
    const stored = {
      id: randomUUID(),
      type: event.type,
      key: event.key,
      visibility: event.visibility ?? 'internal',
      priority: publication.priority ?? 5,
      target_agents: publication.target_agents ?? null,
      data: event.data ?? null,
      source: origin.source,
      owner_key: origin.owner_key ?? null,
      owner_agents: origin.owner_agents == null ? null : [...origin.owner_agents],
      owner_scopes: origin.owner_scopes == null ? null : [...origin.owner_scopes],
      trace_id: origin.trace_id ?? null,
      published_at: now,
      expires_at: now + (publication.ttl ?? 3600) * 1000
    }
    const result = await this.#o.write(() => this.#o.store.publish(stored, (sub) => matches(sub, stored)))
    this.#o.observe?.published(result.duplicate)
    if (!result.duplicate) {
      this.published.emit('event', result.event)
      this.#wake?.()
    }
    return result
  }

  /** Register a subscription (stored, so events published while no process handles it wait for one) and handle its deliveries here. */
  async subscribe (subscription: Subscription): Promise<void> {
    typeMatcher(subscription.patterns)
    const record: SubscriptionRecord = {
      id: subscription.id,
      agent: subscription.agent ?? null,
      patterns: subscription.patterns,
      filter: subscription.filter ?? null,
      max_attempts: subscription.maxAttempts ?? this.#o.maxAttempts,
      backoff_ms: subscription.backoffMs ?? this.#o.backoffMs
    }
    await this.#o.write(() => { this.#o.store.saveSubscription(record, this.#now()) })
    this.#handlers.set(subscription.id, subscription)
    this.#loop ??= this.#run()
    this.#wake?.()
  }

  /** Stop handling a subscription here; `forget` also deletes it and its waiting deliveries everywhere. */
  async unsubscribe (id: string, options: { forget?: boolean } = {}): Promise<void> {
    this.#handlers.delete(id)
    if (options.forget === true) await this.#o.write(() => this.#o.store.removeSubscription(id))
  }

  async subscriptions (): Promise<SubscriptionRecord[]> {
    return await this.#o.store.subscriptions()
  }

  async deadLetters (query: { after?: number, limit?: number, viewer?: Viewer }): Promise<DeadLetter[]> {
    return await this.#o.store.deadLetters(query)
  }

  /**
   * Deliver a dead letter again (see `BusStore.redrive`).
   * @throws AH_ERR_BUS_DEAD_LETTER_NOT_FOUND (404), AH_ERR_BUS_REDRIVE_REFUSED (409) when its event expired or its subscription is gone
   */
  async redrive (id: number, viewer?: Viewer): Promise<void> {
    const outcome = await this.#o.write(() => this.#o.store.redrive(id, this.#now(), viewer))
    if (outcome === 'missing') throw new AH_ERR_BUS_DEAD_LETTER_NOT_FOUND(id)
    if (outcome === 'expired') throw new AH_ERR_BUS_REDRIVE_REFUSED(id, 'its event is past its time to live')
    if (outcome === 'unsubscribed') throw new AH_ERR_BUS_REDRIVE_REFUSED(id, 'its subscription was removed')
    this.#wake?.()
  }

  /** A page of live `a2a` events after the cursor matching `patterns`, and the cursor to go on from. */
  async feed (query: { after: number, patterns: readonly string[], viewer?: Viewer, limit?: number }): Promise<{ events: BusEvent[], next: number }> {
    const page = await this.#o.store.feed({ after: query.after, now: this.#now(), limit: query.limit ?? 500, ...(query.viewer !== undefined ? { viewer: query.viewer } : {}) })
    const wanted = typeMatcher(query.patterns)
    return { events: page.events.filter((e) => wanted(e.type)), next: page.next }
  }

  /** The cursor of the newest event. */
  async head (): Promise<number> {
    return await this.#o.store.head()
  }

  /** Stop delivering: running handlers are aborted and waited for (their deliveries come again later). */
  async close (): Promise<void> {
    this.#closing.abort(new Error('the event bus is closing'))
    this.#wake?.()
    await this.#loop
  }

  async #run (): Promise<void> {
    const signal = this.#closing.signal
    while (!signal.aborted) {
      let handled = 0
      try {
        handled = await this.#deliverBatch(signal)
        if (this.#now() - this.#pruned > PRUNE_EVERY_MS) {
          this.#pruned = this.#now()
          await this.#o.write(() => this.#o.store.prune(this.#now()))
        }
      } catch (err) {
        this.#o.log.error({ err }, 'event bus delivery failed; trying again')
      }
      if (handled === 0 && !signal.aborted) await this.#idle(signal)
    }
  }

  /** Wait for a local publication, the next due retry, or the poll interval. */
  async #idle (signal: AbortSignal): Promise<void> {
    const due = await this.#o.store.nextDue([...this.#handlers.keys()])
    const wait = Math.max(0, Math.min(this.#o.pollMs, due === undefined ? Infinity : due - this.#now()))
    const woken = new Promise<void>((resolve) => { this.#wake = resolve })
    await Promise.race([woken, sleep(wait, undefined, { signal }).catch(() => {})])
    this.#wake = undefined
  }

  async #deliverBatch (signal: AbortSignal): Promise<number> {
    const ids = [...this.#handlers.keys()]
    const { deliveries, expired } = await this.#o.write(() => this.#o.store.claim(ids, this.#o.instanceId, this.#o.leaseMs, this.#now(), BATCH))
    if (expired > 0) this.#o.observe?.delivered('expired', expired)
    for (const delivery of deliveries) {
      const sub = this.#handlers.get(delivery.subscription_id)
      const seq = delivery.event.seq
      if (sub === undefined || signal.aborted) break
      const lease = AbortSignal.any([signal, AbortSignal.timeout(this.#o.leaseMs)])
      try {
        // a handler that ignores its signal does not hold the bus: past its lease it counts as failed
        await Promise.race([
          sub.handler(delivery.event, { signal: lease, attempt: delivery.attempts + 1, subscription: sub.id }),
          new Promise((_resolve, reject) => { lease.addEventListener('abort', () => { reject(new Error(`the handler ran past its lease of ${this.#o.leaseMs} ms`)) }, { once: true }) })
        ])
        await this.#o.write(() => this.#o.store.ack(sub.id, seq, this.#o.instanceId))
        this.#o.observe?.delivered('handled')
      } catch (err) {
        if (signal.aborted) break
        const message = err instanceof Error ? err.message : String(err)
        const outcome = await this.#o.write(() => this.#o.store.fail(sub.id, seq, this.#o.instanceId, message, this.#now()))
        if (outcome !== 'lost') this.#o.observe?.delivered(outcome === 'dead' ? 'dead_lettered' : 'retried')
        if (outcome === 'dead') this.#o.log.warn({ subscription: sub.id, event: delivery.event.id, type: delivery.event.type, err: message }, 'event dead-lettered')
      }
    }
    return deliveries.length
  }
}

/** Whether a subscription takes an event: its type, its data, and who it is for. */
function matches (sub: SubscriptionRecord, event: Pick<BusEvent, 'type' | 'data' | 'target_agents'>): boolean {
  if (event.target_agents !== null && (sub.agent === null || !event.target_agents.includes(sub.agent))) return false
  return typeMatcher(sub.patterns)(event.type) && filterMatches(sub.filter, event.data)
}

function invalid (what: string, errors: Array<{ instancePath: string, message?: string }> | null | undefined, prefix = ''): Error {
  const list = (errors ?? []).map((e) => ({ path: `${prefix}${e.instancePath}` || '/', message: e.message ?? 'is invalid' }))
  return withDetails(new AH_ERR_BUS_EVENT_INVALID(`${what} is invalid: ${list.map((e) => `${e.path} ${e.message}`).join('; ')}`), { errors: list })
}
