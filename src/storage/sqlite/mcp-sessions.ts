import { EventEmitter } from 'node:events'
import type { Db } from './database.js'
import { mcpSessionOf, type McpSessionRecord, type McpSessionRow, type McpSessionStore, type McpSignal, type McpStoredEvent } from '../mcp-sessions.js'

/**
 * {@link McpSessionStore} on SQLite: one process serves, so signals stay in it; sessions and their
 * streams' events outlive a restart. Writes go through the group writer.
 */
export class SqliteMcpSessionStore implements McpSessionStore {
  readonly #db: Db
  readonly #write: <T>(op: () => T) => Promise<T>
  readonly #signals = new EventEmitter()
  readonly #get
  readonly #append
  readonly #streamOf
  readonly #from

  constructor (db: Db, write: <T>(op: () => T) => Promise<T>) {
    this.#db = db
    this.#write = write
    this.#signals.setMaxListeners(0)
    this.#get = db.prepare('SELECT * FROM mcp_sessions WHERE id = ?')
    this.#append = db.prepare('INSERT INTO mcp_events (session_id, stream_id, message, created_at) VALUES (?, ?, ?, ?)')
    this.#streamOf = db.prepare('SELECT stream_id FROM mcp_events WHERE seq = ? AND session_id = ?').pluck()
    this.#from = db.prepare('SELECT seq, message FROM mcp_events WHERE session_id = ? AND stream_id = ? AND seq >= ? ORDER BY seq')
  }

  async create (record: McpSessionRecord, maxPerOwner: number): Promise<string[]> {
    const over = await this.#write(() => this.#db.transaction(() => {
      this.#db.prepare('INSERT INTO mcp_sessions (id, owner, cap_session_id, initialize, level, last_seen) VALUES (?, ?, ?, ?, ?, ?)')
        .run(record.id, record.owner, record.capSessionId, JSON.stringify(record.initialize), record.level, record.lastSeen)
      const others = this.#db.prepare('SELECT id FROM mcp_sessions WHERE owner = ? AND id <> ? ORDER BY last_seen, id').pluck().all(record.owner, record.id) as string[]
      return others.slice(0, Math.max(0, others.length + 1 - maxPerOwner))
    })())
    return await this.remove(over)
  }

  get (id: string): McpSessionRecord | undefined {
    const row = this.#get.get(id) as McpSessionRow | undefined
    return row === undefined ? undefined : mcpSessionOf(row)
  }

  async touch (id: string, now: number): Promise<void> {
    await this.#write(() => this.#db.prepare('UPDATE mcp_sessions SET last_seen = ? WHERE id = ? AND last_seen < ?').run(now, id, now))
  }

  async setLevel (id: string, level: string): Promise<void> {
    await this.#write(() => this.#db.prepare('UPDATE mcp_sessions SET level = ? WHERE id = ?').run(level, id))
  }

  async remove (ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return []
    const removed = await this.#write(() => {
      const remove = this.#db.prepare('DELETE FROM mcp_sessions WHERE id = ?')
      return ids.filter((id) => remove.run(id).changes > 0)
    })
    for (const session of removed) this.signal({ kind: 'closed', session })
    return removed
  }

  idle (before: number): string[] {
    return this.#db.prepare('SELECT id FROM mcp_sessions WHERE last_seen < ?').pluck().all(before) as string[]
  }

  async append (session: string, stream: string, message: string, tell: boolean): Promise<string> {
    const seq = await this.#write(() => this.#append.run(session, stream, message, Date.now()).lastInsertRowid)
    if (tell) this.signal({ kind: 'event', session, stream })
    return String(seq)
  }

  eventsFrom (session: string, from: string): { stream: string, events: McpStoredEvent[] } | undefined {
    if (!/^\d{1,15}$/.test(from)) return undefined
    const stream = this.#streamOf.get(Number(from), session) as string | undefined
    if (stream === undefined) return undefined
    const rows = this.#from.all(session, stream, Number(from)) as Array<{ seq: number, message: string }>
    return { stream, events: rows.map((r) => ({ id: String(r.seq), message: r.message })) }
  }

  async prune (before: number): Promise<number> {
    return await this.#write(() => this.#db.prepare('DELETE FROM mcp_events WHERE created_at < ?').run(before).changes)
  }

  signal (signal: McpSignal): void {
    // after the caller's turn, as a notification from another instance would come
    queueMicrotask(() => { this.#signals.emit('signal', signal) })
  }

  onSignal (listener: (signal: McpSignal) => void): () => void {
    this.#signals.on('signal', listener)
    return () => { this.#signals.off('signal', listener) }
  }
}
