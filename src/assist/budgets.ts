import { randomUUID } from 'node:crypto'
import { AH_ERR_BUDGET_EXCEEDED } from '../errors.js'
import type { BudgetAmounts, BudgetEntry, BudgetsFile, BudgetUsage } from '../protocol/budgets.js'
import { periodEnd, periodStart, type BudgetMeasure, type BudgetPeriod, type BudgetStore, type CounterLimit, type Spend } from '../storage/budgets.js'
import { tenantOf } from '../storage/tenants.js'

/** USD per million tokens, by model (LLM_PRICES). */
export type Prices = Readonly<Record<string, { input: number, output: number }>>

/** What a backend call says of itself before it is made: the most tokens it may take, and its model, when its session named them. */
export interface CallEstimate {
  maxTokens?: number
  model?: string
}

/** A backend call's hold on the budgets: settle it, once, with what the call used (zeros: a call that failed before using anything). */
export interface Reservation {
  settle: (used: Spend) => Promise<void>
}

/** Reserve for one backend call of one owner: refused with AH_ERR_BUDGET_EXCEEDED when a budget is used up. */
export type BudgetHold = (call: CallEstimate) => Promise<Reservation>

export interface BudgetsOptions {
  /** BUDGETS_FILE, read (`budgets-file.ts`); `{}`: no budgets. */
  file: BudgetsFile
  store: BudgetStore
  /** BUDGET_CALL_ESTIMATE_TOKENS. */
  estimateTokens: number
  /** BUDGET_RESERVATION_MS. */
  reservationMs: number
  /** LLM_PRICES. */
  prices: Prices
  /** Milliseconds since the epoch (tests move it across a day or a month). */
  clock?: () => number
}

const PERIODS: readonly BudgetPeriod[] = ['day', 'month']
const ADJECTIVE: Record<BudgetPeriod, string> = { day: 'daily', month: 'monthly' }
const TENANT = 'tenant:'
const KEY = 'key:'

/**
 * The model budgets of BUDGETS_FILE over the shared counters of {@link BudgetStore}, by owner (a
 * principal id: a run's caller, a task's owner): its tenant's limits (`tenantOf(owner)`, else the
 * file's `default`) and, when the file has an entry for it, the key's own, each per UTC day and
 * month. With no file nothing is counted or refused. With one, every backend call of every tenant
 * is counted (limited or not, so `GET /v1/usage` shows them all), a key's only when it has an entry.
 */
export class Budgets {
  readonly #o: BudgetsOptions
  readonly #clock: () => number
  /** The dearest price of the table (USD per million tokens): a call of a model not known yet is estimated at it. */
  readonly #dearest: number

  constructor (options: BudgetsOptions) {
    this.#o = options
    this.#clock = options.clock ?? Date.now
    this.#dearest = Math.max(0, ...Object.values(options.prices).map((p) => Math.max(p.input, p.output)))
  }

  /** Whether BUDGETS_FILE sets any budget: without one, backend calls are neither counted nor held. */
  get enabled (): boolean {
    const f = this.#o.file
    return f.default !== undefined || Object.keys(f.tenants ?? {}).length > 0 || Object.keys(f.keys ?? {}).length > 0
  }

  /**
   * Refuse a new run of `owner` when its tenant or key has used a budget up (used at or past a
   * limit, whatever calls in flight hold).
   * @throws 429 AH_ERR_BUDGET_EXCEEDED naming the limit, its period and when it resets
   */
  async admit (owner: string): Promise<void> {
    if (!this.enabled) return
    const now = this.#clock()
    const limits = this.#limits(owner, now).filter(limited)
    if (limits.length === 0) return
    const states = await this.#o.store.read(limits, now)
    for (const [i, limit] of limits.entries()) {
      for (const measure of MEASURES) {
        const cap = limit[measure]
        const used = (states[i] as { used: Spend }).used[measure]
        if (cap !== undefined && used >= cap) throw exceeded(limit, measure, used, now)
      }
    }
  }

  /** {@link reserve} for `owner`'s calls: what a metered backend of a run or a task is given. */
  holder (owner: string): BudgetHold {
    return async (call) => await this.reserve(owner, call)
  }

  /**
   * Reserve the estimate of one backend call of `owner` against every budget that applies (see
   * {@link BudgetStore.reserve}); settle it when the call ends.
   * @throws 429 AH_ERR_BUDGET_EXCEEDED naming the first limit that refused it
   */
  async reserve (owner: string, call: CallEstimate): Promise<Reservation> {
    if (!this.enabled) return NOTHING_HELD
    const now = this.#clock()
    const limits = this.#limits(owner, now)
    const id = randomUUID()
    const answer = await this.#o.store.reserve(id, limits, this.estimate(call), now, now + this.#o.reservationMs)
    if (!answer.admitted) throw exceeded(answer.limit, answer.measure, answer.used, now)
    let settled = false
    return {
      settle: async (used) => {
        if (settled) return
        settled = true
        await this.#o.store.settle(id, limits, used)
      }
    }
  }

  /**
   * What one call is reserved as: its own `maxTokens`, else BUDGET_CALL_ESTIMATE_TOKENS; priced at
   * the dearer of its model's input and output prices (LLM_PRICES), at the table's dearest price when
   * the call names no model, at nothing for a model the table does not price (it costs nothing).
   */
  estimate (call: CallEstimate): Spend {
    const tokens = call.maxTokens ?? this.#o.estimateTokens
    const price = call.model === undefined ? this.#dearest : priceOf(this.#o.prices[call.model])
    return { tokens, cost_usd: tokens * price / 1_000_000 }
  }

  /**
   * The counters of the current day and month (of `tenant` only, when given), with their limits:
   * every tenant's and key's that has used or reserved anything, and every one the file limits.
   */
  async usage (tenant?: string): Promise<BudgetUsage[]> {
    const now = this.#clock()
    const starts = { day: periodStart('day', now), month: periodStart('month', now) }
    const states = new Map((await this.#o.store.current(starts.day, starts.month, now)).map((s) => [`${s.subject}\n${s.period}`, s]))
    const f = this.#o.file
    const subjects = new Set([...states.values()].map((s) => s.subject))
    for (const name of Object.keys(f.tenants ?? {})) subjects.add(TENANT + name)
    for (const key of Object.keys(f.keys ?? {})) subjects.add(KEY + key)
    const rows: BudgetUsage[] = []
    for (const subject of [...subjects].sort()) {
      const key = subject.startsWith(KEY) ? subject.slice(KEY.length) : null
      const owner = key ?? subject.slice(TENANT.length)
      const rowTenant = key === null ? owner : tenantOf(key)
      if (tenant !== undefined && rowTenant !== tenant) continue
      const entry = key === null ? this.#tenantEntry(owner) : f.keys?.[key]
      for (const period of PERIODS) {
        const state = states.get(`${subject}\n${period}`)
        const limit = entry?.[period]
        if (state === undefined && limit === undefined) continue
        const start = starts[period]
        rows.push({
          tenant: rowTenant,
          key,
          period,
          starts_at: new Date(start).toISOString(),
          resets_at: new Date(periodEnd(period, start)).toISOString(),
          limit: limit ?? null,
          used: state?.used ?? { tokens: 0, cost_usd: 0 },
          reserved: state?.reserved ?? { tokens: 0, cost_usd: 0, calls: 0 }
        })
      }
    }
    return rows
  }

  /** The counters a call of `owner` counts in at `now`, with the limits the file sets on each. */
  #limits (owner: string, now: number): CounterLimit[] {
    const tenant = tenantOf(owner)
    const counters = PERIODS.map((period) => counter(TENANT + tenant, period, now, this.#tenantEntry(tenant)))
    const key = this.#o.file.keys?.[owner]
    if (key !== undefined) counters.push(...PERIODS.map((period) => counter(KEY + owner, period, now, key)))
    return counters
  }

  #tenantEntry (tenant: string): BudgetEntry | undefined {
    return this.#o.file.tenants?.[tenant] ?? this.#o.file.default
  }
}

const MEASURES: readonly BudgetMeasure[] = ['tokens', 'cost_usd']

/** The reservation of a call when there are no budgets: nothing to settle. */
const NOTHING_HELD: Reservation = { settle: async () => {} }

function counter (subject: string, period: BudgetPeriod, now: number, entry: BudgetEntry | undefined): CounterLimit {
  const amounts: BudgetAmounts = entry?.[period] ?? {}
  return { subject, period, start: periodStart(period, now), ...amounts }
}

function limited (limit: CounterLimit): boolean {
  return limit.tokens !== undefined || limit.cost_usd !== undefined
}

function priceOf (price: { input: number, output: number } | undefined): number {
  return price === undefined ? 0 : Math.max(price.input, price.output)
}

/** The refusal of `limit`: what it is, whose, how much was used, and when it resets. */
function exceeded (limit: CounterLimit, measure: BudgetMeasure, used: number, now: number): InstanceType<typeof AH_ERR_BUDGET_EXCEEDED> {
  const resets = periodEnd(limit.period, limit.start)
  const key = limit.subject.startsWith(KEY) ? limit.subject.slice(KEY.length) : undefined
  const tenant = key === undefined ? limit.subject.slice(TENANT.length) : tenantOf(key)
  const cap = limit[measure] as number
  const whose = key === undefined ? `tenant ${tenant}` : `key ${key}`
  const amount = measure === 'tokens' ? `${cap} tokens` : `$${cap}`
  const spent = measure === 'tokens' ? `${used} tokens` : `$${Number(used.toFixed(6))}`
  const resetsAt = new Date(resets).toISOString()
  return new AH_ERR_BUDGET_EXCEEDED(`the ${ADJECTIVE[limit.period]} ${measure === 'tokens' ? 'token' : 'cost'} budget of ${whose} (${amount}) is used up (${spent} used); it resets at ${resetsAt}`,
    { subject: key === undefined ? 'tenant' : 'key', tenant, ...(key !== undefined ? { key } : {}), period: limit.period, measure, limit: cap, used, resets_at: resetsAt },
    Math.max(1, Math.ceil((resets - now) / 1000)))
}
