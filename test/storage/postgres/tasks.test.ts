// The PostgreSQL task store across instances: what the contract suite (task-store.test.ts) cannot
// show with one store, two pools on one database can: two instances reaping, claiming, creating and
// writing at the same moment.
import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { PgTaskStore } from '../../../src/storage/postgres/tasks.js'
import { claimNode, completeNode } from '../../../src/storage/tasks/task-graph.js'
import type { TaskNode } from '../../../src/storage/tasks/task.js'
import { inTransaction, openPostgres, PG_LOCKS } from '../../../src/storage/postgres/database.js'
import { pgDatabase } from '../../pg.js'

/** A clock the tests move by hand. */
function clock (start = Date.parse('2026-11-22T10:00:00.000Z')): { now: () => Date, advance: (ms: number) => void } {
  let at = start
  return { now: () => new Date(at), advance: (ms) => { at += ms } }
}

/** `count` pools on one new database (each an instance); undefined when PostgreSQL is missing. */
async function instances (t: Test, count: number): Promise<pg.Pool[] | undefined> {
  const url = await pgDatabase(t)
  if (url === undefined) return undefined
  const pools = await Promise.all(Array.from({ length: count }, async (_, i) => await openPostgres(url, { applicationName: `instance-${i}` })))
  t.teardown(async () => { await Promise.all(pools.map(async (pool) => { await pool.end() })) })
  return pools
}

/** Wait until `check` holds (bounded). */
async function until (what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  for (const deadline = Date.now() + ms; !(await check()); await sleep(5)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
  }
}

/** Sessions of `application` waiting for a lock another transaction holds. */
async function waitingOnLock (pool: pg.Pool, application: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock'", [application])
  return rows[0]?.n ?? 0
}

t.test('two reapers on two instances at once reap each expired task exactly once', async (t) => {
  const pools = await instances(t, 2)
  if (pools === undefined) return
  const c = clock()
  const [a, b] = pools.map((pool) => new PgTaskStore(pool, { now: c.now })) as [PgTaskStore, PgTaskStore]
  const TASKS = 200
  await a.create(Array.from({ length: TASKS }, (_, i) => ({ id: `t${i}`, type: 'w' })))
  for (let i = 0; i < TASKS; i++) await (i % 2 === 0 ? a : b).claim('w', 'crashed', 1000)
  c.advance(1000)
  const rounds = await Promise.all([a.reap(), b.reap(), a.reap(), b.reap()])
  const reaped = rounds.flat()
  t.equal(reaped.length, TASKS, `every expired task reaped (per round: ${rounds.map((r) => r.length).join(', ')})`)
  t.equal(new Set(reaped.map((task) => task.id)).size, TASKS, 'none twice')
  t.same(await a.reap(), [], 'nothing left to reap')
  const tasks = await a.list({ limit: TASKS })
  t.ok(tasks.every((task) => task.status === 'PENDING' && task.attempt === 1 && task.error?.reason === 'lease_expired'), 'each counted as one lapsed attempt')
})

t.test('while another instance holds the reaper lock, a reaper reaps nothing this round', async (t) => {
  const pools = await instances(t, 2)
  if (pools === undefined) return
  const [a, b] = pools as [pg.Pool, pg.Pool]
  const c = clock()
  const store = new PgTaskStore(b, { now: c.now })
  await store.create([{ id: 'x', type: 'w' }])
  await store.claim('w', 'crashed', 1000)
  c.advance(1000)
  const holder = await a.connect()
  t.teardown(() => { holder.release() })
  await holder.query('BEGIN')
  await holder.query('SELECT pg_advisory_xact_lock($1)', [PG_LOCKS.reaper])
  t.same(await store.reap(), [], 'it did not wait for the lock either')
  t.equal((await store.get('x'))?.status, 'IN_PROGRESS')
  await holder.query('COMMIT')
  t.same((await store.reap()).map((task) => [task.id, task.status]), [['x', 'PENDING']], 'the next round reaps')
})

t.test('a stale worker\'s heartbeat, completion, failure and release after its task was reclaimed are refused and change nothing', async (t) => {
  const pools = await instances(t, 2)
  if (pools === undefined) return
  const c = clock()
  const [first, second] = pools.map((pool) => new PgTaskStore(pool, { now: c.now, retryBaseMs: 10, retryCapMs: 10 })) as [PgTaskStore, PgTaskStore]
  await first.create([{ id: 'job', type: 'w' }])
  const claimed = await first.claim('w', 'paused-worker', 1000)
  const stale = { owner: 'paused-worker', attempt: claimed?.attempt ?? 0 }
  c.advance(1000)
  t.match(await second.reap(), [{ id: 'job', status: 'PENDING' }])
  c.advance(10)
  const reclaimed = await second.claim('w', 'live-worker', 60_000)
  t.match(reclaimed, { id: 'job', owner: 'live-worker', attempt: 2 })
  const row = async (): Promise<unknown> => (await pools[0]?.query('SELECT status, owner, attempt, available_at, lease_expires_at, node FROM tasks WHERE id = $1', ['job']))?.rows[0]
  const before = await row()
  await t.rejects(first.heartbeat('job', stale, 60_000), { code: 'AH_ERR_TASK_STALE_CLAIM', statusCode: 409 })
  await t.rejects(first.complete('job', stale, { by: 'paused-worker' }), { code: 'AH_ERR_TASK_STALE_CLAIM' })
  await t.rejects(first.fail('job', stale, { reason: 'x', retryable: true }), { code: 'AH_ERR_TASK_STALE_CLAIM' })
  await t.rejects(first.release('job', stale), { code: 'AH_ERR_TASK_STALE_CLAIM' })
  t.same(await row(), before, 'the row is as the live worker\'s claim left it')
  t.match(await second.complete('job', { owner: 'live-worker', attempt: 2 }, { by: 'live-worker' }), { status: 'COMPLETED', outputs: { by: 'live-worker' } })
  await t.rejects(first.complete('job', stale, { by: 'paused-worker' }), { code: 'AH_ERR_TASK_STALE_CLAIM' }, 'nor after the live worker completed it')
  t.match(await first.get('job'), { status: 'COMPLETED', owner: 'live-worker', outputs: { by: 'live-worker' } })
})

t.test('a worker mid-claim holds its row without blocking another worker, who gets the next task', async (t) => {
  const pools = await instances(t, 2)
  if (pools === undefined) return
  const [a, b] = pools.map((pool) => new PgTaskStore(pool)) as [PgTaskStore, PgTaskStore]
  await a.create([{ id: 'first', type: 'w', priority: 2 }, { id: 'second', type: 'w', priority: 1 }])
  const holder = await pools[0]?.connect() as pg.PoolClient
  t.teardown(() => { holder.release() })
  await holder.query('BEGIN')
  t.equal((await a.claimIn(holder, 'w', 'worker-a', 1000))?.id, 'first')
  t.equal((await b.claim('w', 'worker-b', 1000))?.id, 'second', 'the locked row was passed over, not waited for')
  t.equal(await b.claim('w', 'worker-b', 1000), undefined, 'nor claimed twice')
  await holder.query('ROLLBACK')
  t.match(await b.claim('w', 'worker-b', 1000), { id: 'first', owner: 'worker-b', attempt: 1 }, 'the rolled back claim left it claimable')
})

for (const outcome of ['commits', 'rolls back'] as const) {
  t.test(`two instances creating the same task id at once: when the first ${outcome}, the other ${outcome === 'commits' ? 'is refused whole' : 'succeeds'}`, async (t) => {
    const pools = await instances(t, 2)
    if (pools === undefined) return
    const [a, b] = pools.map((pool) => new PgTaskStore(pool)) as [PgTaskStore, PgTaskStore]
    const holder = await pools[0]?.connect() as pg.PoolClient
    t.teardown(() => { holder.release() })
    await holder.query('BEGIN')
    await a.createIn(holder, [{ id: 'same', type: 'w', inputs: { by: 'a' } }])
    const racing = b.create([{ id: 'other', type: 'w' }, { id: 'same', type: 'w', inputs: { by: 'b' } }])
    racing.catch(() => {})
    await until('the second insert to wait for the first', async () => await waitingOnLock(pools[0] as pg.Pool, 'instance-1') === 1)
    await holder.query(outcome === 'commits' ? 'COMMIT' : 'ROLLBACK')
    if (outcome === 'commits') {
      await t.rejects(racing, { code: 'AH_ERR_TASK_INVALID', statusCode: 400, message: /task id "same" is already used/ })
      t.same((await b.list()).map((task) => [task.id, task.inputs.by]), [['same', 'a']], 'the loser wrote nothing, not even its other task')
    } else {
      t.same((await racing).map((task) => task.id), ['other', 'same'])
      t.same((await b.list()).map((task) => [task.id, task.inputs.by]), [['other', undefined], ['same', 'b']])
    }
  })
}

t.test('the ...In methods compose into the caller\'s transaction: all of it or none', async (t) => {
  const pools = await instances(t, 1)
  if (pools === undefined) return
  const pool = pools[0] as pg.Pool
  const c = clock()
  const store = new PgTaskStore(pool, { now: c.now, retryBaseMs: 10, retryCapMs: 10 })
  await t.rejects(inTransaction(pool, async (client) => {
    await store.createIn(client, [{ id: 'a', type: 'w' }])
    await store.claimIn(client, 'w', 'me', 1000)
    throw new Error('the caller changed its mind')
  }), /changed its mind/)
  t.same(await store.list(), [], 'rolled back whole')
  const done = await inTransaction(pool, async (client) => {
    await store.createIn(client, [{ id: 'a', type: 'w' }, { id: 'b', type: 'w', dependency_ids: ['a'] }, { id: 'c', type: 'w' }, { id: 'd', type: 'w' }])
    const token = { owner: 'me', attempt: 1 }
    await store.claimIn(client, 'w', 'me', 1000)
    await store.heartbeatIn(client, 'a', token, 5000)
    await store.completeIn(client, 'a', token, { n: 1 })
    t.equal((await store.claimIn(client, 'w', 'me', 1000))?.id, 'b', 'its dependency completed within this transaction')
    await store.failIn(client, 'b', token, { reason: 'no', retryable: false })
    await store.claimIn(client, 'w', 'me', 1000)
    await store.releaseIn(client, 'c', token)
    await store.cancelIn(client, 'd')
    c.advance(60_000)
    return await store.reapIn(client)
  })
  t.same(done, [])
  t.same((await store.list()).map((task) => [task.id, task.status]), [['a', 'COMPLETED'], ['b', 'FAILED'], ['c', 'PENDING'], ['d', 'CANCELLED']])
})

t.test('the rule decides a claim, not the query: a row whose columns say claimable but whose node does not is passed over', async (t) => {
  const pools = await instances(t, 1)
  if (pools === undefined) return
  const pool = pools[0] as pg.Pool
  const c = clock()
  const store = new PgTaskStore(pool, { now: c.now })
  await store.create([{ id: 'retrying', type: 'w', priority: 5 }, { id: 'ready', type: 'w' }])
  // what the node says (available in a minute) and the column says (available now) disagree
  const node = { ...await store.get('retrying'), available_at: new Date(c.now().getTime() + 60_000).toISOString() }
  await pool.query('UPDATE tasks SET node = $2 WHERE id = $1', ['retrying', JSON.stringify(node)])
  t.equal((await store.claim('w', 'me', 1000))?.id, 'ready')
  t.equal(await store.claim('w', 'me', 1000), undefined)
  t.equal((await store.get('retrying'))?.status, 'PENDING')
})

t.test('close() leaves the pool it was given open: the app owns it', async (t) => {
  const pools = await instances(t, 1)
  if (pools === undefined) return
  const pool = pools[0] as pg.Pool
  const store = new PgTaskStore(pool)
  await store.create([{ id: 'a', type: 'w' }])
  await store.close()
  t.equal((await pool.query('SELECT count(*)::int AS n FROM tasks')).rows[0].n, 1)
  t.equal((await store.get('a'))?.id, 'a')
})

t.test('a claim and a completion are one statement each, their nodes exactly what the rules make', async (t) => {
  const pools = await instances(t, 1)
  if (pools === undefined) return
  const pool = pools[0] as pg.Pool
  const c = clock()
  const store = new PgTaskStore(pool, { now: c.now })
  await store.create([{ id: 'a', type: 'w', inputs: { n: 1.5, text: 'é ✓', nested: { list: [1, 'two', null] } }, priority: 2 }, { id: 'b', type: 'w', dependency_ids: ['a'] }])
  const before = await store.get('a') as TaskNode
  const claimed = await store.claim('w', 'worker-1', 30_000) as TaskNode
  t.same(claimed, claimNode(before, 'worker-1', 30_000, c.now()), 'the claim is claimNode\'s')
  t.same(await store.get('a'), claimed, 'and stored as such')
  t.same(await store.claim('w', 'worker-2', 30_000), undefined, 'b waits for a')
  c.advance(10)
  const completed = await store.complete('a', { owner: 'worker-1', attempt: 1 }, { answer: [42, 'x'] })
  t.same(completed, completeNode(claimed, { owner: 'worker-1', attempt: 1 }, { answer: [42, 'x'] }, c.now()), 'the completion is completeNode\'s')
  t.same(await store.get('a'), completed)
  t.match((await store.claim('w', 'worker-2', 30_000))?.id, 'b', 'b is claimable once a completed')
  await t.rejects(store.complete('a', { owner: 'worker-1', attempt: 1 }, {}), { code: 'AH_ERR_TASK_STALE_CLAIM' }, 'a completed task is not completed again')
  await t.rejects(store.complete('b', { owner: 'worker-1', attempt: 1 }, {}), { code: 'AH_ERR_TASK_STALE_CLAIM' }, 'another\'s claim is refused')
  await t.rejects(store.complete('nope', { owner: 'worker-1', attempt: 1 }, {}), { code: 'AH_ERR_TASK_NOT_FOUND' })
  t.equal((await store.get('b'))?.status, 'IN_PROGRESS', 'the refused writes changed nothing')
})

t.test('a \\u0000 (NUL) PostgreSQL cannot hold: a task holding one is refused with a clear error; outputs holding one are completed by the rule alone', async (t) => {
  const pools = await instances(t, 1)
  if (pools === undefined) return
  const store = new PgTaskStore(pools[0] as pg.Pool)
  await t.rejects(store.create([{ id: 'nul', type: 'w', inputs: { text: 'a\u0000b' } }]), { code: 'AH_ERR_TASK_INVALID', message: /NUL/ })
  t.equal(await store.get('nul'), undefined)
  await store.create([{ id: 'fine', type: 'w' }])
  t.match(await store.claim('w', 'worker-1', 30_000), { id: 'fine' })
  t.match(await store.complete('fine', { owner: 'worker-1', attempt: 1 }, { echo: 'x\u0000' }), { status: 'COMPLETED', outputs: { echo: 'x\u0000' } })
  t.match(await store.get('fine'), { status: 'COMPLETED', outputs: { echo: 'x\u0000' } })
})

t.test('a claim in its own transaction commits without waiting for the disk; inside a caller\'s transaction it leaves the caller\'s commit as it was', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  await (await openPostgres(url)).end() // migrated
  // one connection whose commits wait for the disk, whatever the test server's default
  const pool = new pg.Pool({ connectionString: url, max: 1, options: '-c synchronous_commit=on' })
  // the test's database is dropped WITH (FORCE) after it: an idle connection still closing reports
  // its termination on the pool, which without a listener is an uncaught error (seen once, on Node 24)
  pool.on('error', () => {})
  t.teardown(async () => { await pool.end() })
  const setting = async (client: pg.Pool | pg.PoolClient): Promise<string | undefined> => (await client.query<{ s: string }>("SELECT current_setting('synchronous_commit') AS s")).rows[0]?.s
  const store = new PgTaskStore(pool)
  await store.create([{ id: 'a', type: 'w' }, { id: 'b', type: 'w' }])
  t.match(await store.claim('w', 'worker-1', 30_000), { id: 'a' }, 'claimed on the pool')
  t.equal(await setting(pool), 'on', 'the setting was its statement\'s transaction\'s alone: gone with it')
  const own = await pool.connect()
  try {
    await own.query('BEGIN')
    t.match(await store.claimIn(own, 'w', 'worker-1', 30_000), { id: 'b' })
    t.equal(await setting(own), 'on', 'the caller\'s transaction still waits for the disk')
    await own.query('COMMIT')
  } finally {
    own.release()
  }
  const { rows } = await pool.query<{ s: string | null }>('WITH c AS (SELECT set_config(\'synchronous_commit\', \'off\', true) AS s) SELECT s FROM c')
  t.equal(rows[0]?.s, 'off', 'the setting the claim statement uses is transaction-local (set_config(..., true))')
  t.equal(await setting(pool), 'on', 'and gone with its statement\'s transaction')
})

t.test('a completion the fence lets through but the rule refuses is undone: the rule\'s refusal, the task as it was', async (t) => {
  const pools = await instances(t, 1)
  if (pools === undefined) return
  const pool = pools[0] as pg.Pool
  const store = new PgTaskStore(pool)
  await store.create([{ id: 'a', type: 'w' }])
  await store.claim('w', 'worker-1', 30_000)
  // the columns say IN_PROGRESS under worker-1's claim (the statement's fence); the node, which the rule reads, says PENDING
  await pool.query("UPDATE tasks SET node = (node::jsonb || '{\"status\": \"PENDING\"}')::text WHERE id = 'a'")
  const before = await store.get('a')
  await t.rejects(store.complete('a', { owner: 'worker-1', attempt: 1 }, { done: true }), { code: 'AH_ERR_TASK_STALE_CLAIM' })
  t.same(await store.get('a'), before, 'the node as it was')
  t.equal((await pool.query<{ status: string }>("SELECT status FROM tasks WHERE id = 'a'")).rows[0]?.status, 'PENDING', 'its columns the node\'s')
})
