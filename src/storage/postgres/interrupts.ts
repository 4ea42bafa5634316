import type pg from 'pg'
import type { AuditInput } from '../audit.js'
import { rowOf, waitingRunOf, type InterruptStore, type WaitingRun, type WaitingRunRow } from '../interrupts.js'
import { inTransaction } from './database.js'

/** {@link InterruptStore} on PostgreSQL, shared by every instance: an answer taken on one goes on from any. */
export class PgInterruptStore implements InterruptStore {
  readonly #pool: pg.Pool
  readonly #audit: { appendManyIn: (client: pg.ClientBase, inputs: readonly AuditInput[]) => Promise<unknown> }

  constructor (pool: pg.Pool, audit: { appendManyIn: (client: pg.ClientBase, inputs: readonly AuditInput[]) => Promise<unknown> }) {
    this.#pool = pool
    this.#audit = audit
  }

  async save (run: WaitingRun): Promise<boolean> {
    return await this.#save(this.#pool, run)
  }

  async #save (client: pg.Pool | pg.ClientBase, run: WaitingRun): Promise<boolean> {
    const r = rowOf(run)
    if (run.version === 1) {
      const result = await client.query(`INSERT INTO waiting_runs (run_key, request_id, owner_key, session_id, agent_id, state, version, last_run, envelope, interrupts, memo, expires_at, created_at, updated_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT (run_key) DO NOTHING`,
      [r.run_key, r.request_id, r.owner_key, r.session_id, r.agent_id, r.state, r.version, r.last_run, r.envelope, r.interrupts, r.memo, r.expires_at, r.created_at, r.updated_at])
      return Number(result.rowCount) > 0
    }
    const result = await client.query(`UPDATE waiting_runs SET state = $2, version = $3, last_run = $4, interrupts = $5, memo = $6, updated_at = $7, expires_at = $8
      WHERE run_key = $1 AND version = $3 - 1`, [r.run_key, r.state, r.version, r.last_run, r.interrupts, r.memo, r.updated_at, r.expires_at])
    return Number(result.rowCount) > 0
  }

  async get (runKey: string): Promise<WaitingRun | undefined> {
    const { rows } = await this.#pool.query<WaitingRunRow>('SELECT * FROM waiting_runs WHERE run_key = $1', [runKey])
    return rows[0] === undefined ? undefined : waitingRunOf(rows[0])
  }

  async byLastRun (lastRun: string): Promise<WaitingRun | undefined> {
    const { rows } = await this.#pool.query<WaitingRunRow>('SELECT * FROM waiting_runs WHERE last_run = $1', [lastRun])
    return rows[0] === undefined ? undefined : waitingRunOf(rows[0])
  }

  async waitingByRequestId (wireId: string): Promise<WaitingRun[]> {
    const { rows } = await this.#pool.query<WaitingRunRow>('SELECT * FROM waiting_runs WHERE request_id = $1 AND state = \'waiting\' ORDER BY created_at', [wireId])
    return rows.map(waitingRunOf)
  }

  async inSession (sessionId: string): Promise<WaitingRun[]> {
    const { rows } = await this.#pool.query<WaitingRunRow>('SELECT * FROM waiting_runs WHERE session_id = $1 ORDER BY created_at, run_key', [sessionId])
    return rows.map(waitingRunOf)
  }

  async take (run: WaitingRun, audit: readonly AuditInput[]): Promise<boolean> {
    return await inTransaction(this.#pool, async (client) => {
      if (!await this.#save(client, run)) return false
      if (audit.length > 0) await this.#audit.appendManyIn(client, audit)
      return true
    })
  }

  async prune (before: number): Promise<number> {
    return Number((await this.#pool.query('DELETE FROM waiting_runs WHERE (state IN (\'ended\', \'expired\', \'resuming\') AND updated_at < $1) OR (state = \'waiting\' AND expires_at < $1)', [before])).rowCount)
  }

  async settle (runKey: string, state: 'ended' | 'expired', now: number): Promise<void> {
    await this.#pool.query('UPDATE waiting_runs SET state = $2, version = version + 1, updated_at = $3 WHERE run_key = $1', [runKey, state, now])
  }
}
