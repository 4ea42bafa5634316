import t from 'tap'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteBusStore } from '../../src/storage/sqlite/bus.js'
import { type BusEvent, type BusStore } from '../../src/storage/bus.js'
import { EventBus, type Subscription } from '../../src/bus/event-bus.js'
import { filterMatches, typeMatcher } from '../../src/bus/match.js'
import { tempDataDir, type Teardown } from '../helper.js'

/** Time as the bus sees it: real time, moved on by the test. */
interface Clock { offset: number }

/** A bus on a fresh SQLite file, with a clock the test moves, and what its handlers were given. */
function fresh (t: Teardown & { teardown: (fn: () => unknown) => void }, options: { pollMs?: number, leaseMs?: number } = {}): { bus: EventBus, store: BusStore, clock: Clock, dataDir: string } {
  const dataDir = tempDataDir(t)
  const db = openDatabase(dataDir)
  const store = new SqliteBusStore(db)
  const clock = { offset: 0 }
  const bus = new EventBus({
    store,
    write: async (write) => write(),
    instanceId: 'test',
    pollMs: options.pollMs ?? 20,
    leaseMs: options.leaseMs ?? 5000,
    maxAttempts: 3,
    backoffMs: 0,
    log: { warn: () => {}, error: () => {} },
    now: () => Date.now() + clock.offset
  })
  t.teardown(async () => { await bus.close(); db.close() })
  return { bus, store, clock, dataDir }
}

/** A subscription whose handler records each event's type (and key), resolving `until` once `count` arrived. */
function recorder (id: string, patterns: string[], extra: Partial<Subscription> = {}): { sub: Subscription, seen: string[], until: (count: number) => Promise<void> } {
  const seen: string[] = []
  const waiters: Array<{ count: number, resolve: () => void }> = []
  const sub: Subscription = {
    id,
    patterns,
    ...extra,
    handler: (event: BusEvent) => {
      seen.push(event.key)
      for (const w of waiters.filter((w) => seen.length >= w.count)) w.resolve()
    }
  }
  return { sub, seen, until: async (count) => { if (seen.length < count) await new Promise<void>((resolve) => waiters.push({ count, resolve })) } }
}

const event = (type: string, key: string, data: unknown = {}, extra: Record<string, unknown> = {}): Parameters<EventBus['publish']>[0] => ({ event: { type, key, data, visibility: 'a2a' }, ...extra })
const origin = { source: 'test' }

t.test('globs over dotted types: * is one segment, ** any, braces and negation', async (t) => {
  const cases: Array<[string[], string, boolean]> = [
    [['code.*'], 'code.changed', true],
    [['code.*'], 'code.patch.ready', false],
    [['code.**'], 'code.patch.ready', true],
    [['code.**'], 'research.complete', false],
    [['research.complete'], 'research.complete', true],
    [['research.complete'], 'research.completed', false],
    [['*.complete'], 'evaluation.complete', true],
    [['{plan,code}.*'], 'plan.ready', true],
    [['{plan,code}.*'], 'security.alert', false],
    [['**'], 'anything.at.all', true],
    [['!code.*'], 'plan.ready', true],
    [['!code.*'], 'code.changed', false],
    [['security.alert', 'code.*'], 'code.changed', true]
  ]
  for (const [patterns, type, expected] of cases) t.equal(typeMatcher(patterns)(type), expected, `${patterns.join(',')} ~ ${type}`)
})

t.test('filters on data: dotted paths, any-of arrays, arrays that hold the value, deep equality', async (t) => {
  const data = { severity: 'high', details: { repo: 'a', labels: ['x', 'y'] }, n: 3, obj: { k: [1, 2] } }
  t.ok(filterMatches(undefined, data))
  t.ok(filterMatches(null, data))
  t.ok(filterMatches({ severity: 'high' }, data))
  t.notOk(filterMatches({ severity: 'low' }, data))
  t.ok(filterMatches({ severity: ['low', 'high'] }, data))
  t.ok(filterMatches({ 'details.repo': 'a', n: 3 }, data))
  t.notOk(filterMatches({ 'details.repo': 'a', n: 4 }, data))
  t.ok(filterMatches({ 'details.labels': 'y' }, data), 'an array holding the value')
  t.ok(filterMatches({ obj: { k: [1, 2] } }, data), 'deep equality')
  t.notOk(filterMatches({ 'details.missing.deeper': 1 }, data))
  t.notOk(filterMatches({ severity: 'high' }, 'not an object'))
})

t.test('a subscription gets the events its globs and filter match, and only those', async (t) => {
  const { bus } = fresh(t)
  const code = recorder('code', ['code.*'], { filter: { repo: 'main' } })
  await bus.subscribe(code.sub)
  await bus.publish(event('code.pushed', 'k1', { repo: 'main' }), origin)
  await bus.publish(event('code.pushed', 'k2', { repo: 'fork' }), origin)
  await bus.publish(event('code.patch.ready', 'k3', { repo: 'main' }), origin)
  await bus.publish(event('research.complete', 'k4', { insights: [] }), origin)
  await bus.publish(event('code.reviewed', 'k5', { repo: 'main' }), origin)
  await code.until(2)
  t.same(code.seen, ['k1', 'k5'])
})

t.test('the same key within its TTL is one event, delivered once; after the TTL it is delivered again', async (t) => {
  const { bus, clock } = fresh(t)
  const r = recorder('dedup', ['job.*'])
  await bus.subscribe(r.sub)
  const first = await bus.publish(event('job.done', 'same', { n: 1 }, { ttl: 60 }), origin)
  clock.offset += 59_000
  const second = await bus.publish(event('job.done', 'same', { n: 2 }, { ttl: 60 }), origin)
  t.equal(second.duplicate, true)
  t.equal(second.event.id, first.event.id, 'the answer is the live event')
  t.same(second.event.data, { n: 1 })
  await r.until(1)
  clock.offset += 1_000
  const third = await bus.publish(event('job.done', 'same', { n: 3 }, { ttl: 60 }), origin)
  t.equal(third.duplicate, false, 'the first one expired: a new event')
  await r.until(2)
  t.same(r.seen, ['same', 'same'])
})

t.test('higher priority is delivered first, then the older', async (t) => {
  const { bus } = fresh(t)
  const r = recorder('prio', ['**'])
  // subscribed and stored first, handled here only once everything waits
  await bus.subscribe({ ...r.sub, handler: () => { throw new Error('not yet') } })
  await bus.unsubscribe('prio')
  await bus.publish(event('a.b', 'low', {}, { priority: 1 }), origin)
  await bus.publish(event('a.b', 'mid-1', {}, { priority: 5 }), origin)
  await bus.publish(event('a.b', 'high', {}, { priority: 10 }), origin)
  await bus.publish(event('a.b', 'mid-2', {}, { priority: 5 }), origin)
  await bus.subscribe(r.sub)
  await r.until(4)
  t.same(r.seen, ['high', 'mid-1', 'mid-2', 'low'])
})

t.test('an expired event is never handed to a handler', async (t) => {
  const { bus, clock, store } = fresh(t)
  const r = recorder('ttl', ['**'])
  await bus.subscribe({ ...r.sub, handler: () => { throw new Error('not yet') } })
  await bus.unsubscribe('ttl')
  await bus.publish(event('x.y', 'short', {}, { ttl: 1 }), origin)
  await bus.publish(event('x.y', 'long', {}, { ttl: 3600 }), origin)
  clock.offset += 2_000
  await bus.subscribe(r.sub)
  await r.until(1)
  t.same(r.seen, ['long'])
  while (store.nextDue(['ttl']) !== undefined) await new Promise((resolve) => setTimeout(resolve, 5))
  t.pass('the expired delivery is gone too')
  t.same((await bus.feed({ after: 0, patterns: ['**'] })).events.map((e) => e.key), ['long'], 'nor is it on the feed')
})

t.test('a handler that throws is retried, then dead-lettered with its event and last error', async (t) => {
  const { bus } = fresh(t)
  let calls = 0
  const ok = recorder('steady', ['**'])
  await bus.subscribe(ok.sub)
  await bus.subscribe({ id: 'flaky', patterns: ['x.poison'], maxAttempts: 3, backoffMs: 1, handler: (_e, ctx) => { calls++; throw new Error(`boom ${ctx.attempt}`) } })
  await bus.publish(event('x.poison', 'poison', { v: 1 }), { source: 'test', owner_key: 'k1' })
  await bus.publish(event('x.y', 'fine'), origin)
  while ((await bus.deadLetters({})).length === 0) await new Promise((resolve) => setTimeout(resolve, 5))
  const [letter] = await bus.deadLetters({})
  t.match(letter, { subscription_id: 'flaky', attempts: 3, last_error: 'boom 3', event: { key: 'poison', data: { v: 1 }, owner_key: 'k1' } })
  t.equal(calls, 3)
  t.same(await bus.deadLetters({ viewer: { owner: 'someone-else' } }), [], 'dead letters are scoped by owner')
  await ok.until(2)
  t.same(ok.seen, ['poison', 'fine'], 'another subscription of the same event is not affected')
})

t.test('a retry waits for its backoff, and a success after failures acknowledges it', async (t) => {
  const { bus } = fresh(t)
  const attempts: number[] = []
  let done!: () => void
  const finished = new Promise<void>((resolve) => { done = resolve })
  await bus.subscribe({
    id: 'twice',
    patterns: ['**'],
    maxAttempts: 5,
    backoffMs: 30,
    handler: (_e, ctx) => {
      attempts.push(ctx.attempt)
      if (ctx.attempt < 3) throw new Error('not yet')
      done()
    }
  })
  await bus.publish(event('x.y', 'k'), origin)
  await finished
  t.same(attempts, [1, 2, 3])
  t.same(await bus.deadLetters({}), [])
})

t.test('a handler that ignores its signal past the lease counts as failed, and the bus goes on', async (t) => {
  const { bus } = fresh(t, { leaseMs: 100 })
  const seen: string[] = []
  await bus.subscribe({ id: 'stuck', patterns: ['**'], maxAttempts: 1, handler: async (e) => { seen.push(e.key); if (e.key === 'hang') await new Promise(() => {}) } })
  await bus.publish(event('x.y', 'hang', {}, { priority: 9 }), origin)
  await bus.publish(event('x.y', 'after'), origin)
  while (!seen.includes('after')) await new Promise((resolve) => setTimeout(resolve, 5))
  while ((await bus.deadLetters({})).length === 0) await new Promise((resolve) => setTimeout(resolve, 5))
  t.match((await bus.deadLetters({}))[0], { last_error: /past its lease of 100 ms/, event: { key: 'hang' } })
})

t.test('targeted events reach only the agents they name; common events must carry their data', async (t) => {
  const { bus } = fresh(t)
  const planner = recorder('planner:x', ['**'], { agent: 'planner' })
  const other = recorder('other:x', ['**'], { agent: 'other' })
  await bus.subscribe(planner.sub)
  await bus.subscribe(other.sub)
  await bus.publish(event('x.y', 'for-planner', {}, { target_agents: ['planner'] }), origin)
  await bus.publish(event('x.y', 'for-all'), origin)
  await planner.until(2)
  await other.until(1)
  t.same(planner.seen, ['for-planner', 'for-all'])
  t.same(other.seen, ['for-all'])
  await t.rejects(bus.publish(event('plan.ready', 'bad', { plan: { id: 'p' } }), origin), { code: 'AH_ERR_BUS_EVENT_INVALID', statusCode: 400, message: /plan\.ready.*\/event\/data\/plan/ })
  await t.rejects(bus.publish({ event: { type: 'bad type!', key: 'k', data: {} } }, origin), { code: 'AH_ERR_BUS_EVENT_INVALID', message: /\/event\/type/ })
  await t.rejects(bus.publish({ ...event('x.y', 'k'), priority: 11 }, origin), { code: 'AH_ERR_BUS_EVENT_INVALID', message: /\/priority/ })
})

t.test('the feed: a2a events only, live ones, by pattern and owner, page by page', async (t) => {
  const { bus, clock } = fresh(t)
  await bus.publish(event('code.pushed', 'a', {}), { source: 'test', owner_key: 'k1' })
  await bus.publish({ event: { type: 'code.pushed', key: 'b', data: {}, visibility: 'internal' } }, { source: 'test', owner_key: 'k1' })
  await bus.publish(event('plan.ready', 'c', { plan: { id: 'p', tasks: [{ id: 't', type: 'x', description: '', estimated_hours: 1, priority: 1, assigned_agent: 'a', input_artifacts: [], output_artifacts: [], success_criteria: {} }], dependencies: {} } }), { source: 'test', owner_key: 'k2' })
  await bus.publish(event('code.pushed', 'd', {}, { ttl: 1 }), { source: 'test', owner_key: 'k1' })
  clock.offset += 1500
  t.same((await bus.feed({ after: 0, patterns: ['**'] })).events.map((e) => e.key), ['a', 'c'])
  t.same((await bus.feed({ after: 0, patterns: ['code.*'] })).events.map((e) => e.key), ['a'])
  t.same((await bus.feed({ after: 0, patterns: ['**'], viewer: { owner: 'k2' } })).events.map((e) => e.key), ['c'])
  const page = await bus.feed({ after: 0, patterns: ['**'], limit: 2 })
  t.same(page.events.map((e) => e.key), ['a'])
  t.equal(page.next, 2, 'the cursor moves past what the caller may not see')
  t.same((await bus.feed({ after: page.next, patterns: ['**'] })).events.map((e) => e.key), ['c'])
  t.equal(await bus.head(), 4)
})

t.test('expired events are pruned; a dead letter keeps its copy', async (t) => {
  const { store } = fresh(t)
  const clock = { now: Date.now() }
  store.saveSubscription({ id: 's', agent: null, patterns: ['**'], filter: null, max_attempts: 1, backoff_ms: 0 }, clock.now)
  const { event: e } = await store.publish({ id: 'e1', type: 'x.y', key: 'k', visibility: 'a2a', priority: 5, target_agents: null, data: { v: 1 }, source: 't', owner_key: null, trace_id: null, published_at: clock.now, expires_at: clock.now + 1000 }, () => true)
  const { deliveries } = await store.claim(['s'], 'me', 1000, clock.now, 10)
  t.equal(deliveries.length, 1)
  t.equal(store.fail('s', e.seq, 'me', 'nope', clock.now), 'dead')
  t.equal(store.fail('s', e.seq, 'me', 'nope', clock.now), 'lost', 'a delivery no longer held is not failed twice')
  t.equal(store.prune(clock.now + 1000), 1)
  t.equal(store.event(e.seq), undefined)
  t.match(await store.deadLetters({}), [{ event: { id: 'e1', data: { v: 1 } } }])
  t.ok(store.removeSubscription('s'))
  t.notOk(store.removeSubscription('s'))
})

t.test('a dead letter delivered again: due at once, attempts from zero; refused once its event expired or its subscription went', async (t) => {
  const { bus, clock } = fresh(t)
  let fixed = false
  const handled: number[] = []
  await bus.subscribe({ id: 'fixable', patterns: ['x.*'], maxAttempts: 1, handler: (_e, ctx) => { if (!fixed) throw new Error('broken'); handled.push(ctx.attempt) } })
  await bus.publish(event('x.one', 'one', {}, { ttl: 60 }), { source: 'test', owner_key: 'k1' })
  await bus.publish(event('x.two', 'two', {}, { ttl: 60 }), { source: 'test', owner_key: 'k1' })
  while ((await bus.deadLetters({})).length < 2) await new Promise((resolve) => setTimeout(resolve, 5))
  const [one, two] = await bus.deadLetters({})
  await t.rejects(bus.redrive(one?.id as number, { owner: 'k2' }), { code: 'AH_ERR_BUS_DEAD_LETTER_NOT_FOUND', statusCode: 404 }, 'another owner\'s letter is not found')
  await t.rejects(bus.redrive(999), { code: 'AH_ERR_BUS_DEAD_LETTER_NOT_FOUND' })
  fixed = true
  await bus.redrive(one?.id as number, { owner: 'k1' })
  while (handled.length === 0) await new Promise((resolve) => setTimeout(resolve, 5))
  t.same(handled, [1], 'delivered again, as a first attempt')
  t.same((await bus.deadLetters({})).map((d) => d.id), [two?.id], 'the letter is gone')
  clock.offset += 61_000
  await t.rejects(bus.redrive(two?.id as number), { code: 'AH_ERR_BUS_REDRIVE_REFUSED', statusCode: 409, message: /past its time to live/ })
  clock.offset = 0
  await bus.unsubscribe('fixable', { forget: true })
  await t.rejects(bus.redrive(two?.id as number), { code: 'AH_ERR_BUS_REDRIVE_REFUSED', message: /subscription was removed/ })
  t.equal((await bus.deadLetters({})).length, 1, 'a refused letter stays')
})
