import { EventEmitter } from 'node:events'
import type pg from 'pg'
import type { StoredEvent } from '../../protocol/events.js'
import { appendedEvent, EVENT_FILTERS, eventWrite, toStored, type AppendedEvent, type EventAuthor, type EventInput, type EventLog, type EventQuery, type EventRow } from '../events.js'
import { inTransaction, PG_LOCKS } from './database.js'
import { viewerSql } from '../tenants.js'

/*
 * Followers tail the log by seq (`list({ after })`), from any instance. An identity value is taken
 * at the insert, but transactions commit in their own order: without more, a follower could see
 * seq 8 committed while seq 7 is still in flight, move its cursor to 8 and never see 7. So every
 * insert first takes a transaction-scoped advisory lock, held until its transaction ends: seqs are
 * handed out and committed one transaction at a time, in the same order, and whatever a reader sees
 * committed, every lower seq is committed too (or rolled back: a gap, never a late arrival). We chose
 * this over reading up to a safe horizon because it keeps the cursor a plain seq for every follower
 * (the narrator, `/v1/events`, MCP's log) at the cost of one lock per event-writing transaction:
 * append an event as late in a transaction as it can be.
 */
const INSERT = `INSERT INTO events (id, kind, type, source, time, visibility, session_id, request_id, trace_id, task_id, owner_key, body)
  SELECT $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 FROM (SELECT pg_advisory_xact_lock($1)) AS serialised
  RETURNING seq`

/**
 * The event log in PostgreSQL (see {@link EventLog}): the same rules as the SQLite store, every
 * instance appending to one log whose seq order is its commit order. Each method taking a client
 * (`...In`) works inside the caller's transaction; the others are a transaction of their own.
 */
export class PgEventStore implements EventLog {
  readonly #pool: pg.Pool
  readonly appended = new EventEmitter()

  constructor (pool: pg.Pool) {
    this.#pool = pool
    this.appended.setMaxListeners(0)
  }

  /**
   * Append one event in its own transaction; `appended` fires once it is committed.
   * @throws `AH_ERR_POLICY_VIOLATION` (with `policy_error: true`); nothing is stored
   */
  async append (input: EventInput, author: EventAuthor = 'agent'): Promise<number> {
    const appended = await inTransaction(this.#pool, async (client) => await this.appendIn(client, input, author))
    this.announce(appended)
    return appended.seq
  }

  /**
   * Append one event inside the caller's transaction (which holds the event lock from here to its
   * end: append late). Give what it returns to {@link announce} once the transaction is committed.
   * @throws `AH_ERR_POLICY_VIOLATION` (with `policy_error: true`) before anything is written
   */
  async appendIn (client: pg.ClientBase, input: EventInput, author: EventAuthor = 'agent'): Promise<AppendedEvent> {
    const row = eventWrite(input, author)
    const { rows } = await client.query<{ seq: number }>(INSERT, [PG_LOCKS.events, row.id, row.kind, row.type, row.source, row.time, row.visibility,
      row.session_id, row.request_id, row.trace_id, row.task_id, row.owner_key, row.body])
    return appendedEvent((rows[0] as { seq: number }).seq, input)
  }

  /** Tell this process's followers of an event appended with {@link appendIn}, once it is committed. */
  announce (appended: AppendedEvent): void {
    this.appended.emit('event', appended)
  }

  /** Events matching `query`, oldest first. */
  async list (query: EventQuery = {}): Promise<StoredEvent[]> {
    return await this.listIn(this.#pool, query)
  }

  /** {@link list} on a given client (the narrator reads and writes in one transaction). */
  async listIn (client: pg.ClientBase | pg.Pool, query: EventQuery = {}): Promise<StoredEvent[]> {
    const values: unknown[] = [query.after ?? 0]
    const where = ['seq > $1']
    for (const key of EVENT_FILTERS) {
      const value = query[key]
      if (value === undefined) continue
      if (value === null) {
        where.push(`${key} IS NULL`)
      } else {
        values.push(value)
        where.push(`${key} = $${values.length}`)
      }
    }
    if (query.since !== undefined) {
      values.push(query.since)
      where.push(`time >= $${values.length}`)
    }
    if (query.viewer !== undefined) where.push(viewerSql(query.viewer, 'owner_key', (value) => `$${values.push(value)}`))
    // as in SQLite, a negative limit is no limit
    const limit = query.limit ?? 100
    values.push(limit < 0 ? null : limit)
    const { rows } = await client.query<EventRow>(`SELECT seq, kind, type, time, visibility, session_id, request_id, trace_id, body FROM events
      WHERE ${where.join(' AND ')} ORDER BY seq LIMIT $${values.length}`, values)
    return rows.map(toStored)
  }

  /** Delete a session's events (session erasure); how many there were. */
  async eraseSession (sessionId: string): Promise<number> {
    return await this.eraseSessionIn(this.#pool, sessionId)
  }

  /** {@link eraseSession} inside the caller's transaction (with the session's erasure: `PgSessionStore.eraseIn`). */
  async eraseSessionIn (client: pg.ClientBase | pg.Pool, sessionId: string): Promise<number> {
    return Number((await client.query('DELETE FROM events WHERE session_id = $1', [sessionId])).rowCount)
  }
}
