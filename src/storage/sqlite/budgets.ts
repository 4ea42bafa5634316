import type { Db } from './database.js'
import { counterState, refusal, unusedState, type CounterRow, type Admission, type BudgetCounter, type BudgetStore, type CounterLimit, type CounterState, type Spend } from '../budgets.js'

const STATE = `SELECT c.subject, c.period, c.period_start, c.tokens, c.cost_usd,
  COALESCE(SUM(r.tokens), 0) AS reserved_tokens, COALESCE(SUM(r.cost_usd), 0) AS reserved_cost, COUNT(r.id) AS calls
  FROM budget_counters c LEFT JOIN budget_reservations r
    ON r.subject = c.subject AND r.period = c.period AND r.period_start = c.period_start AND r.expires_at > @now`

/**
 * {@link BudgetStore} on SQLite. Each write is one synchronous step of the group writer's immediate
 * transaction, which holds the database's write lock: no other process reserves in between.
 */
export class SqliteBudgetStore implements BudgetStore {
  readonly #db: Db
  readonly #write: <T>(op: () => T) => Promise<T>
  readonly #ensure
  readonly #state
  readonly #current
  readonly #lapsed
  readonly #hold
  readonly #add
  readonly #drop

  constructor (db: Db, write: <T>(op: () => T) => Promise<T>) {
    this.#db = db
    this.#write = write
    this.#ensure = db.prepare('INSERT OR IGNORE INTO budget_counters (subject, period, period_start, tokens, cost_usd) VALUES (?, ?, ?, 0, 0)')
    this.#state = db.prepare(`${STATE} WHERE c.subject = @subject AND c.period = @period AND c.period_start = @start GROUP BY c.subject, c.period, c.period_start`)
    this.#current = db.prepare(`${STATE} WHERE (c.period = 'day' AND c.period_start = @day) OR (c.period = 'month' AND c.period_start = @month)
      GROUP BY c.subject, c.period, c.period_start ORDER BY c.subject, c.period`)
    this.#lapsed = db.prepare('DELETE FROM budget_reservations WHERE subject = ? AND period = ? AND period_start = ? AND expires_at <= ?')
    this.#hold = db.prepare('INSERT INTO budget_reservations (id, subject, period, period_start, tokens, cost_usd, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
    this.#add = db.prepare('UPDATE budget_counters SET tokens = tokens + ?, cost_usd = cost_usd + ? WHERE subject = ? AND period = ? AND period_start = ?')
    this.#drop = db.prepare('DELETE FROM budget_reservations WHERE id = ?')
  }

  async reserve (id: string, limits: readonly CounterLimit[], estimate: Spend, now: number, expiresAt: number): Promise<Admission> {
    return await this.#write(() => this.#db.transaction(() => {
      const states = limits.map((limit) => {
        this.#ensure.run(limit.subject, limit.period, limit.start)
        this.#lapsed.run(limit.subject, limit.period, limit.start, now)
        return this.#stateOf(limit, now)
      })
      const answer = refusal(limits, states, estimate)
      if (answer.admitted) {
        for (const limit of limits) this.#hold.run(id, limit.subject, limit.period, limit.start, estimate.tokens, estimate.cost_usd, expiresAt)
      }
      return answer
    })())
  }

  async settle (id: string, counters: readonly BudgetCounter[], used: Spend): Promise<void> {
    await this.#write(() => this.#db.transaction(() => {
      for (const c of counters) {
        this.#ensure.run(c.subject, c.period, c.start)
        this.#add.run(used.tokens, used.cost_usd, c.subject, c.period, c.start)
      }
      this.#drop.run(id)
    })())
  }

  async read (counters: readonly BudgetCounter[], now: number): Promise<CounterState[]> {
    return counters.map((c) => this.#stateOf(c, now))
  }

  async current (dayStart: number, monthStart: number, now: number): Promise<CounterState[]> {
    return (this.#current.all({ day: dayStart, month: monthStart, now }) as CounterRow[]).map(counterState)
  }

  #stateOf (c: BudgetCounter, now: number): CounterState {
    const row = this.#state.get({ subject: c.subject, period: c.period, start: c.start, now }) as CounterRow | undefined
    return row === undefined ? unusedState(c) : counterState(row)
  }
}
