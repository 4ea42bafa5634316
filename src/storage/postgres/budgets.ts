import type pg from 'pg'
import { inTransaction } from './database.js'
import { counterOrder, counterState, refusal, unusedState, type CounterRow, type Admission, type BudgetCounter, type BudgetStore, type CounterLimit, type CounterState, type Spend } from '../budgets.js'

const RESERVED = `COALESCE((SELECT SUM(r.tokens) FROM budget_reservations r WHERE r.subject = c.subject AND r.period = c.period AND r.period_start = c.period_start AND r.expires_at > $1), 0)::bigint AS reserved_tokens,
  COALESCE((SELECT SUM(r.cost_usd) FROM budget_reservations r WHERE r.subject = c.subject AND r.period = c.period AND r.period_start = c.period_start AND r.expires_at > $1), 0)::double precision AS reserved_cost,
  (SELECT COUNT(*) FROM budget_reservations r WHERE r.subject = c.subject AND r.period = c.period AND r.period_start = c.period_start AND r.expires_at > $1) AS calls`

/** `counters` as the arrays of one `unnest`: subjects, periods, starts. */
function columns (counters: readonly BudgetCounter[]): [string[], string[], number[]] {
  return [counters.map((c) => c.subject), counters.map((c) => c.period), counters.map((c) => c.start)]
}

/**
 * {@link BudgetStore} on PostgreSQL, shared by every instance. A reservation locks its counters'
 * rows (one `SELECT ... ORDER BY ... FOR UPDATE`) before it reads their reservations and adds its
 * own, so two instances reserving against the same counter take turns: the second sees the first's
 * reservation. A reservation is one transaction of three statements, a settlement one of two, each
 * a prepared statement of its connection (planned once).
 */
export class PgBudgetStore implements BudgetStore {
  readonly #pool: pg.Pool
  /** The counters this process made (or found made): their rows exist for good. */
  readonly #made = new Set<string>()

  constructor (pool: pg.Pool) {
    this.#pool = pool
  }

  async reserve (id: string, limits: readonly CounterLimit[], estimate: Spend, now: number, expiresAt: number): Promise<Admission> {
    const ordered = [...limits].sort(counterOrder)
    const [subjects, periods, starts] = columns(ordered)
    return await inTransaction(this.#pool, async (client) => {
      await this.#lock(client, ordered)
      // a statement of its own, after the locks: at READ COMMITTED its snapshot is taken once they are
      // held, so it sees what the holder before committed (a statement that waited for a lock still
      // reads other rows as they were when it began)
      const states = await this.#read(client, ordered, now)
      const answer = refusal(ordered, states, estimate)
      if (!answer.admitted) return answer
      await client.query({
        name: 'budget-reserve',
        text: `WITH lapsed AS (DELETE FROM budget_reservations r USING unnest($2::text[], $3::text[], $4::bigint[]) AS u(s, p, t)
          WHERE r.subject = u.s AND r.period = u.p AND r.period_start = u.t AND r.expires_at <= $8)
        INSERT INTO budget_reservations (id, subject, period, period_start, tokens, cost_usd, expires_at)
        SELECT $1, s, p, t, $5, $6, $7 FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(s, p, t)`,
        values: [id, subjects, periods, starts, estimate.tokens, estimate.cost_usd, expiresAt, now]
      })
      return answer
    })
  }

  async settle (id: string, counters: readonly BudgetCounter[], used: Spend): Promise<void> {
    const ordered = [...counters].sort(counterOrder)
    const [subjects, periods, starts] = columns(ordered)
    await inTransaction(this.#pool, async (client) => {
      await this.#lock(client, ordered)
      await client.query({
        name: 'budget-settle',
        text: `WITH settled AS (DELETE FROM budget_reservations WHERE id = $6)
        UPDATE budget_counters c SET tokens = c.tokens + $4, cost_usd = c.cost_usd + $5
        FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(s, p, t) WHERE c.subject = u.s AND c.period = u.p AND c.period_start = u.t`,
        values: [subjects, periods, starts, used.tokens, used.cost_usd, id]
      })
    })
  }

  async read (counters: readonly BudgetCounter[], now: number): Promise<CounterState[]> {
    return await this.#read(this.#pool, counters, now)
  }

  async #read (client: pg.Pool | pg.ClientBase, counters: readonly BudgetCounter[], now: number): Promise<CounterState[]> {
    const [subjects, periods, starts] = columns(counters)
    const { rows } = await client.query<CounterRow>({
      name: 'budget-read',
      text: `SELECT c.subject, c.period, c.period_start, c.tokens, c.cost_usd, ${RESERVED}
        FROM budget_counters c JOIN unnest($2::text[], $3::text[], $4::bigint[]) AS u(s, p, t) ON c.subject = u.s AND c.period = u.p AND c.period_start = u.t`,
      values: [now, subjects, periods, starts]
    })
    const found = new Map(rows.map(counterState).map((state) => [counterKey(state), state]))
    return counters.map((c) => found.get(counterKey(c)) ?? unusedState(c))
  }

  async current (dayStart: number, monthStart: number, now: number): Promise<CounterState[]> {
    const { rows } = await this.#pool.query<CounterRow>(`SELECT c.subject, c.period, c.period_start, c.tokens, c.cost_usd, ${RESERVED}
      FROM budget_counters c WHERE (c.period = 'day' AND c.period_start = $2) OR (c.period = 'month' AND c.period_start = $3) ORDER BY c.subject, c.period`,
    [now, dayStart, monthStart])
    return rows.map(counterState)
  }

  /**
   * Lock `counters` in one statement, in one order for every instance (the sort below, so two
   * reservations of the same counters never wait for each other in a cycle), making those that do
   * not exist yet first (in this transaction: a maker racing another waits for its commit, then
   * finds the row). A counter once made is never removed, so this process makes each only once.
   */
  async #lock (client: pg.ClientBase, counters: readonly BudgetCounter[]): Promise<void> {
    const missing = counters.filter((c) => !this.#made.has(counterKey(c)))
    if (missing.length > 0) {
      const [subjects, periods, starts] = columns(missing)
      await client.query({
        name: 'budget-make',
        text: `INSERT INTO budget_counters (subject, period, period_start, tokens, cost_usd)
          SELECT s, p, t, 0, 0 FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(s, p, t) ON CONFLICT DO NOTHING`,
        values: [subjects, periods, starts]
      })
    }
    const [subjects, periods, starts] = columns(counters)
    await client.query({
      name: 'budget-lock',
      text: `SELECT 1 FROM budget_counters c JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS u(s, p, t) ON c.subject = u.s AND c.period = u.p AND c.period_start = u.t
        ORDER BY c.subject COLLATE "C", c.period COLLATE "C", c.period_start FOR UPDATE OF c`,
      values: [subjects, periods, starts]
    })
    // a day's counters are new every day: forget the old ones now and then
    if (this.#made.size > 10_000) this.#made.clear()
    for (const c of missing) this.#made.add(counterKey(c))
  }
}

/** A counter as one string: its subject, period and start. */
function counterKey (c: BudgetCounter): string {
  return `${c.subject}\n${c.period}\n${c.start}`
}
