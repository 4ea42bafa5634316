import type { Db } from './database.js'
import { sees, viewerSql, type Viewer } from '../tenants.js'
import { listText, toDeadLetter, toEvent, toSubscription, type BusEvent, type BusStore, type DeadLetter, type DeadRow, type Delivery, type DeliveryRow, type EventRow, type NewBusEvent, type SubscriptionRecord, type SubscriptionRow } from '../bus.js'

const EVENT_COLUMNS = 'e.seq, e.id, e.type, e.key, e.visibility, e.priority, e.target_agents, e.data, e.source, e.owner_key, e.owner_agents, e.owner_scopes, e.trace_id, e.published_at, e.expires_at'

/**
 * The event bus's tables (seed 003 "Event Bus Contracts"), synchronous: callers run these inside
 * their own write path (the group writer, or a retry while another process holds the lock). A
 * publish stores the event and one delivery per matching subscription in one transaction, so an
 * event is never stored without its deliveries, nor delivered twice because two processes saw it.
 */
export class SqliteBusStore implements BusStore {
  readonly #db: Db
  readonly #duplicate
  readonly #insertEvent
  readonly #insertDelivery
  readonly #subscriptions

  constructor (db: Db) {
    this.#db = db
    this.#duplicate = db.prepare('SELECT seq FROM bus_events WHERE key = ? AND owner_key IS ? AND expires_at > ? ORDER BY seq LIMIT 1')
    this.#insertEvent = db.prepare(`INSERT INTO bus_events (id, type, key, visibility, priority, target_agents, data, source, owner_key, owner_agents, owner_scopes, trace_id, published_at, expires_at)
      VALUES (@id, @type, @key, @visibility, @priority, @target_agents, @data, @source, @owner_key, @owner_agents, @owner_scopes, @trace_id, @published_at, @expires_at)`)
    this.#insertDelivery = db.prepare('INSERT INTO bus_deliveries (subscription_id, event_seq, priority, due_at) VALUES (?, ?, ?, ?)')
    this.#subscriptions = db.prepare('SELECT * FROM bus_subscriptions ORDER BY id')
  }

  /** Create or update a subscription (its id is its identity across processes and restarts). */
  saveSubscription (sub: SubscriptionRecord, now: number): void {
    this.#db.prepare(`INSERT INTO bus_subscriptions (id, agent, patterns, filter, max_attempts, backoff_ms, created_at, updated_at)
      VALUES (@id, @agent, @patterns, @filter, @max_attempts, @backoff_ms, @now, @now)
      ON CONFLICT (id) DO UPDATE SET agent = excluded.agent, patterns = excluded.patterns, filter = excluded.filter,
        max_attempts = excluded.max_attempts, backoff_ms = excluded.backoff_ms, updated_at = excluded.updated_at
      WHERE bus_subscriptions.patterns IS NOT excluded.patterns OR bus_subscriptions.filter IS NOT excluded.filter
        OR bus_subscriptions.agent IS NOT excluded.agent OR bus_subscriptions.max_attempts != excluded.max_attempts
        OR bus_subscriptions.backoff_ms != excluded.backoff_ms`)
      .run({ ...sub, patterns: JSON.stringify(sub.patterns), filter: sub.filter === null ? null : JSON.stringify(sub.filter), now })
  }

  /** Remove a subscription and the deliveries it has not handled. */
  removeSubscription (id: string): boolean {
    return this.#db.prepare('DELETE FROM bus_subscriptions WHERE id = ?').run(id).changes > 0
  }

  subscriptions (): SubscriptionRecord[] {
    return (this.#subscriptions.all() as SubscriptionRow[]).map(toSubscription)
  }

  /**
   * Store an event and a delivery for each subscription `matches` accepts, unless an event of the
   * same owner with the same key is still alive: then nothing is stored and that event is the answer (`duplicate`).
   */
  publish (event: NewBusEvent, matches: (sub: SubscriptionRecord) => boolean): { event: BusEvent, duplicate: boolean } {
    return this.#db.transaction(() => {
      const alive = this.#duplicate.get(event.key, event.owner_key, event.published_at) as { seq: number } | undefined
      if (alive !== undefined) return { event: this.event(alive.seq) as BusEvent, duplicate: true }
      const owned = { ...event, owner_agents: event.owner_agents ?? null, owner_scopes: event.owner_scopes ?? null }
      const seq = Number(this.#insertEvent.run({ ...owned, target_agents: listText(event.target_agents), owner_agents: listText(owned.owner_agents), owner_scopes: listText(owned.owner_scopes), data: JSON.stringify(event.data ?? null) }).lastInsertRowid)
      for (const sub of this.subscriptions()) {
        if (matches(sub)) this.#insertDelivery.run(sub.id, seq, event.priority, event.published_at)
      }
      return { event: { ...owned, seq }, duplicate: false }
    }).immediate()
  }

  event (seq: number): BusEvent | undefined {
    const row = this.#db.prepare(`SELECT ${EVENT_COLUMNS} FROM bus_events e WHERE seq = ?`).get(seq) as EventRow | undefined
    return row === undefined ? undefined : toEvent(row)
  }

  /**
   * Lease up to `limit` due deliveries of these subscriptions to `owner`: highest priority first,
   * then oldest. Deliveries whose event expired are dropped instead (counted in `expired`).
   */
  claim (subscriptionIds: readonly string[], owner: string, leaseMs: number, now: number, limit: number): { deliveries: Delivery[], expired: number } {
    if (subscriptionIds.length === 0) return { deliveries: [], expired: 0 }
    const marks = subscriptionIds.map(() => '?').join(', ')
    return this.#db.transaction(() => {
      const expired = this.#db.prepare(`DELETE FROM bus_deliveries WHERE subscription_id IN (${marks})
        AND event_seq IN (SELECT seq FROM bus_events WHERE expires_at <= ?)`).run(...subscriptionIds, now).changes
      const rows = this.#db.prepare(`SELECT d.subscription_id, d.attempts, d.event_seq, ${EVENT_COLUMNS}
        FROM bus_deliveries d JOIN bus_events e ON e.seq = d.event_seq
        WHERE d.subscription_id IN (${marks}) AND d.due_at <= ? AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= ?)
        ORDER BY d.priority DESC, d.event_seq LIMIT ?`).all(...subscriptionIds, now, now, limit) as DeliveryRow[]
      const lease = this.#db.prepare('UPDATE bus_deliveries SET lease_owner = ?, lease_expires_at = ? WHERE subscription_id = ? AND event_seq = ?')
      for (const row of rows) lease.run(owner, now + leaseMs, row.subscription_id, row.event_seq)
      return { deliveries: rows.map((row) => ({ subscription_id: row.subscription_id, attempts: row.attempts, event: toEvent(row) })), expired }
    }).immediate()
  }

  /** The handler is done with it: the delivery goes (only if `owner` still holds its lease). */
  ack (subscriptionId: string, seq: number, owner: string): boolean {
    return this.#db.prepare('DELETE FROM bus_deliveries WHERE subscription_id = ? AND event_seq = ? AND lease_owner = ?').run(subscriptionId, seq, owner).changes > 0
  }

  /**
   * The handler threw: try again after the subscription's backoff (doubling per attempt, at most
   * a minute), or, at its last attempt, move the delivery to the dead letters with its event.
   */
  fail (subscriptionId: string, seq: number, owner: string, error: string, now: number): 'retry' | 'dead' | 'lost' {
    return this.#db.transaction(() => {
      const row = this.#db.prepare(`SELECT d.attempts, s.max_attempts, s.backoff_ms FROM bus_deliveries d JOIN bus_subscriptions s ON s.id = d.subscription_id
        WHERE d.subscription_id = ? AND d.event_seq = ? AND d.lease_owner = ?`).get(subscriptionId, seq, owner) as { attempts: number, max_attempts: number, backoff_ms: number } | undefined
      if (row === undefined) return 'lost'
      const attempts = row.attempts + 1
      if (attempts >= row.max_attempts) {
        const event = this.event(seq) as BusEvent
        this.#db.prepare('INSERT INTO bus_dead_letters (subscription_id, event_seq, event, owner_key, attempts, last_error, dead_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
          .run(subscriptionId, seq, JSON.stringify(event), event.owner_key, attempts, error, now)
        this.#db.prepare('DELETE FROM bus_deliveries WHERE subscription_id = ? AND event_seq = ?').run(subscriptionId, seq)
        return 'dead'
      }
      const wait = Math.min(row.backoff_ms * 2 ** (attempts - 1), 60_000)
      this.#db.prepare('UPDATE bus_deliveries SET attempts = ?, due_at = ?, lease_owner = NULL, lease_expires_at = NULL, last_error = ? WHERE subscription_id = ? AND event_seq = ?')
        .run(attempts, now + wait, error, subscriptionId, seq)
      return 'retry'
    }).immediate()
  }

  /** When the next delivery of these subscriptions falls due (ms since the epoch), if any waits. */
  nextDue (subscriptionIds: readonly string[]): number | undefined {
    if (subscriptionIds.length === 0) return undefined
    const row = this.#db.prepare(`SELECT min(max(due_at, coalesce(lease_expires_at, 0))) AS due FROM bus_deliveries WHERE subscription_id IN (${subscriptionIds.map(() => '?').join(', ')})`)
      .get(...subscriptionIds) as { due: number | null }
    return row.due ?? undefined
  }

  /** Dead letters after `after` (by id), oldest first; only those `viewer` sees when given. */
  deadLetters (query: { after?: number, limit?: number, viewer?: Viewer }): DeadLetter[] {
    const values: string[] = []
    const rows = this.#db.prepare(`SELECT id, subscription_id, event, attempts, last_error, dead_at FROM bus_dead_letters
      WHERE id > ? AND ${viewerSql(query.viewer ?? { all: true }, 'owner_key', (value) => { values.push(value); return '?' })} ORDER BY id LIMIT ?`)
      .all(query.after ?? 0, ...values, query.limit ?? 100) as DeadRow[]
    return rows.map(toDeadLetter)
  }

  /**
   * Deliver a dead letter again: its delivery is back, due now, with no attempt counted, and the
   * letter is gone. Only `owner`'s when given.
   * @returns `missing` (no such letter, or another owner's), `expired` (its event is past its TTL or
   *   pruned: it would never be delivered), `unsubscribed` (its subscription was removed), or `retried`
   */
  redrive (id: number, now: number, viewer?: Viewer): 'retried' | 'missing' | 'expired' | 'unsubscribed' {
    return this.#db.transaction(() => {
      const letter = this.#db.prepare('SELECT subscription_id, event_seq, owner_key FROM bus_dead_letters WHERE id = ?').get(id) as { subscription_id: string, event_seq: number, owner_key: string | null } | undefined
      if (letter === undefined || (viewer !== undefined && !sees(viewer, letter.owner_key))) return 'missing'
      const event = this.event(letter.event_seq)
      if (event === undefined || event.expires_at <= now) return 'expired'
      if (this.#db.prepare('SELECT 1 FROM bus_subscriptions WHERE id = ?').get(letter.subscription_id) === undefined) return 'unsubscribed'
      this.#db.prepare('INSERT INTO bus_deliveries (subscription_id, event_seq, priority, due_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING')
        .run(letter.subscription_id, letter.event_seq, event.priority, now)
      this.#db.prepare('DELETE FROM bus_dead_letters WHERE id = ?').run(id)
      return 'retried'
    }).immediate()
  }

  /**
   * Live `a2a` events after the cursor, oldest first, one page: `next` is the last seq looked at (a
   * page may hold none of the caller's events and still move the cursor).
   */
  feed (query: { after: number, now: number, limit: number, viewer?: Viewer }): { events: BusEvent[], next: number } {
    const rows = this.#db.prepare(`SELECT ${EVENT_COLUMNS} FROM bus_events e WHERE seq > @after ORDER BY seq LIMIT @limit`)
      .all({ after: query.after, limit: query.limit }) as EventRow[]
    const next = rows.at(-1)?.seq ?? query.after
    const events = rows.filter((r) => r.visibility === 'a2a' && r.expires_at > query.now && (query.viewer === undefined || sees(query.viewer, r.owner_key))).map(toEvent)
    return { events, next }
  }

  /** The newest event's seq (0 when none): where a feed without a cursor starts. */
  head (): number {
    return (this.#db.prepare('SELECT coalesce(max(seq), 0) AS seq FROM bus_events').get() as { seq: number }).seq
  }

  /** Delete expired events (their deliveries go with them; dead letters keep their copy). */
  prune (now: number, limit = 1000): number {
    return this.#db.prepare('DELETE FROM bus_events WHERE seq IN (SELECT seq FROM bus_events WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)').run(now, limit).changes
  }
}
