import t from 'tap'
import type { FastifyRateLimitStore } from '@fastify/rate-limit'
import { MemoryRateLimitStore } from '../../src/http/rate-limit-store.js'

/** One hit of `key`, as the plugin counts it. */
async function hit (store: FastifyRateLimitStore, key: string, windowMs = 60_000): Promise<{ current: number, ttl: number }> {
  return await new Promise((resolve) => { store.incr(key, (_err, result) => { resolve(result as { current: number, ttl: number }) }, windowMs, 100) })
}

t.test('each hit is answered with the count after it, even when hits of one key are made together', async (t) => {
  const store = new MemoryRateLimitStore().child()
  const counts = await Promise.all([hit(store, 'k'), hit(store, 'k'), hit(store, 'k')])
  t.same(counts.map((c) => c.current), [1, 2, 3])
  t.equal((await hit(store, 'other')).current, 1, 'keys count apart')
  t.ok(counts.every((c) => c.ttl > 0 && c.ttl <= 60_000))
})

t.test('a window that ended starts again from one', async (t) => {
  const store = new MemoryRateLimitStore()
  t.equal((await hit(store, 'k', 1)).current, 1)
  const start = Date.now()
  while (Date.now() - start < 2) await new Promise((resolve) => setImmediate(resolve))
  t.equal((await hit(store, 'k', 1)).current, 1)
})

t.test('past 10 000 keys, the one counted least recently is forgotten', async (t) => {
  const store = new MemoryRateLimitStore()
  await hit(store, 'first')
  await hit(store, 'second')
  await hit(store, 'first')
  for (let i = 0; i < 9_999; i++) await hit(store, `k${i}`)
  t.equal((await hit(store, 'first')).current, 3, 'counted recently: kept')
  t.equal((await hit(store, 'second')).current, 1, 'the least recently counted went')
})
