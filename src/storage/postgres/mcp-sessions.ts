import { EventEmitter } from 'node:events'
import type pg from 'pg'
import { decodeSignal, encodeSignal, mcpSessionOf, type McpSessionRecord, type McpSessionRow, type McpSessionStore, type McpSignal, type McpStoredEvent } from '../mcp-sessions.js'
import { inTransaction } from './database.js'
import { CHANNELS, type PgNotifications } from './notifications.js'

/** A notification's payload is at most 8 000 bytes: a longer answer goes through a row. */
const MAX_PAYLOAD = 7000
/** The stream of a client's answer too long for a notification (never an SDK stream id, which are UUIDs and `_GET_stream`). */
const ANSWER_STREAM = '*answer'

/**
 * {@link McpSessionStore} on PostgreSQL, shared by every instance: any instance answers any request
 * of a session. Signals are `NOTIFY`s on one channel, sent when their write commits; without a
 * listening connection (a command) they reach this process only.
 */
export class PgMcpSessionStore implements McpSessionStore {
  readonly #pool: pg.Pool
  readonly #notifications: PgNotifications | undefined
  readonly #instance: string
  readonly #local = new EventEmitter()
  /** The turn's appends, not yet sent. */
  readonly #appends: Array<{ session: string, stream: string, message: string, tell: boolean, resolve: (seq: string) => void, reject: (err: unknown) => void }> = []

  /** @param instance this process's name (`StoresOptions.instanceId`): the answers addressed to it are its to take */
  constructor (pool: pg.Pool, notifications: PgNotifications | undefined, instance: string) {
    this.#pool = pool
    this.#notifications = notifications
    this.#instance = instance
    this.#local.setMaxListeners(0)
    notifications?.on(CHANNELS.mcp, (payload) => { this.#received(payload).catch(() => {}) })
  }

  async create (record: McpSessionRecord, maxPerOwner: number): Promise<string[]> {
    const over = await inTransaction(this.#pool, async (client) => {
      await client.query('INSERT INTO mcp_sessions (id, owner, cap_session_id, initialize, level, last_seen) VALUES ($1, $2, $3, $4, $5, $6)',
        [record.id, record.owner, record.capSessionId, JSON.stringify(record.initialize), record.level, record.lastSeen])
      const { rows } = await client.query<{ id: string }>('SELECT id FROM mcp_sessions WHERE owner = $1 AND id <> $2 ORDER BY last_seen, id', [record.owner, record.id])
      return rows.slice(0, Math.max(0, rows.length + 1 - maxPerOwner)).map((r) => r.id)
    })
    return await this.remove(over)
  }

  async get (id: string): Promise<McpSessionRecord | undefined> {
    const { rows } = await this.#pool.query<McpSessionRow>({ name: 'ah_mcp_session', text: 'SELECT * FROM mcp_sessions WHERE id = $1', values: [id] })
    return rows[0] === undefined ? undefined : mcpSessionOf(rows[0])
  }

  async touch (id: string, now: number): Promise<void> {
    await this.#pool.query('UPDATE mcp_sessions SET last_seen = $1 WHERE id = $2 AND last_seen < $1', [now, id])
  }

  async setLevel (id: string, level: string): Promise<void> {
    await this.#pool.query('UPDATE mcp_sessions SET level = $1 WHERE id = $2', [level, id])
  }

  async remove (ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return []
    return await inTransaction(this.#pool, async (client) => {
      const { rows } = await client.query<{ id: string }>('DELETE FROM mcp_sessions WHERE id = ANY($1::text[]) RETURNING id', [ids])
      for (const { id } of rows) await this.#notify(client, { kind: 'closed', session: id })
      return rows.map((r) => r.id)
    })
  }

  async idle (before: number): Promise<string[]> {
    const { rows } = await this.#pool.query<{ id: string }>('SELECT id FROM mcp_sessions WHERE last_seen < $1', [before])
    return rows.map((r) => r.id)
  }

  /**
   * Appends wait for the end of the turn and go as one statement (one commit, one WAL flush, for
   * every stream's events of the turn), in the order they came: the statement draws their ids in
   * that order, so a stream's events keep theirs. An event of a session that has closed meanwhile is
   * refused alone.
   */
  async append (session: string, stream: string, message: string, tell: boolean): Promise<string> {
    return await new Promise((resolve, reject) => {
      this.#appends.push({ session, stream, message, tell, resolve, reject })
      if (this.#appends.length === 1) setImmediate(() => { this.#appendBatch() })
    })
  }

  #appendBatch (): void {
    const batch = this.#appends.splice(0)
    const told = batch.filter((a) => a.tell).map((a) => encodeSignal({ kind: 'event', session: a.session, stream: a.stream }))
    this.#pool.query<{ seq: string, session_id: string, stream_id: string }>({
      name: 'ah_mcp_append',
      text: `WITH stored AS (
          INSERT INTO mcp_events (session_id, stream_id, message, created_at)
          SELECT u.s, u.t, u.m, $4 FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(s, t, m, n) JOIN mcp_sessions ON mcp_sessions.id = u.s ORDER BY u.n
          RETURNING seq, session_id, stream_id),
        told AS (SELECT pg_notify($5, p) FROM unnest($6::text[]) AS p)
        SELECT seq, session_id, stream_id, (SELECT count(*) FROM told) AS told FROM stored ORDER BY seq`,
      values: [batch.map((a) => a.session), batch.map((a) => a.stream), batch.map((a) => a.message), Date.now(), CHANNELS.mcp, told]
    }).then(({ rows }) => {
      // the rows in the batch's order, less those of closed sessions
      let next = 0
      for (const a of batch) {
        const row = rows[next]
        if (row?.session_id === a.session && row.stream_id === a.stream) {
          next++
          a.resolve(String(row.seq))
        } else {
          a.reject(new Error(`MCP session ${a.session} has closed: its event is not kept`))
        }
      }
    }, (err: unknown) => {
      for (const a of batch) a.reject(err)
    })
  }

  async eventsFrom (session: string, from: string): Promise<{ stream: string, events: McpStoredEvent[] } | undefined> {
    if (!/^\d{1,15}$/.test(from)) return undefined
    const { rows } = await this.#pool.query<{ stream_id: string, seq: string | null, message: string | null }>(
      `SELECT s.stream_id, e.seq, e.message FROM mcp_events s LEFT JOIN mcp_events e ON e.session_id = s.session_id AND e.stream_id = s.stream_id AND e.seq >= s.seq
       WHERE s.seq = $1 AND s.session_id = $2 ORDER BY e.seq`, [from, session])
    if (rows[0] === undefined) return undefined
    return { stream: rows[0].stream_id, events: rows.filter((r) => r.seq !== null).map((r) => ({ id: String(r.seq), message: r.message as string })) }
  }

  async prune (before: number): Promise<number> {
    return Number((await this.#pool.query('DELETE FROM mcp_events WHERE created_at < $1', [before])).rowCount)
  }

  async signal (signal: McpSignal): Promise<void> {
    if (this.#notifications === undefined) {
      queueMicrotask(() => { this.#local.emit('signal', signal) })
      return
    }
    await this.#notify(this.#pool, signal)
  }

  onSignal (listener: (signal: McpSignal) => void): () => void {
    this.#local.on('signal', listener)
    return () => { this.#local.off('signal', listener) }
  }

  async #notify (client: pg.Pool | pg.ClientBase, signal: McpSignal): Promise<void> {
    let payload = encodeSignal(signal)
    if (payload.length > MAX_PAYLOAD && signal.kind === 'answer') {
      const { rows } = await client.query<{ seq: string }>('INSERT INTO mcp_events (session_id, stream_id, message, created_at) VALUES ($1, $2, $3, $4) RETURNING seq',
        [signal.session, ANSWER_STREAM, signal.message, Date.now()])
      payload = encodeSignal({ ...signal, message: '', ref: rows[0]?.seq } as McpSignal)
    }
    await client.query('SELECT pg_notify($1, $2)', [CHANNELS.mcp, payload])
  }

  async #received (payload: string): Promise<void> {
    const signal = decodeSignal(payload)
    if (signal === undefined) return
    const ref = (signal as { ref?: string }).ref
    if (signal.kind === 'answer' && ref !== undefined) {
      // the instance that asked takes the row; the others have nothing to do with it
      if (signal.instance !== this.#instance) return
      const { rows } = await this.#pool.query<{ message: string }>('DELETE FROM mcp_events WHERE seq = $1 AND stream_id = $2 RETURNING message', [ref, ANSWER_STREAM])
      if (rows[0] === undefined) return
      this.#local.emit('signal', { kind: 'answer', session: signal.session, instance: signal.instance, message: rows[0].message })
      return
    }
    this.#local.emit('signal', signal)
  }
}
