// The budgets of BUDGETS_FILE by owner, over a real store (SQLite), on a clock the tests move:
// which limits apply to whom, periods rolling over, estimates, refusals and what GET /v1/usage lists.
import t, { type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { Budgets, type BudgetsOptions } from '../../src/assist/budgets.js'
import { loadConfig } from '../../src/config.js'
import { AH_ERR_BUDGET_EXCEEDED } from '../../src/errors.js'
import type { BudgetsFile } from '../../src/protocol/budgets.js'
import { openSqliteStores } from '../../src/storage/sqlite/index.js'
import { tempDataDir } from '../helper.js'

const quiet = { info: () => {}, warn: () => {}, error: () => {} }
const PRICES = { cheap: { input: 1, output: 2 }, dear: { input: 10, output: 40 } }

function budgets (t: Test, file: BudgetsFile, clock: { now: number }, options: Partial<BudgetsOptions> = {}): Budgets {
  const stores = openSqliteStores(loadConfig({ DATA_DIR: tempDataDir(t) }), { instanceId: randomUUID(), log: quiet, serving: false })
  t.teardown(async () => { await stores.close() })
  return new Budgets({ file, store: stores.budgets, estimateTokens: 100, reservationMs: 60_000, prices: PRICES, clock: () => clock.now, ...options })
}

/** Spend `tokens` for `owner` as one call. */
async function spend (b: Budgets, owner: string, tokens: number, cost = 0): Promise<void> {
  await (await b.reserve(owner, { maxTokens: 1 })).settle({ tokens, cost_usd: cost })
}

t.test('a tenant\'s day runs out, and comes back when the UTC day rolls over', async (t) => {
  const clock = { now: Date.UTC(2026, 2, 14, 23, 59) }
  const b = budgets(t, { tenants: { acme: { day: { tokens: 500 } } } }, clock)
  await spend(b, 'tenant:acme/k1', 500)
  await t.rejects(b.admit('tenant:acme/k2'), { code: 'AH_ERR_BUDGET_EXCEEDED', statusCode: 429 }, 'another key of the tenant is refused too')
  const err = await b.reserve('tenant:acme/k1', {}).catch((e: unknown) => e) as InstanceType<typeof AH_ERR_BUDGET_EXCEEDED>
  t.ok(err instanceof AH_ERR_BUDGET_EXCEEDED, 'a call is refused')
  t.equal(err.message, 'Budget exceeded: the daily token budget of tenant acme (500 tokens) is used up (500 tokens used); it resets at 2026-03-15T00:00:00.000Z')
  t.same(err.details, { subject: 'tenant', tenant: 'acme', period: 'day', measure: 'tokens', limit: 500, used: 500, resets_at: '2026-03-15T00:00:00.000Z' })
  t.equal(err.retryAfter, 60, 'Retry-After: the seconds until midnight UTC')
  t.equal(err.streamCode, 'budget_exceeded')
  t.equal(err.severity, 'TRANSIENT')
  await b.admit('k-of-the-default-tenant')
  clock.now = Date.UTC(2026, 2, 15)
  await b.admit('tenant:acme/k1')
  t.pass('the next day the tenant runs again')
})

t.test('a month\'s cost budget spans its days, and resets with the month', async (t) => {
  const clock = { now: Date.UTC(2026, 0, 31, 22) }
  const b = budgets(t, { default: { month: { cost_usd: 1 } } }, clock)
  await spend(b, 'anonymous', 10, 0.6)
  clock.now = Date.UTC(2026, 0, 31, 23)
  await spend(b, 'anonymous', 10, 0.4)
  await t.rejects(b.admit('anonymous'), { message: /monthly cost budget of tenant default \(\$1\) is used up \(\$1 used\); it resets at 2026-02-01T00:00:00.000Z/ })
  clock.now = Date.UTC(2026, 1, 1)
  await b.admit('anonymous')
  t.pass('February starts afresh')
})

t.test('a key\'s limit applies in addition to its tenant\'s; `default` is for the tenants the file does not list', async (t) => {
  const clock = { now: Date.UTC(2026, 5, 1, 12) }
  const b = budgets(t, { default: { day: { tokens: 1000 } }, tenants: { big: { day: { tokens: 1_000_000 } } }, keys: { 'tenant:big/greedy': { day: { tokens: 200 } } } }, clock)
  await spend(b, 'tenant:big/greedy', 200)
  t.match(await b.reserve('tenant:big/greedy', {}).catch((e: unknown) => e), { details: { subject: 'key', key: 'tenant:big/greedy', tenant: 'big', limit: 200 } }, 'the key is held to its own limit')
  await spend(b, 'tenant:big/other', 5000)
  t.pass('another key of its tenant is not, nor is the tenant (listed: not held to the default)')
  await spend(b, 'tenant:small/k', 1000)
  t.match(await b.admit('tenant:small/k').catch((e: unknown) => e), { details: { tenant: 'small', limit: 1000 } }, 'a tenant the file does not list has the default')
  const usage = await b.usage('big')
  t.same(usage.map((u) => [u.key, u.period, u.limit, u.used.tokens]), [
    ['tenant:big/greedy', 'day', { tokens: 200 }, 200],
    ['tenant:big/greedy', 'month', null, 200],
    [null, 'day', { tokens: 1_000_000 }, 5200],
    [null, 'month', null, 5200]
  ], 'one tenant\'s counters and its keys\', with their limits')
  t.same(usage[0]?.starts_at, '2026-06-01T00:00:00.000Z')
  t.same(usage[1]?.resets_at, '2026-07-01T00:00:00.000Z')
  t.same((await b.usage()).map((u) => u.tenant), ['big', 'big', 'big', 'big', 'small', 'small'], 'every tenant\'s without a filter')
})

t.test('usage lists the tenants the file limits before they use anything, and what calls in flight hold', async (t) => {
  const clock = { now: Date.UTC(2026, 5, 1, 12) }
  const b = budgets(t, { tenants: { quiet: { month: { tokens: 10 } } }, keys: { k: { day: { cost_usd: 2 } } } }, clock)
  const held = await b.reserve('k', { maxTokens: 50, model: 'cheap' })
  t.same(await b.usage(), [
    { tenant: 'default', key: 'k', period: 'day', starts_at: '2026-06-01T00:00:00.000Z', resets_at: '2026-06-02T00:00:00.000Z', limit: { cost_usd: 2 }, used: { tokens: 0, cost_usd: 0 }, reserved: { tokens: 50, cost_usd: 0.0001, calls: 1 } },
    { tenant: 'default', key: 'k', period: 'month', starts_at: '2026-06-01T00:00:00.000Z', resets_at: '2026-07-01T00:00:00.000Z', limit: null, used: { tokens: 0, cost_usd: 0 }, reserved: { tokens: 50, cost_usd: 0.0001, calls: 1 } },
    { tenant: 'quiet', key: null, period: 'month', starts_at: '2026-06-01T00:00:00.000Z', resets_at: '2026-07-01T00:00:00.000Z', limit: { tokens: 10 }, used: { tokens: 0, cost_usd: 0 }, reserved: { tokens: 0, cost_usd: 0, calls: 0 } },
    { tenant: 'default', key: null, period: 'day', starts_at: '2026-06-01T00:00:00.000Z', resets_at: '2026-06-02T00:00:00.000Z', limit: null, used: { tokens: 0, cost_usd: 0 }, reserved: { tokens: 50, cost_usd: 0.0001, calls: 1 } },
    { tenant: 'default', key: null, period: 'month', starts_at: '2026-06-01T00:00:00.000Z', resets_at: '2026-07-01T00:00:00.000Z', limit: null, used: { tokens: 0, cost_usd: 0 }, reserved: { tokens: 50, cost_usd: 0.0001, calls: 1 } }
  ].sort((a, b) => `${a.key === null ? 'tenant:' + a.tenant : 'key:' + a.key}`.localeCompare(`${b.key === null ? 'tenant:' + b.tenant : 'key:' + b.key}`)))
  await held.settle({ tokens: 40, cost_usd: 0.00005 })
  await held.settle({ tokens: 40, cost_usd: 0.00005 })
  t.same((await b.usage('default')).map((u) => u.used.tokens), [40, 40, 40, 40], 'a reservation settles once')
})

t.test('the estimate: the call\'s maxTokens, else the setting; priced at its model, or at the dearest price', async (t) => {
  const b = budgets(t, { default: { day: { tokens: 1 } } }, { now: 0 })
  t.same(b.estimate({ maxTokens: 1000, model: 'cheap' }), { tokens: 1000, cost_usd: 0.002 }, 'the dearer of the model\'s two prices')
  t.same(b.estimate({}), { tokens: 100, cost_usd: 0.004 }, 'no model named: the dearest price of the table')
  t.same(b.estimate({ model: 'free' }), { tokens: 100, cost_usd: 0 }, 'a model the table does not price costs nothing')
  t.same(budgets(t, { default: { day: { tokens: 1 } } }, { now: 0 }, { prices: {} }).estimate({}), { tokens: 100, cost_usd: 0 }, 'no prices: no cost')
})

t.test('without budgets nothing is counted, held or refused', async (t) => {
  const b = budgets(t, {}, { now: Date.UTC(2026, 5, 1) })
  t.equal(b.enabled, false)
  await (await b.holder('anonymous')({})).settle({ tokens: 1e9, cost_usd: 1e6 })
  await b.admit('anonymous')
  t.same(await b.usage(), [], 'nothing was counted')
  t.equal(budgets(t, { keys: { k: { day: { tokens: 1 } } } }, { now: 0 }).enabled, true, 'a key\'s entry alone is a budget')
})
