// One contract, two stores: every behaviour of the event bus's store, run against SQLite and
// against PostgreSQL. The bus itself (globs, filters, its delivery loop) is test/bus/event-bus.test.ts.
import t, { type Test } from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteBusStore } from '../../src/storage/sqlite/bus.js'
import { type BusEvent, type BusStore, type NewBusEvent, type SubscriptionRecord } from '../../src/storage/bus.js'
import { inTransaction, openPostgres } from '../../src/storage/postgres/database.js'
import { PgBusStore } from '../../src/storage/postgres/bus.js'
import { pgDatabase } from '../pg.js'

/** A DATA_DIR of this test's own (test/helper.ts's would load the whole app; a store needs none of it). */
function tempDir (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-bus-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  return dir
}

const T = Date.parse('2026-11-22T10:00:00.000Z')

const stores: Record<string, (t: Test) => Promise<BusStore | undefined>> = {
  sqlite: async (t) => {
    const db = openDatabase(tempDir(t))
    t.teardown(() => db.close())
    return new SqliteBusStore(db)
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const pool = await openPostgres(url)
    t.teardown(async () => { await pool.end() })
    return new PgBusStore(pool)
  }
}

/** An event published at `T` that lives a minute, unless told otherwise. */
function ev (key: string, extra: Partial<NewBusEvent> = {}): NewBusEvent {
  return { id: `id-${key}`, type: 'x.y', key, visibility: 'a2a', priority: 5, target_agents: null, data: { key }, source: 'test', owner_key: null, owner_agents: null, owner_scopes: null, trace_id: null, published_at: T, expires_at: T + 60_000, ...extra }
}

function sub (id: string, extra: Partial<SubscriptionRecord> = {}): SubscriptionRecord {
  return { id, agent: null, patterns: ['**'], filter: null, max_attempts: 3, backoff_ms: 1000, ...extra }
}

const all = (): boolean => true

/** A subscription's fields (a store may answer more: when it was made and changed). */
const fields = (subs: SubscriptionRecord[]): SubscriptionRecord[] => subs.map((s) => ({ id: s.id, agent: s.agent, patterns: s.patterns, filter: s.filter, max_attempts: s.max_attempts, backoff_ms: s.backoff_ms }))

for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} store: the BusStore contract`, async (t) => {
    t.test('subscriptions are saved, updated in place, listed by id, and removed with the deliveries they have not handled', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s2', { agent: 'planner', filter: { repo: 'main' } }), T)
      await store.saveSubscription(sub('s1'), T)
      t.same(fields(await store.subscriptions()), [sub('s1'), sub('s2', { agent: 'planner', filter: { repo: 'main' } })])
      await store.saveSubscription(sub('s1', { patterns: ['code.*'], max_attempts: 5 }), T + 1)
      await store.saveSubscription(sub('s1', { patterns: ['code.*'], max_attempts: 5 }), T + 2)
      t.same(fields(await store.subscriptions()), [sub('s1', { patterns: ['code.*'], max_attempts: 5 }), sub('s2', { agent: 'planner', filter: { repo: 'main' } })])
      await store.publish(ev('k'), all)
      t.equal(await store.removeSubscription('s1'), true)
      t.equal(await store.removeSubscription('s1'), false, 'removed once')
      t.same((await store.claim(['s1'], 'me', 1000, T, 10)).deliveries, [], 'its waiting delivery went with it')
      t.equal((await store.claim(['s2'], 'me', 1000, T, 10)).deliveries.length, 1, 'the other subscription keeps its own')
      t.same((await store.subscriptions()).map((s) => s.id), ['s2'])
    })

    t.test('a publication stores its event and one delivery per subscription it matches', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('a', { agent: 'planner' }), T)
      await store.saveSubscription(sub('b'), T)
      const asked: string[] = []
      const first = await store.publish(ev('one', { target_agents: ['planner'], owner_key: 'k1', owner_agents: ['planner', 'relay'], owner_scopes: ['bus:publish', 'assist:invoke'], trace_id: 'tr', data: { nested: [1, { x: null }] } }), (s) => { asked.push(s.id); return s.agent === 'planner' })
      t.same(asked, ['a', 'b'], 'every subscription is asked, as stored')
      t.equal(first.duplicate, false)
      t.same(first.event, { ...ev('one', { target_agents: ['planner'], owner_key: 'k1', owner_agents: ['planner', 'relay'], owner_scopes: ['bus:publish', 'assist:invoke'], trace_id: 'tr', data: { nested: [1, { x: null }] } }), seq: first.event.seq })
      t.same(await store.event(first.event.seq), first.event, 'stored as published')
      const second = await store.publish(ev('two', { data: undefined }), all)
      t.ok(second.event.seq > first.event.seq, 'seq grows')
      t.equal((await store.event(second.event.seq))?.data, null, 'no data is stored as null')
      t.equal(await store.event(second.event.seq + 100), undefined)
      const { deliveries } = await store.claim(['a', 'b'], 'me', 1000, T, 10)
      t.same(deliveries.map((d) => [d.subscription_id, d.event.key, d.attempts]).sort(), [['a', 'one', 0], ['a', 'two', 0], ['b', 'two', 0]])
      t.same(deliveries.find((d) => d.event.key === 'one')?.event.owner_agents, ['planner', 'relay'], 'a delivery carries its owner\'s agent list')
      await t.rejects(Promise.resolve().then(async () => await store.publish(ev('three', { id: 'id-one' }), all)), 'an event id is stored once')
      t.equal(await store.head(), second.event.seq, 'a refused publication stores nothing')
      const { owner_agents: _any, ...unlisted } = ev('four')
      const fourth = await store.publish(unlisted, all)
      t.equal((await store.event(fourth.event.seq))?.owner_agents, null, 'no list given: null (any agent)')
    })

    t.test('a key still alive is a duplicate: nothing stored, the live event is the answer; once it expired the key is new', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s'), T)
      const first = await store.publish(ev('same', { id: 'e1', data: { n: 1 } }), all)
      const again = await store.publish(ev('same', { id: 'e2', data: { n: 2 }, published_at: T + 59_999, expires_at: T + 119_999 }), all)
      t.equal(again.duplicate, true)
      t.same(again.event, first.event, 'the answer is the live event')
      t.equal(await store.head(), first.event.seq, 'nothing stored')
      t.equal((await store.claim(['s'], 'me', 1000, T, 10)).deliveries.length, 1, 'delivered once')
      const later = await store.publish(ev('same', { id: 'e3', data: { n: 3 }, published_at: T + 60_000, expires_at: T + 120_000 }), all)
      t.equal(later.duplicate, false, 'the first one expired: a new event')
      t.equal(later.event.id, 'e3')
      t.equal((await store.publish(ev('other', { id: 'e4' }), all)).duplicate, false, 'another key is another event')
    })

    t.test('a key is its owner\'s: another owner (or the host, owner null) publishing the same key stores its own event, and is answered only with its own (issue 27, fault 3)', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const a = await store.publish(ev('k', { id: 'a1', owner_key: 'alice', data: { secret: 1 } }), all)
      const b = await store.publish(ev('k', { id: 'b1', owner_key: 'bob', data: { n: 2 } }), all)
      const host = await store.publish(ev('k', { id: 'h1', owner_key: null }), all)
      t.same([a.duplicate, b.duplicate, host.duplicate], [false, false, false], 'three owners, three events')
      t.same([b.event.id, b.event.data], ['b1', { n: 2 }], 'bob\'s answer is his own event')
      t.same([(await store.publish(ev('k', { id: 'a2', owner_key: 'alice' }), all)).event.id, (await store.publish(ev('k', { id: 'b2', owner_key: 'bob' }), all)).event.id, (await store.publish(ev('k', { id: 'h2', owner_key: null }), all)).event.id],
        ['a1', 'b1', 'h1'], 'each owner\'s repeat is a duplicate of its own event')
      t.equal(await store.head(), host.event.seq, 'the repeats stored nothing')
    })

    t.test('claims go by priority, then age, up to the limit, each leased to one owner until its lease lapses', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s'), T)
      await store.saveSubscription(sub('other'), T)
      for (const [key, priority] of [['low', 1], ['mid-1', 5], ['high', 10], ['mid-2', 5]] as const) await store.publish(ev(key, { priority }), all)
      t.same(await store.claim([], 'a', 1000, T, 10), { deliveries: [], expired: 0 }, 'no subscriptions, nothing')
      const a = await store.claim(['s'], 'a', 1000, T, 3)
      t.same(a.deliveries.map((d) => d.event.key), ['high', 'mid-1', 'mid-2'])
      t.equal(a.expired, 0)
      t.same((await store.claim(['s'], 'b', 1000, T + 999, 10)).deliveries.map((d) => d.event.key), ['low'], 'what a holds is not handed to b')
      t.same((await store.claim(['s'], 'c', 1000, T + 999, 10)).deliveries, [], 'nor what b holds to c')
      const b = await store.claim(['s'], 'b', 1000, T + 1000, 10)
      t.same(b.deliveries.map((d) => [d.event.key, d.attempts]), [['high', 0], ['mid-1', 0], ['mid-2', 0]], 'a lapsed lease is anyone\'s, no attempt counted')
      t.equal(await store.ack('s', a.deliveries[0]?.event.seq as number, 'a'), false, 'a, whose lease was taken, changes nothing')
      t.equal((await store.claim(['other'], 'a', 1000, T, 10)).deliveries.length, 4, 'another subscription has its own deliveries')
    })

    t.test('a delivery whose event expired is dropped and counted, never handed out', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s'), T)
      await store.publish(ev('short', { expires_at: T + 1000, priority: 9 }), all)
      await store.publish(ev('long'), all)
      const { deliveries, expired } = await store.claim(['s'], 'me', 1000, T + 1000, 10)
      t.same(deliveries.map((d) => d.event.key), ['long'])
      t.equal(expired, 1)
      t.ok(await store.ack('s', deliveries[0]?.event.seq as number, 'me'))
      t.equal(await store.nextDue(['s']), undefined, 'the expired delivery is gone too')
    })

    t.test('ack is fenced by the lease owner, and deletes the delivery', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s'), T)
      const { event } = await store.publish(ev('k'), all)
      await store.claim(['s'], 'a', 1000, T, 10)
      t.equal(await store.ack('s', event.seq, 'b'), false, 'not b\'s')
      t.equal(await store.ack('s', event.seq, 'a'), true)
      t.equal(await store.ack('s', event.seq, 'a'), false, 'acknowledged once')
      t.same((await store.claim(['s'], 'b', 1000, T + 5000, 10)).deliveries, [], 'handled: never handed out again')
    })

    t.test('a failure retries after a doubling backoff, then dead-letters with a copy of its event; only the holder may fail it', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s', { max_attempts: 3, backoff_ms: 1000 }), T)
      const { event } = await store.publish(ev('poison', { owner_key: 'k1', data: { v: 1 } }), all)
      await store.claim(['s'], 'a', 5000, T, 10)
      t.equal(await store.fail('s', event.seq, 'b', 'not mine', T), 'lost', 'b does not hold it')
      t.equal(await store.fail('s', event.seq, 'a', 'boom 1', T), 'retry')
      t.equal(await store.nextDue(['s']), T + 1000, 'due after the backoff, its lease released')
      t.same((await store.claim(['s'], 'a', 5000, T + 999, 10)).deliveries, [])
      const second = await store.claim(['s'], 'b', 5000, T + 1000, 10)
      t.same(second.deliveries.map((d) => d.attempts), [1], 'one attempt counted')
      t.equal(await store.fail('s', event.seq, 'a', 'stale', T + 1000), 'lost', 'a no longer holds it')
      t.equal(await store.fail('s', event.seq, 'b', 'boom 2', T + 1000), 'retry')
      t.equal(await store.nextDue(['s']), T + 3000, 'the backoff doubled')
      t.same((await store.claim(['s'], 'c', 5000, T + 3000, 10)).deliveries.map((d) => d.attempts), [2])
      t.equal(await store.fail('s', event.seq, 'c', 'boom 3', T + 3000), 'dead')
      t.equal(await store.fail('s', event.seq, 'c', 'boom 3', T + 3000), 'lost', 'a delivery no longer held is not failed twice')
      t.same(await store.deadLetters({}), [{ id: (await store.deadLetters({}))[0]?.id, subscription_id: 's', event, attempts: 3, last_error: 'boom 3', dead_at: T + 3000 }])
      t.same((await store.claim(['s'], 'c', 5000, T + 100_000, 10)).deliveries, [], 'a dead letter is not delivered')
      t.equal(await store.nextDue(['s']), undefined)
    })

    t.test('the backoff is at most a minute', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s', { max_attempts: 5, backoff_ms: 40_000 }), T)
      const { event } = await store.publish(ev('k', { expires_at: T + 3_600_000 }), all)
      await store.claim(['s'], 'a', 1000, T, 1)
      t.equal(await store.fail('s', event.seq, 'a', 'x', T), 'retry')
      t.equal(await store.nextDue(['s']), T + 40_000)
      await store.claim(['s'], 'a', 1000, T + 40_000, 1)
      t.equal(await store.fail('s', event.seq, 'a', 'x', T + 40_000), 'retry')
      t.equal(await store.nextDue(['s']), T + 100_000, '60 s, not 80 s')
    })

    t.test('nextDue: the soonest delivery of these subscriptions, counting a lease\'s end', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s'), T)
      await store.saveSubscription(sub('later'), T)
      t.equal(await store.nextDue([]), undefined)
      t.equal(await store.nextDue(['s']), undefined, 'none waiting')
      await store.publish(ev('k'), (s) => s.id === 's')
      t.equal(await store.nextDue(['s']), T, 'due when published')
      await store.claim(['s'], 'a', 500, T + 10, 10)
      t.equal(await store.nextDue(['s', 'later']), T + 510, 'leased: due again when the lease ends')
      t.equal(await store.nextDue(['later']), undefined)
    })

    t.test('dead letters: after a cursor, a page at a time, one owner\'s', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s', { max_attempts: 1 }), T)
      for (const [key, owner] of [['a', 'k1'], ['b', 'tenant:acme/k2'], ['c', 'k1']] as const) {
        const { event } = await store.publish(ev(key, { owner_key: owner }), all)
        await store.claim(['s'], 'me', 1000, T, 1)
        t.equal(await store.fail('s', event.seq, 'me', `bad ${key}`, T), 'dead')
      }
      const letters = await store.deadLetters({})
      t.same(letters.map((l) => [l.event.key, l.last_error]), [['a', 'bad a'], ['b', 'bad b'], ['c', 'bad c']])
      t.same((await store.deadLetters({ after: letters[0]?.id })).map((l) => l.event.key), ['b', 'c'])
      t.same((await store.deadLetters({ limit: 1 })).map((l) => l.event.key), ['a'])
      t.same((await store.deadLetters({ viewer: { owner: 'k1' } })).map((l) => l.event.key), ['a', 'c'])
      t.same(await store.deadLetters({ viewer: { owner: 'nobody' } }), [])
      t.same((await store.deadLetters({ viewer: { tenant: 'default' } })).map((l) => l.event.key), ['a', 'c'], 'a tenant\'s admin sees its tenant\'s letters')
      t.same((await store.deadLetters({ viewer: { tenant: 'acme' } })).map((l) => l.event.key), ['b'])
      t.same(await store.deadLetters({ viewer: { tenant: 'acm' } }), [])
    })

    t.test('a dead letter delivered again: due at once, attempts from zero, the letter gone; refused once its event expired or its subscription went', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s', { max_attempts: 1 }), T)
      for (const key of ['one', 'two']) {
        const { event } = await store.publish(ev(key, { owner_key: 'k1' }), all)
        await store.claim(['s'], 'me', 1000, T, 1)
        await store.fail('s', event.seq, 'me', 'broken', T)
      }
      const [one, two] = await store.deadLetters({})
      t.equal(await store.redrive(one?.id as number, T + 10, { owner: 'k2' }), 'missing', 'another owner\'s letter is not found')
      t.equal(await store.redrive(999_999, T + 10), 'missing')
      t.equal(await store.redrive(one?.id as number, T + 10, { owner: 'k1' }), 'retried')
      t.equal(await store.redrive(one?.id as number, T + 10, { owner: 'k1' }), 'missing', 'the letter is gone')
      t.equal(await store.nextDue(['s']), T + 10, 'due at once')
      t.same((await store.claim(['s'], 'me', 1000, T + 10, 10)).deliveries.map((d) => [d.event.key, d.attempts]), [['one', 0]], 'delivered again, as a first attempt')
      t.same((await store.deadLetters({})).map((l) => l.id), [two?.id])
      t.equal(await store.redrive(two?.id as number, T + 60_000), 'expired', 'past its time to live')
      t.ok(await store.removeSubscription('s'))
      t.equal(await store.redrive(two?.id as number, T + 10), 'unsubscribed')
      t.equal((await store.deadLetters({})).length, 1, 'a refused letter stays')
      await store.prune(T + 60_000)
      await store.saveSubscription(sub('s'), T)
      t.equal(await store.redrive(two?.id as number, T + 10), 'expired', 'its event was pruned')
    })

    t.test('the feed: live a2a events after the cursor, by owner, a page at a time; head is the newest seq', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      t.equal(await store.head(), 0, 'no events yet')
      t.same(await store.feed({ after: 0, now: T, limit: 10 }), { events: [], next: 0 })
      await store.publish(ev('a', { owner_key: 'k1' }), all)
      const b = await store.publish(ev('b', { owner_key: 'k1', visibility: 'internal' }), all)
      await store.publish(ev('c', { owner_key: 'k2' }), all)
      const d = await store.publish(ev('d', { owner_key: 'k1', expires_at: T + 1000 }), all)
      const now = T + 1500
      t.same((await store.feed({ after: 0, now, limit: 10 })).events.map((e) => e.key), ['a', 'c'], 'not internal, not expired')
      t.same((await store.feed({ after: 0, now, limit: 10, viewer: { owner: 'k2' } })).events.map((e) => e.key), ['c'])
      const page = await store.feed({ after: 0, now, limit: 2 })
      t.same(page.events.map((e) => e.key), ['a'])
      t.equal(page.next, b.event.seq, 'the cursor moves past what the caller may not see')
      const rest = await store.feed({ after: page.next, now, limit: 10 })
      t.same(rest.events.map((e) => e.key), ['c'])
      t.equal(rest.next, d.event.seq)
      t.same(await store.feed({ after: rest.next, now, limit: 10 }), { events: [], next: rest.next }, 'nothing new: the cursor stays')
      t.equal(await store.head(), d.event.seq)
      t.match((await store.feed({ after: 0, now: T, limit: 10 })).events[0], { key: 'a', owner_key: 'k1', data: { key: 'a' } } satisfies Partial<BusEvent>)
    })

    t.test('expired events are pruned; a dead letter keeps its copy', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const clock = { now: Date.now() }
      await store.saveSubscription({ id: 's', agent: null, patterns: ['**'], filter: null, max_attempts: 1, backoff_ms: 0 }, clock.now)
      const { event: e } = await store.publish({ id: 'e1', type: 'x.y', key: 'k', visibility: 'a2a', priority: 5, target_agents: null, data: { v: 1 }, source: 't', owner_key: null, trace_id: null, published_at: clock.now, expires_at: clock.now + 1000 }, () => true)
      const { deliveries } = await store.claim(['s'], 'me', 1000, clock.now, 10)
      t.equal(deliveries.length, 1)
      t.equal(await store.fail('s', e.seq, 'me', 'nope', clock.now), 'dead')
      t.equal(await store.fail('s', e.seq, 'me', 'nope', clock.now), 'lost', 'a delivery no longer held is not failed twice')
      t.equal(await store.prune(clock.now + 1000), 1)
      t.equal(await store.event(e.seq), undefined)
      t.match(await store.deadLetters({}), [{ event: { id: 'e1', data: { v: 1 } } }])
      t.ok(await store.removeSubscription('s'))
      t.notOk(await store.removeSubscription('s'))
    })

    t.test('prune takes the expired events a batch at a time, with their deliveries, and nothing alive', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      await store.saveSubscription(sub('s'), T)
      for (const key of ['x1', 'x2', 'x3']) await store.publish(ev(key, { expires_at: T + 1000 }), all)
      const alive = await store.publish(ev('alive'), all)
      t.equal(await store.prune(T + 1000, 2), 2)
      t.equal(await store.prune(T + 1000), 1)
      t.equal(await store.prune(T + 1000), 0)
      t.same((await store.feed({ after: 0, now: T, limit: 10 })).events.map((e) => e.key), ['alive'])
      t.same((await store.claim(['s'], 'me', 1000, T, 10)), { deliveries: [{ subscription_id: 's', attempts: 0, event: alive.event }], expired: 0 }, 'their deliveries went with them')
    })
  })
}

t.test('postgres store: a publication inside the caller\'s transaction is stored with it, deliveries and all, or not at all', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const store = new PgBusStore(pool)
  await store.saveSubscription(sub('s'), T)
  await t.rejects(inTransaction(pool, async (client) => {
    await store.publishIn(client, ev('a'), all)
    throw new Error('the caller failed')
  }), /the caller failed/)
  t.equal(await store.head(), 0, 'rolled back with the caller: no event')
  t.equal(await store.nextDue(['s']), undefined, 'and no delivery')
  const seen = await inTransaction(pool, async (client) => {
    const published = await store.publishIn(client, ev('b'), all)
    return { published, claimed: await store.claimIn(client, ['s'], 'me', 1000, T, 10), none: await store.claimIn(client, [], 'me', 1000, T, 10) }
  })
  t.same(seen.claimed.deliveries.map((d) => d.event), [seen.published.event], 'its delivery is there within the transaction')
  t.same(seen.none, { deliveries: [], expired: 0 }, 'no subscriptions, nothing')
  t.equal(await store.head(), seen.published.event.seq, 'committed with it')
})
