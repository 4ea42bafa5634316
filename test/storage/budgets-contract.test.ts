// One contract, two stores: model budgets' counters and reservations, against SQLite and
// PostgreSQL, each through the driver's whole `Stores` as the server opens them. Heavy on
// PostgreSQL (a database of its own): the race between two instances needs two pools on one database.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { drivers } from './store-drivers.js'
import { counterOrder, periodEnd, periodStart, type CounterLimit } from '../../src/storage/budgets.js'

const NOW = Date.UTC(2026, 2, 14, 12)
const LEASE = NOW + 60_000
const day = (subject: string, limits: { tokens?: number, cost_usd?: number } = {}): CounterLimit => ({ subject, period: 'day', start: periodStart('day', NOW), ...limits })
const spend = (tokens: number, cost = 0): { tokens: number, cost_usd: number } => ({ tokens, cost_usd: cost })

t.test('periods are UTC days and months, each ending where the next begins', async (t) => {
  const late = Date.UTC(2026, 1, 28, 23, 59, 59, 999)
  t.equal(periodStart('day', late), Date.UTC(2026, 1, 28))
  t.equal(periodEnd('day', periodStart('day', late)), Date.UTC(2026, 2, 1), 'the last day of February ends on March 1st')
  t.equal(periodStart('month', late), Date.UTC(2026, 1, 1))
  t.equal(periodEnd('month', Date.UTC(2026, 11, 1)), Date.UTC(2027, 0, 1), 'December ends with the year')
  const a = { subject: 'a', period: 'day' as const, start: 1 }
  t.same([{ ...a, start: 2 }, { ...a, period: 'month' as const }, { ...a, subject: 'b' }, a].sort(counterOrder), [a, { ...a, start: 2 }, { ...a, period: 'month' }, { ...a, subject: 'b' }])
})

for (const [name, open] of Object.entries(drivers)) {
  t.test(name, async (t) => {
    const made = await open(t)
    if (made === undefined) return
    const { stores, another } = made
    const budgets = stores.budgets

    t.test('a call that fits is admitted, and what it used is counted once it settles', async (t) => {
      const limit = day(`tenant:${randomUUID()}`, { tokens: 1000, cost_usd: 1 })
      const id = randomUUID()
      t.same(await budgets.reserve(id, [limit], spend(300, 0.2), NOW, LEASE), { admitted: true })
      const [held] = await budgets.read([limit], NOW)
      t.same(held?.reserved, { tokens: 300, cost_usd: 0.2, calls: 1 }, 'the estimate is held')
      t.same(held?.used, { tokens: 0, cost_usd: 0 })
      await budgets.settle(id, [limit], spend(250, 0.125))
      const [after] = await budgets.read([limit], NOW)
      t.same(after?.used, { tokens: 250, cost_usd: 0.125 }, 'the usage reported is added')
      t.same(after?.reserved, { tokens: 0, cost_usd: 0, calls: 0 }, 'and the reservation released')
    })

    t.test('near a limit one call at a time is admitted; a used-up counter admits none', async (t) => {
      const limit = day(`tenant:${randomUUID()}`, { tokens: 1000 })
      await budgets.settle(randomUUID(), [limit], spend(900))
      const first = randomUUID()
      t.same(await budgets.reserve(first, [limit], spend(500), NOW, LEASE), { admitted: true }, 'not used up, and nothing else in flight: admitted past its estimate')
      t.match(await budgets.reserve(randomUUID(), [limit], spend(1), NOW, LEASE), { admitted: false, measure: 'tokens', used: 900, limit: { subject: limit.subject, period: 'day', tokens: 1000 } }, 'a second call while the first is in flight is refused')
      await budgets.settle(first, [limit], spend(500))
      const refused = await budgets.reserve(randomUUID(), [limit], spend(1), NOW, LEASE)
      t.match(refused, { admitted: false, used: 1400 }, 'once the counter is used up, nothing is admitted')
      const [state] = await budgets.read([limit], NOW)
      t.same(state?.reserved.calls, 0, 'a refused call holds nothing')
    })

    t.test('calls that fit together run together', async (t) => {
      const limit = day(`tenant:${randomUUID()}`, { tokens: 1000 })
      for (let i = 0; i < 4; i++) t.same(await budgets.reserve(randomUUID(), [limit], spend(250), NOW, LEASE), { admitted: true }, `call ${i + 1} fits`)
      t.match(await budgets.reserve(randomUUID(), [limit], spend(1), NOW, LEASE), { admitted: false }, 'the fifth does not, and others are in flight')
    })

    t.test('a cost limit refuses as a token limit does', async (t) => {
      const limit = day(`tenant:${randomUUID()}`, { cost_usd: 0.5 })
      await budgets.settle(randomUUID(), [limit], spend(10, 0.5))
      t.match(await budgets.reserve(randomUUID(), [limit], spend(1, 0.001), NOW, LEASE), { admitted: false, measure: 'cost_usd', used: 0.5 })
    })

    t.test('a reservation whose lease lapsed stops counting', async (t) => {
      const limit = day(`tenant:${randomUUID()}`, { tokens: 1000 })
      await budgets.settle(randomUUID(), [limit], spend(900))
      t.same(await budgets.reserve(randomUUID(), [limit], spend(500), NOW, NOW + 10), { admitted: true }, 'held by an instance that then dies')
      t.match(await budgets.reserve(randomUUID(), [limit], spend(1), NOW + 9, NOW + 60_000), { admitted: false }, 'while its lease runs, it holds the budget')
      const [lapsed] = await budgets.read([limit], NOW + 10)
      t.same(lapsed?.reserved, { tokens: 0, cost_usd: 0, calls: 0 }, 'past its lease it counts for nothing')
      t.same(await budgets.reserve(randomUUID(), [limit], spend(1), NOW + 10, NOW + 60_000), { admitted: true }, 'and another call gets the budget')
    })

    t.test('every counter of a call must admit it, and a refusal reserves on none', async (t) => {
      const tenant = day(`tenant:${randomUUID()}`, { tokens: 1_000_000 })
      const key = day(`key:${randomUUID()}`, { tokens: 100 })
      const unlimited = { ...day(`tenant:${randomUUID()}`), period: 'month' as const, start: periodStart('month', NOW) }
      await budgets.settle(randomUUID(), [tenant, key], spend(100))
      t.match(await budgets.reserve(randomUUID(), [tenant, unlimited, key], spend(10), NOW, LEASE), { admitted: false, limit: { subject: key.subject } }, 'the key\'s limit refuses what the tenant\'s allows')
      const states = await budgets.read([tenant, unlimited], NOW)
      t.same(states.map((s) => s.reserved.calls), [0, 0], 'nothing held on the counters that admitted it')
      t.same(states.map((s) => s.used.tokens), [100, 0], 'a counter never used reads as zeros')
    })

    t.test('the current day\'s and month\'s counters, with their live reservations', async (t) => {
      const subject = `tenant:${randomUUID()}`
      const month = { subject, period: 'month' as const, start: periodStart('month', NOW) }
      const yesterday = { subject, period: 'day' as const, start: periodStart('day', NOW) - 86_400_000 }
      await budgets.settle(randomUUID(), [yesterday], spend(7))
      await budgets.reserve(randomUUID(), [day(subject), month], spend(5, 0.01), NOW, LEASE)
      await budgets.settle(randomUUID(), [day(subject), month], spend(3, 0.002))
      const current = (await budgets.current(periodStart('day', NOW), month.start, NOW)).filter((s) => s.subject === subject)
      t.same(current, [
        { subject, period: 'day', start: periodStart('day', NOW), used: { tokens: 3, cost_usd: 0.002 }, reserved: { tokens: 5, cost_usd: 0.01, calls: 1 } },
        { subject, period: 'month', start: month.start, used: { tokens: 3, cost_usd: 0.002 }, reserved: { tokens: 5, cost_usd: 0.01, calls: 1 } }
      ], 'yesterday\'s counter is not today\'s')
    })

    t.test('two instances reserving at once pass a limit by at most the one call in flight', async (t) => {
      const other = (await another()).budgets
      const call = 100
      const limit = day(`tenant:${randomUUID()}`, { tokens: 1000 })
      const key = day(`key:${randomUUID()}`, { tokens: 1_000_000 })
      let admitted = 0
      let refused = 0
      const loop = async (store: typeof budgets): Promise<void> => {
        for (;;) {
          const id = randomUUID()
          const answer = await store.reserve(id, [key, limit], spend(call), Date.now(), Date.now() + 60_000)
          if (!answer.admitted) {
            refused++
            return
          }
          admitted++
          // the call runs while the other instance reserves
          await new Promise((resolve) => setImmediate(resolve))
          await store.settle(id, [limit, key], spend(call))
        }
      }
      await Promise.all([budgets, other, budgets, other, budgets, other].map(loop))
      const [state] = await budgets.read([limit], Date.now())
      t.equal(refused, 6, 'every loop was stopped by the limit')
      t.equal(state?.used.tokens, admitted * call, 'every admitted call was counted')
      t.ok((state?.used.tokens ?? 0) >= 1000, `the budget was used up (${state?.used.tokens ?? 0})`)
      t.ok((state?.used.tokens ?? 0) <= 1000 + call, `and passed by at most one call (${state?.used.tokens ?? 0} of 1000)`)
      t.same(state?.reserved.calls, 0, 'nothing left held')
    })

    t.test('near a limit, of many calls reserving at once on two instances, one is admitted', async (t) => {
      const other = (await another()).budgets
      for (let round = 0; round < 5; round++) {
        const limit = day(`tenant:${randomUUID()}`, { tokens: 1000 })
        await budgets.settle(randomUUID(), [limit], spend(950))
        const answers = await Promise.all(Array.from({ length: 12 }, async (_, i) => await (i % 2 === 0 ? budgets : other).reserve(randomUUID(), [limit], spend(100), NOW, LEASE)))
        t.equal(answers.filter((a) => a.admitted).length, 1, `round ${round + 1}: one call at a time`)
      }
    })
  })
}
