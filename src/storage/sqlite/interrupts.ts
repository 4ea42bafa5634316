import type { Db } from './database.js'
import type { AuditInput } from '../audit.js'
import { rowOf, waitingRunOf, type InterruptStore, type WaitingRun, type WaitingRunRow } from '../interrupts.js'

/** {@link InterruptStore} on SQLite: reads at once; the writes run inside the group writer, `take` with its audit rows. */
export class SqliteInterruptStore implements InterruptStore {
  readonly #db: Db
  readonly #audit: { append: (input: AuditInput) => unknown }
  readonly #write: <T>(op: () => T) => Promise<T>
  readonly #get
  readonly #byLast
  readonly #inSession

  constructor (db: Db, audit: { append: (input: AuditInput) => unknown }, write: <T>(op: () => T) => Promise<T>) {
    this.#db = db
    this.#audit = audit
    this.#write = write
    this.#get = db.prepare('SELECT * FROM waiting_runs WHERE run_key = ?')
    this.#byLast = db.prepare('SELECT * FROM waiting_runs WHERE last_run = ?')
    this.#inSession = db.prepare('SELECT * FROM waiting_runs WHERE session_id = ? ORDER BY created_at, run_key')
  }

  async save (run: WaitingRun): Promise<boolean> {
    return await this.#write(() => this.#save(run))
  }

  #save (run: WaitingRun): boolean {
    const row = rowOf(run)
    if (run.version === 1) {
      return this.#db.prepare(`INSERT INTO waiting_runs (run_key, request_id, owner_key, session_id, agent_id, state, version, last_run, envelope, interrupts, memo, expires_at, created_at, updated_at)
        VALUES (@run_key, @request_id, @owner_key, @session_id, @agent_id, @state, @version, @last_run, @envelope, @interrupts, @memo, @expires_at, @created_at, @updated_at)
        ON CONFLICT (run_key) DO NOTHING`).run(row).changes > 0
    }
    return this.#db.prepare(`UPDATE waiting_runs SET state = @state, version = @version, last_run = @last_run, interrupts = @interrupts, memo = @memo, expires_at = @expires_at, updated_at = @updated_at
      WHERE run_key = @run_key AND version = @version - 1`).run(row).changes > 0
  }

  get (runKey: string): WaitingRun | undefined {
    const row = this.#get.get(runKey) as WaitingRunRow | undefined
    return row === undefined ? undefined : waitingRunOf(row)
  }

  byLastRun (lastRun: string): WaitingRun | undefined {
    const row = this.#byLast.get(lastRun) as WaitingRunRow | undefined
    return row === undefined ? undefined : waitingRunOf(row)
  }

  waitingByRequestId (wireId: string): WaitingRun[] {
    return (this.#db.prepare('SELECT * FROM waiting_runs WHERE request_id = ? AND state = \'waiting\' ORDER BY created_at').all(wireId) as WaitingRunRow[]).map(waitingRunOf)
  }

  inSession (sessionId: string): WaitingRun[] {
    return (this.#inSession.all(sessionId) as WaitingRunRow[]).map(waitingRunOf)
  }

  async take (run: WaitingRun, audit: readonly AuditInput[]): Promise<boolean> {
    return await this.#write(() => this.#db.transaction(() => {
      if (!this.#save(run)) return false
      for (const input of audit) this.#audit.append(input)
      return true
    })())
  }

  async prune (before: number): Promise<number> {
    return await this.#write(() => this.#db.prepare('DELETE FROM waiting_runs WHERE (state IN (\'ended\', \'expired\', \'resuming\') AND updated_at < @before) OR (state = \'waiting\' AND expires_at < @before)').run({ before }).changes)
  }

  async settle (runKey: string, state: 'ended' | 'expired', now: number): Promise<void> {
    await this.#write(() => {
      this.#db.prepare('UPDATE waiting_runs SET state = ?, version = version + 1, updated_at = ? WHERE run_key = ?').run(state, now, runKey)
    })
  }
}
