/**
 * Model budgets' counters and reservations (the port: no SQL). A counter is one subject's usage in
 * one period: `tenant:<name>` or `key:<principal id>`, in a UTC day or month, keyed by the period's
 * start. A backend call reserves its estimate against every counter whose limits apply, in one
 * transaction, and settles what it used when it ends. Drivers: `sqlite/budgets.ts`,
 * `postgres/budgets.ts`; the limits themselves come from BUDGETS_FILE (`assist/budgets.ts`).
 */

/** A UTC day or a UTC month. */
export type BudgetPeriod = 'day' | 'month'

/** What a limit counts: tokens (input + output) or cost in US dollars. */
export type BudgetMeasure = 'tokens' | 'cost_usd'

/** Tokens and cost. */
export interface Spend {
  tokens: number
  cost_usd: number
}

/** One counter: whose (`tenant:<name>`, `key:<principal id>`), of which period, from when (ms since the epoch, UTC). */
export interface BudgetCounter {
  subject: string
  period: BudgetPeriod
  start: number
}

/** A counter with its limits (an absent measure is not limited). */
export interface CounterLimit extends BudgetCounter {
  tokens?: number
  cost_usd?: number
}

/** A counter as it stands: what was used, and what live reservations hold (`calls` of them). */
export interface CounterState extends BudgetCounter {
  used: Spend
  reserved: Spend & { calls: number }
}

/** A reservation's answer: admitted, or the first limit that refused it, with what the counter had used. */
export type Admission =
  | { admitted: true }
  | { admitted: false, limit: CounterLimit, measure: BudgetMeasure, used: number }

/**
 * The counters every instance shares. Only reservations whose lease (`expiresAt`) has not passed
 * count; one that lapsed (its instance died mid-call) holds nothing.
 */
export interface BudgetStore {
  /**
   * Reserve `estimate` under reservation `id` against every counter of `limits`, in one transaction
   * that no other reservation of the same counters interleaves with (across instances): admitted
   * iff, for each limited measure of each counter, {@link admits} holds; else nothing is reserved.
   */
  reserve: (id: string, limits: readonly CounterLimit[], estimate: Spend, now: number, expiresAt: number) => Promise<Admission>
  /** Add `used` to each of `counters` and drop reservation `id` (whether or not it is still live), in one transaction. */
  settle: (id: string, counters: readonly BudgetCounter[], used: Spend) => Promise<void>
  /** `counters` as they stand at `now` (a counter never used reads as zeros). */
  read: (counters: readonly BudgetCounter[], now: number) => Promise<CounterState[]>
  /** Every counter of the day starting at `dayStart` and of the month starting at `monthStart`, as it stands at `now`. */
  current: (dayStart: number, monthStart: number, now: number) => Promise<CounterState[]>
}

/** A counter as both databases answer it: its usage, and the sum of its live reservations. */
export interface CounterRow {
  subject: string
  period: BudgetPeriod
  period_start: number
  tokens: number
  cost_usd: number
  reserved_tokens: number
  reserved_cost: number
  calls: number
}

/** A counter never used, nor reserved against: zeros. */
export function unusedState (c: BudgetCounter): CounterState {
  return { subject: c.subject, period: c.period, start: c.start, used: { tokens: 0, cost_usd: 0 }, reserved: { tokens: 0, cost_usd: 0, calls: 0 } }
}

/** A {@link CounterRow} as a {@link CounterState}. */
export function counterState (row: CounterRow): CounterState {
  return {
    subject: row.subject,
    period: row.period,
    start: row.period_start,
    used: { tokens: row.tokens, cost_usd: row.cost_usd },
    reserved: { tokens: row.reserved_tokens, cost_usd: row.reserved_cost, calls: row.calls }
  }
}

/**
 * The admission rule of one limited measure: the call fits (`used + reserved + estimate <= limit`),
 * or the counter is not used up and no other call holds a reservation on it, so that near a limit
 * one call at a time runs and usage passes a limit by at most the one call in flight.
 */
export function admits (limit: number, used: number, reserved: number, liveCalls: number, estimate: number): boolean {
  return used + reserved + estimate <= limit || (used < limit && liveCalls === 0)
}

/**
 * The first limit of `states` (each a counter of `limits`, same order) that refuses `estimate`, if
 * any: what both drivers decide with once the counters are locked.
 */
export function refusal (limits: readonly CounterLimit[], states: readonly CounterState[], estimate: Spend): Admission {
  for (const [i, limit] of limits.entries()) {
    const state = states[i] as CounterState
    for (const measure of ['tokens', 'cost_usd'] as const) {
      const cap = limit[measure]
      if (cap !== undefined && !admits(cap, state.used[measure], state.reserved[measure], state.reserved.calls, estimate[measure])) {
        return { admitted: false, limit, measure, used: state.used[measure] }
      }
    }
  }
  return { admitted: true }
}

/** The start of the UTC day or month `now` is in (ms since the epoch). */
export function periodStart (period: BudgetPeriod, now: number): number {
  const d = new Date(now)
  return period === 'day' ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()) : Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)
}

/** When the period that starts at `start` ends: the counter's reset. */
export function periodEnd (period: BudgetPeriod, start: number): number {
  const d = new Date(start)
  return period === 'day' ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1) : Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1)
}

/** Counters in one order (subject, period, start): the order locks are taken in, so two transactions never wait on each other in a cycle. */
export function counterOrder (a: BudgetCounter, b: BudgetCounter): number {
  return a.subject < b.subject ? -1 : a.subject > b.subject ? 1 : a.period < b.period ? -1 : a.period > b.period ? 1 : a.start - b.start
}
