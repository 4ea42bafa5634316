import type pg from 'pg'
import { listText, toDeadLetter, toEvent, toSubscription, type BusEvent, type BusStore, type DeadLetter, type DeadRow, type Delivery, type EventRow, type NewBusEvent, type SubscriptionRecord, type SubscriptionRow } from '../bus.js'
import { inTransaction, PG_LOCKS } from './database.js'
import { sees, viewerSql, type Viewer } from '../tenants.js'

/** A pool, or one client (inside a transaction or not): what a single statement runs on. */
type Queryable = pg.Pool | pg.ClientBase

/** Rows a statement changed (`rowCount` is null only for commands that change none). */
const changes = (result: pg.QueryResult): number => Number(result.rowCount)

interface DeliveryRow extends EventRow { subscription_id: string, attempts: number }

const EVENT_COLUMNS = 'e.seq, e.id, e.type, e.key, e.visibility, e.priority, e.target_agents, e.data, e.source, e.owner_key, e.owner_agents, e.owner_scopes, e.trace_id, e.published_at, e.expires_at'

/** Highest priority first, then oldest: the order deliveries are handed out in. */
function deliveryOrder (a: Delivery, b: Delivery): number {
  return b.event.priority - a.event.priority || a.event.seq - b.event.seq
}

/**
 * The event bus's tables on PostgreSQL (`DATABASE_URL`), shared by every instance: the
 * {@link BusStore} contract with promises. Each write that another store or the run engine may
 * compose into a bigger transaction also exists as `...In(client, ...)`, taking a client inside
 * that transaction (READ COMMITTED, PostgreSQL's default: each statement sees what committed
 * before it).
 *
 * Publications are serialised by a transaction-scoped advisory lock (`PG_LOCKS.busPublish`), held
 * from the dedup check until the commit. That gives two things at once: a key is checked and stored
 * by one publication at a time across every instance (a duplicate is stored once), and events
 * commit in `seq` order, so a feed reading `seq > cursor` never moves past an event whose identity
 * value was taken earlier but whose transaction committed later (identity values are handed out at
 * insert, not at commit). Deliveries are claimed with `FOR UPDATE SKIP LOCKED`, so claimers in
 * different processes never wait for, nor take, each other's rows.
 */
export class PgBusStore implements BusStore {
  readonly #pool: pg.Pool

  constructor (pool: pg.Pool) {
    this.#pool = pool
  }

  async saveSubscription (sub: SubscriptionRecord, now: number): Promise<void> {
    await this.saveSubscriptionIn(this.#pool, sub, now)
  }

  /** {@link saveSubscription} on `client`. */
  async saveSubscriptionIn (client: Queryable, sub: SubscriptionRecord, now: number): Promise<void> {
    await client.query(`INSERT INTO bus_subscriptions (id, agent, patterns, filter, max_attempts, backoff_ms, created_at, updated_at)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
      ON CONFLICT (id) DO UPDATE SET agent = excluded.agent, patterns = excluded.patterns, filter = excluded.filter,
        max_attempts = excluded.max_attempts, backoff_ms = excluded.backoff_ms, updated_at = excluded.updated_at
      WHERE bus_subscriptions.patterns IS DISTINCT FROM excluded.patterns OR bus_subscriptions.filter IS DISTINCT FROM excluded.filter
        OR bus_subscriptions.agent IS DISTINCT FROM excluded.agent OR bus_subscriptions.max_attempts <> excluded.max_attempts
        OR bus_subscriptions.backoff_ms <> excluded.backoff_ms`,
    [sub.id, sub.agent, JSON.stringify(sub.patterns), sub.filter === null ? null : JSON.stringify(sub.filter), sub.max_attempts, sub.backoff_ms, now])
  }

  async removeSubscription (id: string): Promise<boolean> {
    return await this.removeSubscriptionIn(this.#pool, id)
  }

  /** {@link removeSubscription} on `client`. */
  async removeSubscriptionIn (client: Queryable, id: string): Promise<boolean> {
    return changes(await client.query('DELETE FROM bus_subscriptions WHERE id = $1', [id])) > 0
  }

  async subscriptions (): Promise<SubscriptionRecord[]> {
    return await subscriptionsOn(this.#pool)
  }

  async publish (event: NewBusEvent, matches: (sub: SubscriptionRecord) => boolean): Promise<{ event: BusEvent, duplicate: boolean }> {
    return await inTransaction(this.#pool, async (client) => await this.publishIn(client, event, matches))
  }

  /**
   * {@link publish} inside the caller's transaction on `client`. It holds the publication lock
   * until that transaction ends: commit soon after.
   */
  async publishIn (client: pg.ClientBase, event: NewBusEvent, matches: (sub: SubscriptionRecord) => boolean): Promise<{ event: BusEvent, duplicate: boolean }> {
    // one publication at a time across instances, until it commits: see the class's comment
    await client.query('SELECT pg_advisory_xact_lock($1)', [PG_LOCKS.busPublish])
    const alive = await client.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM bus_events e WHERE e.key = $1 AND e.owner_key IS NOT DISTINCT FROM $3 AND e.expires_at > $2 ORDER BY e.seq LIMIT 1`, [event.key, event.published_at, event.owner_key])
    if (alive.rows[0] !== undefined) return { event: toEvent(alive.rows[0]), duplicate: true }
    const owned = { ...event, owner_agents: event.owner_agents ?? null, owner_scopes: event.owner_scopes ?? null }
    const inserted = await client.query<{ seq: number }>(`INSERT INTO bus_events (id, type, key, visibility, priority, target_agents, data, source, owner_key, owner_agents, owner_scopes, trace_id, published_at, expires_at)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING seq`,
    [event.id, event.type, event.key, event.visibility, event.priority, listText(event.target_agents),
      JSON.stringify(event.data ?? null), event.source, event.owner_key, listText(owned.owner_agents), listText(owned.owner_scopes), event.trace_id, event.published_at, event.expires_at])
    const seq = (inserted.rows[0] as { seq: number }).seq
    const targets = (await subscriptionsOn(client)).filter(matches).map((sub) => sub.id)
    if (targets.length > 0) {
      await client.query('INSERT INTO bus_deliveries (subscription_id, event_seq, priority, due_at) SELECT unnest($1::text[]), $2::bigint, $3::integer, $4::bigint',
        [targets, seq, event.priority, event.published_at])
    }
    return { event: { ...owned, seq }, duplicate: false }
  }

  async event (seq: number): Promise<BusEvent | undefined> {
    return await eventOn(this.#pool, seq)
  }

  async claim (subscriptionIds: readonly string[], owner: string, leaseMs: number, now: number, limit: number): Promise<{ deliveries: Delivery[], expired: number }> {
    if (subscriptionIds.length === 0) return { deliveries: [], expired: 0 }
    return await inTransaction(this.#pool, async (client) => await this.claimIn(client, subscriptionIds, owner, leaseMs, now, limit))
  }

  /** {@link claim} inside the caller's transaction on `client` (the leases count once it commits). */
  async claimIn (client: pg.ClientBase, subscriptionIds: readonly string[], owner: string, leaseMs: number, now: number, limit: number): Promise<{ deliveries: Delivery[], expired: number }> {
    if (subscriptionIds.length === 0) return { deliveries: [], expired: 0 }
    const ids = [...subscriptionIds]
    const expired = changes(await client.query(`DELETE FROM bus_deliveries d USING (
        SELECT d.subscription_id, d.event_seq FROM bus_deliveries d JOIN bus_events e ON e.seq = d.event_seq
        WHERE d.subscription_id = ANY($1::text[]) AND e.expires_at <= $2 FOR UPDATE OF d SKIP LOCKED) gone
      WHERE d.subscription_id = gone.subscription_id AND d.event_seq = gone.event_seq`, [ids, now]))
    const { rows } = await client.query<DeliveryRow>(`WITH picked AS (
        SELECT d.subscription_id, d.event_seq FROM bus_deliveries d JOIN bus_events e ON e.seq = d.event_seq
        WHERE d.subscription_id = ANY($1::text[]) AND d.due_at <= $2 AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= $2) AND e.expires_at > $2
        ORDER BY d.priority DESC, d.event_seq LIMIT $3 FOR UPDATE OF d SKIP LOCKED)
      UPDATE bus_deliveries d SET lease_owner = $4, lease_expires_at = $5 FROM picked, bus_events e
      WHERE d.subscription_id = picked.subscription_id AND d.event_seq = picked.event_seq AND e.seq = d.event_seq
      RETURNING d.subscription_id, d.attempts, ${EVENT_COLUMNS}`, [ids, now, limit, owner, now + leaseMs])
    const deliveries = rows.map((row) => ({ subscription_id: row.subscription_id, attempts: row.attempts, event: toEvent(row) }))
    return { deliveries: deliveries.sort(deliveryOrder), expired }
  }

  async ack (subscriptionId: string, seq: number, owner: string): Promise<boolean> {
    return await this.ackIn(this.#pool, subscriptionId, seq, owner)
  }

  /** {@link ack} on `client`. */
  async ackIn (client: Queryable, subscriptionId: string, seq: number, owner: string): Promise<boolean> {
    return changes(await client.query('DELETE FROM bus_deliveries WHERE subscription_id = $1 AND event_seq = $2 AND lease_owner = $3', [subscriptionId, seq, owner])) > 0
  }

  async fail (subscriptionId: string, seq: number, owner: string, error: string, now: number): Promise<'retry' | 'dead' | 'lost'> {
    return await inTransaction(this.#pool, async (client) => await this.failIn(client, subscriptionId, seq, owner, error, now))
  }

  /** {@link fail} inside the caller's transaction on `client`. */
  async failIn (client: pg.ClientBase, subscriptionId: string, seq: number, owner: string, error: string, now: number): Promise<'retry' | 'dead' | 'lost'> {
    const { rows } = await client.query<{ attempts: number, max_attempts: number, backoff_ms: number }>(`SELECT d.attempts, s.max_attempts, s.backoff_ms
      FROM bus_deliveries d JOIN bus_subscriptions s ON s.id = d.subscription_id
      WHERE d.subscription_id = $1 AND d.event_seq = $2 AND d.lease_owner = $3 FOR UPDATE OF d`, [subscriptionId, seq, owner])
    const row = rows[0]
    if (row === undefined) return 'lost'
    const attempts = row.attempts + 1
    if (attempts >= row.max_attempts) {
      const event = await eventOn(client, seq) as BusEvent
      await client.query('INSERT INTO bus_dead_letters (subscription_id, event_seq, event, owner_key, attempts, last_error, dead_at) VALUES ($1, $2, $3, $4, $5, $6, $7)',
        [subscriptionId, seq, JSON.stringify(event), event.owner_key, attempts, error, now])
      await client.query('DELETE FROM bus_deliveries WHERE subscription_id = $1 AND event_seq = $2', [subscriptionId, seq])
      return 'dead'
    }
    const wait = Math.min(row.backoff_ms * 2 ** (attempts - 1), 60_000)
    await client.query('UPDATE bus_deliveries SET attempts = $1, due_at = $2, lease_owner = NULL, lease_expires_at = NULL, last_error = $3 WHERE subscription_id = $4 AND event_seq = $5',
      [attempts, now + wait, error, subscriptionId, seq])
    return 'retry'
  }

  async nextDue (subscriptionIds: readonly string[]): Promise<number | undefined> {
    if (subscriptionIds.length === 0) return undefined
    const { rows } = await this.#pool.query<{ due: number | null }>('SELECT min(greatest(due_at, coalesce(lease_expires_at, 0))) AS due FROM bus_deliveries WHERE subscription_id = ANY($1::text[])', [[...subscriptionIds]])
    return rows[0]?.due ?? undefined
  }

  async deadLetters (query: { after?: number, limit?: number, viewer?: Viewer }): Promise<DeadLetter[]> {
    const values: unknown[] = [query.after ?? 0, query.limit ?? 100]
    const { rows } = await this.#pool.query<DeadRow>(`SELECT id, subscription_id, event, attempts, last_error, dead_at FROM bus_dead_letters
      WHERE id > $1 AND ${viewerSql(query.viewer ?? { all: true }, 'owner_key', (value) => `$${values.push(value)}`)} ORDER BY id LIMIT $2`, values)
    return rows.map(toDeadLetter)
  }

  async redrive (id: number, now: number, viewer?: Viewer): Promise<'retried' | 'missing' | 'expired' | 'unsubscribed'> {
    return await inTransaction(this.#pool, async (client) => await this.redriveIn(client, id, now, viewer))
  }

  /** {@link redrive} inside the caller's transaction on `client`. */
  async redriveIn (client: pg.ClientBase, id: number, now: number, viewer?: Viewer): Promise<'retried' | 'missing' | 'expired' | 'unsubscribed'> {
    // locked: of two redrives of one letter at once, the second finds it gone
    const { rows } = await client.query<{ subscription_id: string, event_seq: number, owner_key: string | null }>('SELECT subscription_id, event_seq, owner_key FROM bus_dead_letters WHERE id = $1 FOR UPDATE', [id])
    const letter = rows[0]
    if (letter === undefined || (viewer !== undefined && !sees(viewer, letter.owner_key))) return 'missing'
    const event = await eventOn(client, letter.event_seq)
    if (event === undefined || event.expires_at <= now) return 'expired'
    if ((await client.query('SELECT 1 FROM bus_subscriptions WHERE id = $1', [letter.subscription_id])).rowCount === 0) return 'unsubscribed'
    await client.query('INSERT INTO bus_deliveries (subscription_id, event_seq, priority, due_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING',
      [letter.subscription_id, letter.event_seq, event.priority, now])
    await client.query('DELETE FROM bus_dead_letters WHERE id = $1', [id])
    return 'retried'
  }

  async feed (query: { after: number, now: number, limit: number, viewer?: Viewer }): Promise<{ events: BusEvent[], next: number }> {
    // every event below a committed seq is committed too (publications commit in seq order), so
    // the cursor may move past all this page saw
    const { rows } = await this.#pool.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM bus_events e WHERE e.seq > $1 ORDER BY e.seq LIMIT $2`, [query.after, query.limit])
    const next = rows.at(-1)?.seq ?? query.after
    const events = rows.filter((r) => r.visibility === 'a2a' && r.expires_at > query.now && (query.viewer === undefined || sees(query.viewer, r.owner_key))).map(toEvent)
    return { events, next }
  }

  async head (): Promise<number> {
    const { rows } = await this.#pool.query<{ seq: number }>('SELECT coalesce(max(seq), 0) AS seq FROM bus_events')
    return (rows[0] as { seq: number }).seq
  }

  async prune (now: number, limit = 1000): Promise<number> {
    return await this.pruneIn(this.#pool, now, limit)
  }

  /** {@link prune} on `client`. Instances pruning at once skip each other's rows. */
  async pruneIn (client: Queryable, now: number, limit = 1000): Promise<number> {
    return changes(await client.query(`DELETE FROM bus_events WHERE seq IN (
      SELECT seq FROM bus_events WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, [now, limit]))
  }
}

async function subscriptionsOn (client: Queryable): Promise<SubscriptionRecord[]> {
  const { rows } = await client.query<SubscriptionRow>('SELECT id, agent, patterns, filter, max_attempts, backoff_ms FROM bus_subscriptions ORDER BY id')
  return rows.map(toSubscription)
}

async function eventOn (client: Queryable, seq: number): Promise<BusEvent | undefined> {
  const { rows } = await client.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM bus_events e WHERE e.seq = $1`, [seq])
  return rows[0] === undefined ? undefined : toEvent(rows[0])
}
