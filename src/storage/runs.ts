import type { Db } from './database.js'

/** A run as stored: its envelope's hash, who runs it, and (once ended) its JSON answer. */
export interface RunRecord {
  request_id: string
  envelope_hash: string
  /** The validated envelope, as JSON. */
  envelope: string
  session_id: string
  agent_id: string
  /** The run's main stream (its CLOSE ends the response). */
  main_stream_id: string
  state: 'running' | 'ended'
  end_reason: string | null
  owner_instance: string
  owner_pid: number
  started_at: number
  ended_at: number | null
  response_status: number | null
  response: string | null
}

/** One journaled packet: `seq` is null for an event kept off the wire (client `supported_events`). */
export interface JournalRow {
  ord: number
  stream_id: string
  seq: number | null
  frame: string
}

/**
 * Runs and their stream journal (CAP.md §5 "Resuming"): every packet a run produces, in order and
 * byte for byte, so a client that re-POSTs the same envelope can be replayed to; and each run's
 * final JSON answer, so a retried JSON request gets the same response.
 */
export class RunStore {
  readonly #db: Db
  readonly #pending: Array<[string, JournalRow]> = []
  readonly #flushMany: () => void
  #scheduled = false
  readonly #get
  readonly #start
  readonly #append
  readonly #finish
  readonly #rowsAfter

  constructor (db: Db) {
    this.#db = db
    this.#get = db.prepare('SELECT * FROM runs WHERE request_id = ?')
    this.#start = db.prepare(`INSERT INTO runs (request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, started_at)
      VALUES (@request_id, @envelope_hash, @envelope, @session_id, @agent_id, @main_stream_id, 'running', @owner_instance, @owner_pid, @started_at)`)
    this.#append = db.prepare('INSERT INTO journal (request_id, ord, stream_id, seq, frame) VALUES (?, ?, ?, ?, ?)')
    this.#finish = db.prepare(`UPDATE runs SET state = 'ended', end_reason = @end_reason, ended_at = @ended_at,
      response_status = @response_status, response = @response WHERE request_id = @request_id`)
    this.#rowsAfter = db.prepare('SELECT ord, stream_id, seq, frame FROM journal WHERE request_id = ? AND ord > ? ORDER BY ord')
    this.#flushMany = db.transaction(() => {
      for (const [requestId, row] of this.#pending) this.#append.run(requestId, row.ord, row.stream_id, row.seq, row.frame)
      this.#pending.length = 0
    })
  }

  get (requestId: string): RunRecord | undefined {
    return this.#get.get(requestId) as RunRecord | undefined
  }

  /** Record a new run. Throws (SQLite constraint) if the request id is taken. */
  start (run: Pick<RunRecord, 'request_id' | 'envelope_hash' | 'envelope' | 'session_id' | 'agent_id' | 'main_stream_id' | 'owner_instance' | 'owner_pid'>): void {
    this.#start.run({ ...run, started_at: Date.now() })
  }

  /**
   * Journal one packet (or one event kept off the wire). Packets are written in batches, one
   * transaction per turn of the event loop (and before anything reads the journal), so a fast
   * stream costs one commit per turn rather than one per packet.
   */
  append (requestId: string, row: JournalRow): void {
    this.#pending.push([requestId, row])
    if (!this.#scheduled) {
      this.#scheduled = true
      setImmediate(() => { this.flush() })
    }
  }

  /** Write the packets appended so far. */
  flush (): void {
    this.#scheduled = false
    if (this.#pending.length > 0) this.#flushMany()
  }

  /** The run is over: store how, and the JSON answer every retry of it gets (its journal is flushed first). */
  finish (requestId: string, endReason: string, status: number, response: unknown): void {
    this.flush()
    this.#finish.run({ request_id: requestId, end_reason: endReason, ended_at: Date.now(), response_status: status, response: JSON.stringify(response) })
  }

  /** Journal rows after `ord` (0: all), in order. */
  rows (requestId: string, afterOrd = 0): JournalRow[] {
    this.flush()
    return this.#rowsAfter.all(requestId, afterOrd) as JournalRow[]
  }

  /** The `ord` of the wire packet `streamId`/`seq`, if journaled. */
  ordOf (requestId: string, streamId: string, seq: number): number | undefined {
    this.flush()
    return (this.#db.prepare('SELECT ord FROM journal WHERE request_id = ? AND stream_id = ? AND seq = ?').get(requestId, streamId, seq) as { ord: number } | undefined)?.ord
  }

  /** Runs still marked running whose owner is not this instance (left behind by a process that died). */
  orphans (instanceId: string): RunRecord[] {
    return this.#db.prepare("SELECT * FROM runs WHERE state = 'running' AND owner_instance != ?").all(instanceId) as RunRecord[]
  }

  /** Delete ended runs (and their journals) that ended before `before` (ms since epoch). */
  prune (before: number): number {
    this.flush()
    return this.#db.prepare("DELETE FROM runs WHERE state = 'ended' AND ended_at < ?").run(before).changes
  }

  /** Delete a session's runs and journals (session erasure). */
  eraseSession (sessionId: string): number {
    this.flush()
    return this.#db.prepare("DELETE FROM runs WHERE session_id = ? AND state = 'ended'").run(sessionId).changes
  }
}
