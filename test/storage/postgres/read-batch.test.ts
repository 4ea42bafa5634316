import t from 'tap'
import { PgReadBatch } from '../../../src/storage/postgres/read-batch.js'

/** A batch over a map, recording each fetch's keys. */
function over (values: Record<string, number>): { batch: PgReadBatch<string, number>, fetches: string[][] } {
  const fetches: string[][] = []
  const batch = new PgReadBatch<string, number>(async (keys) => {
    fetches.push(keys)
    return new Map(keys.filter((k) => k in values).map((k) => [k, values[k] as number]))
  })
  return { batch, fetches }
}

t.test('the loads of one turn are one fetch of their distinct keys, each caller with its own value', async (t) => {
  const { batch, fetches } = over({ a: 1, b: 2 })
  t.same(await Promise.all([batch.load('a'), batch.load('b'), batch.load('a'), batch.load('none')]), [1, 2, 1, undefined])
  t.same(fetches, [['a', 'b', 'none']])
})

t.test('a load in a later turn is another fetch, which sees what changed meanwhile', async (t) => {
  const values: Record<string, number> = { a: 1 }
  const { batch, fetches } = over(values)
  t.equal(await batch.load('a'), 1)
  values.a = 2
  t.equal(await batch.load('a'), 2)
  t.same(fetches, [['a'], ['a']])
})

t.test('a fetch that fails rejects every load of its turn with its error, and the next turn fetches anew', async (t) => {
  let fail = true
  const batch = new PgReadBatch<string, number>(async (keys) => {
    if (fail) throw new Error('connection lost')
    return new Map(keys.map((k) => [k, k.length]))
  })
  const results = await Promise.allSettled([batch.load('a'), batch.load('bb')])
  t.match(results, [{ status: 'rejected', reason: { message: 'connection lost' } }, { status: 'rejected', reason: { message: 'connection lost' } }])
  fail = false
  t.equal(await batch.load('bb'), 2)
})

t.test('keys that are objects are told apart by their identity', async (t) => {
  const fetches: Array<Array<{ s: string, k: string }>> = []
  const batch = new PgReadBatch<{ s: string, k: string }, string>(async (keys) => {
    fetches.push(keys)
    return new Map(keys.map((key) => [JSON.stringify([key.s, key.k]), `${key.s}:${key.k}`]))
  }, (key) => JSON.stringify([key.s, key.k]))
  t.same(await Promise.all([batch.load({ s: '1', k: 'x' }), batch.load({ s: '1', k: 'x' }), batch.load({ s: '1x', k: '' })]), ['1:x', '1:x', '1x:'])
  t.equal(fetches[0]?.length, 2, 'the same key asked twice is fetched once; "1","x" and "1x","" are two keys')
})
