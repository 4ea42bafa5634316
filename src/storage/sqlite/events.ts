import { EventEmitter } from 'node:events'
import type { StoredEvent } from '../../protocol/events.js'
import type { Db } from './database.js'
import { EVENT_FILTERS, type EventAuthor, type EventInput, type EventLog, type EventQuery, type EventRow, appendedEvent, eventWrite, toStored } from '../events.js'
import { namedViewerSql } from '../tenants.js'

/**
 * The event log: CloudEvents and graph events from agents and the host, with the request,
 * session and trace they belong to. `appended` fires after each local append (followers also poll,
 * to see other processes' writes).
 */
export class SqliteEventStore implements EventLog {
  readonly #db: Db
  readonly #insert
  readonly appended = new EventEmitter()

  constructor (db: Db) {
    this.#db = db
    this.#insert = db.prepare(`INSERT INTO events (id, kind, type, source, time, visibility, session_id, request_id, trace_id, task_id, owner_key, body)
      VALUES (@id, @kind, @type, @source, @time, @visibility, @session_id, @request_id, @trace_id, @task_id, @owner_key, @body)`)
    this.appended.setMaxListeners(0)
  }

  /**
   * Append one event. The narrator-only policy (seed S36) is enforced here, where every path ends:
   * AGENT_UPDATE and AGENT_RESULT are stored internal whatever they ask; a truthy `render_to_user`
   * anywhere in the event is refused; only the narrator may store `visibility: "user"`.
   * @throws `AH_ERR_POLICY_VIOLATION` (with `policy_error: true`); nothing is stored
   */
  append (input: EventInput, author: EventAuthor = 'agent'): number {
    const seq = Number(this.#insert.run(eventWrite(input, author)).lastInsertRowid)
    this.appended.emit('event', appendedEvent(seq, input))
    return seq
  }

  /** Events matching `query`, oldest first. */
  list (query: EventQuery = {}): StoredEvent[] {
    const where = ['seq > @after']
    for (const key of EVENT_FILTERS) if (query[key] !== undefined) where.push(query[key] === null ? `${key} IS NULL` : `${key} = @${key}`)
    if (query.since !== undefined) where.push('time >= @since')
    const { viewer, ...filters } = query
    const seen = namedViewerSql(viewer ?? { all: true }, 'owner_key')
    where.push(seen.sql)
    const rows = this.#db.prepare(`SELECT * FROM events WHERE ${where.join(' AND ')} ORDER BY seq LIMIT @limit`)
      .all({ ...filters, ...seen.params, after: query.after ?? 0, limit: query.limit ?? 100 }) as EventRow[]
    return rows.map(toStored)
  }

  /** Delete a session's events (session erasure). */
  eraseSession (sessionId: string): number {
    return this.#db.prepare('DELETE FROM events WHERE session_id = ?').run(sessionId).changes
  }
}
