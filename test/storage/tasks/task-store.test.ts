import t, { type Test } from 'tap'
import { readFileSync, rmSync } from 'node:fs'
import lockfile from 'proper-lockfile'
import { openDatabase } from '../../../src/storage/sqlite/database.js'
import { FileTaskStore } from '../../../src/storage/file/tasks.js'
import { PgTaskStore } from '../../../src/storage/postgres/tasks.js'
import { SqliteTaskStore } from '../../../src/storage/sqlite/tasks.js'
import { openPostgres } from '../../../src/storage/postgres/database.js'
import { findCycle } from '../../../src/storage/tasks/task-graph.js'
import { newTaskNode, retryDelayMs } from '../../../src/storage/tasks/task.js'
import type { TaskStore } from '../../../src/storage/tasks/task-store.js'
import { tempDataDir } from '../../helper.js'
import { pgDatabase } from '../../pg.js'

/** A clock the tests move by hand. */
function clock (start = Date.parse('2026-11-22T10:00:00.000Z')): { now: () => Date, advance: (ms: number) => void } {
  let at = start
  return { now: () => new Date(at), advance: (ms) => { at += ms } }
}

/** A new, empty store of each kind; undefined (the test skipped, loudly) when PostgreSQL is missing. */
const stores: Record<string, (t: Test, now: () => Date) => Promise<TaskStore | undefined>> = {
  file: async (t, now) => {
    const store = new FileTaskStore(tempDataDir(t), { now, retryBaseMs: 1000, retryCapMs: 8000 })
    t.teardown(async () => { await store.close() })
    return store
  },
  sqlite: async (t, now) => {
    const db = openDatabase(tempDataDir(t))
    t.teardown(() => db.close())
    return new SqliteTaskStore(db, { now, retryBaseMs: 1000, retryCapMs: 8000 })
  },
  postgres: async (t, now) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const pool = await openPostgres(url)
    t.teardown(async () => { await pool.end() })
    return new PgTaskStore(pool, { now, retryBaseMs: 1000, retryCapMs: 8000 })
  }
}

for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} store: the TaskStore contract`, async (t) => {
    t.test('create fills defaults, accepts input as an alias, and lists', async (t) => {
      const c = clock()
      const store = await make(t, c.now)
      if (store === undefined) return
      const [a] = await store.create([{ id: 'a', type: 'wordcount', input: { text: 'x' }, metadata: { conversation_id: 'conv-1' } }])
      t.match(a, { id: 'a', type: 'wordcount', status: 'PENDING', owner: null, priority: 0, attempt: 0, max_attempts: 3, inputs: { text: 'x' }, outputs: null, parent_id: null, dependency_ids: [], available_at: '2026-11-22T10:00:00.000Z' })
      const [b] = await store.create([{ type: 'summarize', priority: 5 }])
      t.match(b?.id, /^[0-9a-f-]{36}$/)
      t.same((await store.list()).map((x) => x.id), ['a', b?.id])
      t.same((await store.list({ type: 'summarize' })).map((x) => x.id), [b?.id])
      t.same((await store.list({ conversation_id: 'conv-1' })).map((x) => x.id), ['a'])
      t.same((await store.list({ status: 'COMPLETED' })), [])
      t.same((await store.list({ limit: 1, offset: 1 })).map((x) => x.id), [b?.id])
      t.same(await store.get('a'), a)
      t.equal(await store.get('nope'), undefined)
    })

    t.test('list filters by owner (metadata.owner_key) and by several filters at once, oldest first', async (t) => {
      const c = clock()
      const store = await make(t, c.now)
      if (store === undefined) return
      await store.create([{ id: 'k1-a', type: 'w', metadata: { owner_key: 'k1', conversation_id: 'c' } }, { id: 'k2-a', type: 'w', metadata: { owner_key: 'k2' } }])
      c.advance(5)
      await store.create([{ id: 'k1-b', type: 'v', metadata: { owner_key: 'k1', conversation_id: 'c' } }, { id: 'host', type: 'w' }])
      t.same((await store.list({ viewer: { owner: 'k1' } })).map((x) => x.id), ['k1-a', 'k1-b'])
      t.same((await store.list({ viewer: { owner: 'k1' }, type: 'w' })).map((x) => x.id), ['k1-a'])
      t.same((await store.list({ viewer: { owner: 'k1' }, conversation_id: 'c', status: 'PENDING', offset: 1 })).map((x) => x.id), ['k1-b'])
      t.same((await store.list({ viewer: { owner: 'nobody' } })), [])
      await store.create([{ id: 'acme-a', type: 'w', metadata: { owner_key: 'tenant:acme/k3' } }, { id: 'acme-b', type: 'w', metadata: { owner_key: 'tenant:acme/jwt:bo' } }, { id: 'acmex', type: 'w', metadata: { owner_key: 'tenant:acmex/k4' } }])
      t.same((await store.list({ viewer: { tenant: 'acme' } })).map((x) => x.id), ['acme-a', 'acme-b'], 'a tenant\'s admin sees its tenant\'s tasks, not a tenant whose name starts the same')
      t.same((await store.list({ viewer: { tenant: 'default' } })).map((x) => x.id), ['k1-a', 'k2-a', 'k1-b'], 'the default tenant: every owner without a tenant, never the host\'s own')
      t.same((await store.list({ viewer: { all: true }, limit: 100 })).length, 7)
      t.same((await store.list({ limit: 2 })).map((x) => x.id), ['k1-a', 'k2-a'], 'a batch keeps its order')
    })

    t.test('bad graphs are refused whole: unknown dependencies, cycles, repeated ids', async (t) => {
      const store = await make(t, clock().now)
      if (store === undefined) return
      await store.create([{ id: 'base', type: 'x' }])
      const refuse = async (batch: Parameters<TaskStore['create']>[0], message: RegExp) => {
        await t.rejects(store.create(batch), { code: 'AH_ERR_TASK_INVALID', statusCode: 400, message })
      }
      await refuse([{ id: 'a', type: 'x', dependency_ids: ['ghost'] }], /unknown task "ghost"/)
      await refuse([{ id: 'a', type: 'x', dependency_ids: ['b'] }, { id: 'b', type: 'x', dependency_ids: ['c'] }, { id: 'c', type: 'x', dependency_ids: ['a'] }], /cycle: a -> b -> c -> a/)
      await refuse([{ id: 'a', type: 'x', dependency_ids: ['a'] }], /depends on itself/)
      await refuse([{ id: 'base', type: 'x' }], /already used/)
      await refuse([{ id: 'a', type: 'x' }, { id: 'a', type: 'x' }], /already used/)
      await refuse([{ id: 'a', type: '' }], /no type/)
      await refuse([{ id: 'bad id!', type: 'x' }], /must be 1-128/)
      await refuse([{ id: 'a', type: 'x', max_attempts: 0 }], /max_attempts/)
      await refuse([{ id: 'a', type: 'x', parent_id: 'ghost' }], /unknown parent/)
      await refuse([], /no tasks/)
      await refuse({ id: 'a', type: 'x' } as unknown as Parameters<TaskStore['create']>[0], /no tasks/)
      t.same((await store.list()).map((x) => x.id), ['base'], 'nothing of a refused batch was written')
      const ok = await store.create([{ id: 'a', type: 'x', dependency_ids: ['base', 'b'] }, { id: 'b', type: 'x', dependency_ids: ['base'], parent_id: 'base' }])
      t.equal(ok.length, 2)
    })

    t.test('claims go by priority, then age, only when dependencies are completed and the task is available', async (t) => {
      const c = clock()
      const store = await make(t, c.now)
      if (store === undefined) return
      await store.create([{ id: 'old-low', type: 'w', priority: 1 }])
      c.advance(10)
      await store.create([{ id: 'new-high', type: 'w', priority: 9 }, { id: 'blocked', type: 'w', priority: 99, dependency_ids: ['old-low'] }, { id: 'other', type: 'v', priority: 100 }])
      c.advance(10)
      await store.create([{ id: 'newer-high', type: 'w', priority: 9 }])
      const first = await store.claim('w', 'agent-1', 5000)
      t.match(first, { id: 'new-high', status: 'IN_PROGRESS', owner: 'agent-1', attempt: 1, lease_expires_at: '2026-11-22T10:00:05.020Z', last_heartbeat_at: '2026-11-22T10:00:00.020Z' })
      t.equal((await store.claim('w', 'agent-1', 5000))?.id, 'newer-high')
      const low = await store.claim('w', 'agent-2', 5000)
      t.equal(low?.id, 'old-low', 'blocked waits for its dependency')
      t.equal(await store.claim('w', 'agent-2', 5000), undefined)
      await store.complete('old-low', { owner: 'agent-2', attempt: 1 }, { words: 3 })
      t.equal((await store.claim('w', 'agent-2', 5000))?.id, 'blocked')
      t.equal((await store.claim('v', 'agent-3', 5000))?.id, 'other')
    })

    t.test('heartbeat, complete and fail check the claim; a stale claim changes nothing', async (t) => {
      const c = clock()
      const store = await make(t, c.now)
      if (store === undefined) return
      await store.create([{ id: 't', type: 'w', max_attempts: 2 }])
      const claimed = await store.claim('w', 'me', 1000)
      const token = { owner: 'me', attempt: 1 }
      c.advance(500)
      t.match(await store.heartbeat('t', token, 1000), { last_heartbeat_at: '2026-11-22T10:00:00.500Z', lease_expires_at: '2026-11-22T10:00:01.500Z' })
      for (const bad of [{ owner: 'you', attempt: 1 }, { owner: 'me', attempt: 2 }]) {
        await t.rejects(store.heartbeat('t', bad, 1000), { code: 'AH_ERR_TASK_STALE_CLAIM', statusCode: 409 })
        await t.rejects(store.complete('t', bad, {}), { code: 'AH_ERR_TASK_STALE_CLAIM' })
        await t.rejects(store.fail('t', bad, { reason: 'x', retryable: true }), { code: 'AH_ERR_TASK_STALE_CLAIM' })
      }
      t.equal((await store.get('t'))?.lease_expires_at, '2026-11-22T10:00:01.500Z', 'unchanged')
      t.ok(claimed)
      const failed = await store.fail('t', token, { reason: 'flaky', retryable: true, details: { code: 503 } })
      t.match(failed, { status: 'PENDING', owner: null, lease_expires_at: null, error: { reason: 'flaky', retryable: true, attempt: 1, details: { code: 503 } } })
      const delay = Date.parse(failed.available_at) - c.now().getTime()
      t.ok(delay >= 500 && delay <= 1000, `retry backoff ${delay} ms`)
      t.equal(await store.claim('w', 'me', 1000), undefined, 'not before available_at')
      c.advance(delay)
      const again = await store.claim('w', 'me', 1000)
      t.equal(again?.attempt, 2)
      await t.rejects(store.complete('t', token, {}), { code: 'AH_ERR_TASK_STALE_CLAIM' }, 'the old attempt is stale')
      const final = await store.fail('t', { owner: 'me', attempt: 2 }, { reason: 'flaky', retryable: true })
      t.equal(final.status, 'FAILED', 'max_attempts reached')
      await store.create([{ id: 'u', type: 'w' }])
      await store.claim('w', 'me', 1000)
      t.equal((await store.fail('u', { owner: 'me', attempt: 1 }, { reason: 'bad input', retryable: false })).status, 'FAILED', 'not retryable')
      await store.create([{ id: 'v', type: 'w' }])
      await store.claim('w', 'me', 1000)
      t.match(await store.complete('v', { owner: 'me', attempt: 1 }, { ok: true }), { status: 'COMPLETED', outputs: { ok: true }, lease_expires_at: null })
      await t.rejects(store.complete('missing', token, {}), { code: 'AH_ERR_TASK_NOT_FOUND' })
    })

    t.test('the reaper returns expired leases to PENDING with backoff, then FAILED after max_attempts', async (t) => {
      const c = clock()
      const store = await make(t, c.now)
      if (store === undefined) return
      await store.create([{ id: 'r', type: 'w', max_attempts: 2 }, { id: 's-alive', type: 'w' }])
      await store.claim('w', 'crashed', 1000)
      await store.claim('w', 'healthy', 10_000)
      c.advance(999)
      t.same(await store.reap(), [])
      c.advance(1)
      const [reaped] = await store.reap()
      t.match(reaped, { id: 'r', status: 'PENDING', owner: null, error: { reason: 'lease_expired', details: { owner: 'crashed' } } })
      t.equal((await store.get('s-alive'))?.status, 'IN_PROGRESS')
      await t.rejects(store.complete('r', { owner: 'crashed', attempt: 1 }, {}), { code: 'AH_ERR_TASK_STALE_CLAIM' }, 'the crashed worker cannot complete it')
      c.advance(60_000)
      await store.claim('w', 'second', 1000)
      c.advance(1000)
      const reapedAgain = await store.reap()
      t.same(reapedAgain.map((x) => [x.id, x.status]), [['r', 'FAILED'], ['s-alive', 'PENDING']])
    })

    t.test('cancel: pending and running tasks only', async (t) => {
      const store = await make(t, clock().now)
      if (store === undefined) return
      await store.create([{ id: 'p', type: 'w' }, { id: 'q', type: 'w' }])
      t.equal((await store.cancel('p')).status, 'CANCELLED')
      await store.claim('w', 'me', 1000)
      t.equal((await store.cancel('q')).status, 'CANCELLED')
      await t.rejects(store.complete('q', { owner: 'me', attempt: 1 }, {}), { code: 'AH_ERR_TASK_STALE_CLAIM' })
      await t.rejects(store.cancel('q'), { code: 'AH_ERR_TASK_STATE', statusCode: 409 })
      await t.rejects(store.cancel('nope'), { code: 'AH_ERR_TASK_NOT_FOUND' })
      await store.close()
    })

    t.test('release: a claimed task goes back to PENDING at once and its attempt does not count; only its claim may', async (t) => {
      const c = clock()
      const store = await make(t, c.now)
      if (store === undefined) return
      await store.create([{ id: 'r', type: 'w', max_attempts: 1 }])
      const claimed = await store.claim('w', 'me', 1000)
      await t.rejects(store.release('r', { owner: 'other', attempt: 1 }), { code: 'AH_ERR_TASK_STALE_CLAIM' })
      t.match(await store.release('r', { owner: 'me', attempt: claimed?.attempt ?? 0 }), { status: 'PENDING', owner: null, attempt: 0, lease_expires_at: null })
      t.match(await store.claim('w', 'next', 1000), { id: 'r', attempt: 1 }, 'claimable at once, and it is still the first attempt')
      await store.close()
    })

    t.test('wait and answer: a task that asked a person is WAITING (unclaimable, unreaped, its dependants held), PENDING again once every question is answered', async (t) => {
      const c = clock()
      const store = await make(t, c.now)
      if (store === undefined) return
      await store.create([{ id: 'asker', type: 'w', max_attempts: 1 }, { id: 'after', type: 'v', dependency_ids: ['asker'] }])
      const claimed = await store.claim('w', 'me', 1000) as NonNullable<Awaited<ReturnType<TaskStore['claim']>>>
      const asked = { id: 'q1', message: 'Allow it?', call: { tool: 'fx', action: 'write', args: { n: 1 } }, asked_at: c.now().toISOString() }
      const wait = { approvals: [asked], host_calls: [{ key: 'tool:abc', result: { ok: true } }] }
      await t.rejects(store.wait('asker', { owner: 'other', attempt: 1 }, wait), { code: 'AH_ERR_TASK_STALE_CLAIM' }, 'only its claim may')
      await t.rejects(store.wait('asker', { owner: 'me', attempt: claimed.attempt }, { approvals: [], host_calls: [] }), { code: 'AH_ERR_TASK_STATE' }, 'a wait with no open question is refused')
      const waiting = await store.wait('asker', { owner: 'me', attempt: claimed.attempt }, wait)
      t.match(waiting, { status: 'WAITING', owner: null, attempt: 0, lease_expires_at: null, metadata: { approvals: [asked], host_calls: wait.host_calls } })
      t.same(await store.get('asker'), waiting, 'stored as answered')
      t.same((await store.list({ status: 'WAITING' })).map((x) => x.id), ['asker'])
      await t.rejects(store.complete('asker', { owner: 'me', attempt: claimed.attempt }, {}), { code: 'AH_ERR_TASK_STALE_CLAIM' }, 'the claim is given back')
      c.advance(60_000)
      t.equal(await store.claim('w', 'next', 1000), undefined, 'a WAITING task is not claimable')
      t.equal(await store.claim('v', 'next', 1000), undefined, 'its dependants wait')
      t.same(await store.reap(), [], 'nor reaped')
      await t.rejects(store.answer('asker', 'nope', { approved: true, by: 'key-a' }), { code: 'AH_ERR_TASK_APPROVAL_NOT_FOUND', statusCode: 404 })
      await t.rejects(store.answer('missing', 'q1', { approved: true, by: 'key-a' }), { code: 'AH_ERR_TASK_NOT_FOUND' })
      const answered = await store.answer('asker', 'q1', { approved: false, comment: 'not today', by: 'key-a' })
      t.match(answered, { status: 'PENDING', available_at: c.now().toISOString(), metadata: { approvals: [{ id: 'q1', answer: { approved: false, comment: 'not today', by: 'key-a', at: c.now().toISOString() } }], host_calls: wait.host_calls } })
      await t.rejects(store.answer('asker', 'q1', { approved: true, by: 'key-a' }), { code: 'AH_ERR_INTERRUPT_CLOSED', statusCode: 409 }, 'an approval takes one answer')
      t.match(await store.claim('w', 'next', 1000), { id: 'asker', attempt: 1, metadata: { host_calls: wait.host_calls } }, 'claimable at once, still the first attempt, with what it recorded')
    })

    t.test('wait and answer: two open questions, the task waits for both; a WAITING task can be cancelled, and then takes no answer', async (t) => {
      const c = clock()
      const store = await make(t, c.now)
      if (store === undefined) return
      await store.create([{ id: 'two', type: 'w' }, { id: 'gone', type: 'w' }])
      const at = c.now().toISOString()
      for (let n = 0; n < 2; n++) {
        const claimed = await store.claim('w', 'me', 1000)
        await store.wait(claimed?.id ?? '', { owner: 'me', attempt: 1 }, { approvals: [{ id: 'a', message: 'A?', call: {}, asked_at: at }, { id: 'b', message: 'B?', call: {}, asked_at: at }], host_calls: [] })
      }
      t.match(await store.answer('two', 'b', { approved: true, by: 'k' }), { status: 'WAITING' }, 'one open question left: it still waits')
      t.match(await store.answer('two', 'a', { approved: true, by: 'k' }), { status: 'PENDING' })
      t.match(await store.cancel('gone'), { status: 'CANCELLED' })
      await t.rejects(store.answer('gone', 'a', { approved: true, by: 'k' }), { code: 'AH_ERR_INTERRUPT_CLOSED', message: /its task is CANCELLED/ })
    })

    t.test('a new task cannot be given approvals or host calls: only a wait records them', async (t) => {
      const store = await make(t, clock().now)
      if (store === undefined) return
      const [made] = await store.create([{ id: 'forged', type: 'w', metadata: { owner_key: 'k', approvals: [{ id: 'q', message: 'm', call: {}, asked_at: 'x', answer: { approved: true, by: 'k', at: 'x' } }], host_calls: [{ key: 'k', result: 1 }] } }])
      t.same(made?.metadata, { owner_key: 'k' })
      t.same((await store.get('forged'))?.metadata, { owner_key: 'k' })
    })
  })
}

t.test('the file store writes {"tasks": [...]} atomically and refuses a corrupt file', async (t) => {
  const dir = tempDataDir(t)
  const store = new FileTaskStore(dir)
  t.teardown(async () => { await store.close() })
  await store.create([{ id: 'a', type: 'w' }])
  const parsed = JSON.parse(readFileSync(store.file, 'utf8'))
  t.same(Object.keys(parsed), ['tasks'])
  t.equal(parsed.tasks[0].id, 'a')
  const { writeFileSync, readdirSync } = await import('node:fs')
  t.same(readdirSync(dir).filter((f) => f.endsWith('.tmp') || f.endsWith('.lock')), [], 'no temp file or lock left behind')
  writeFileSync(store.file, '{"tasks": 5}')
  await t.rejects(store.list(), /is not \{"tasks": \[...\]\}/)
  await t.rejects(store.create([{ type: 'w' }]), /is not/)
  t.equal(readFileSync(store.file, 'utf8'), '{"tasks": 5}', 'a corrupt file is never overwritten')
})

t.test('the file store waits out a held lock, gives up after lockWaitMs, and fails fast when the directory is gone', async (t) => {
  const dir = tempDataDir(t)
  const store = new FileTaskStore(dir, { lockWaitMs: 300 })
  t.teardown(async () => { await store.close() })
  await store.create([{ id: 'a', type: 'w' }])
  const release = await lockfile.lock(store.file, { realpath: false })
  setTimeout(() => { release().catch(() => {}) }, 100)
  const waited = Date.now()
  t.equal((await store.create([{ id: 'b', type: 'w' }]))[0]?.id, 'b', 'the write went through once the other holder let go')
  t.ok(Date.now() - waited >= 90, 'it waited for the holder')

  const held = await lockfile.lock(store.file, { realpath: false })
  const started = Date.now()
  await t.rejects(store.create([{ id: 'c', type: 'w' }]), { code: 'ELOCKED' })
  t.ok(Date.now() - started >= 300, 'it waited the whole budget')
  await held()
  t.same((await store.list()).map((x) => x.id), ['a', 'b'], 'the refused write changed nothing')

  // a budget of a minute, so that a retry would show whatever the machine's load (a 250 ms bound failed at load 10)
  const patient = new FileTaskStore(dir, { lockWaitMs: 60_000 })
  t.teardown(async () => { await patient.close() })
  rmSync(dir, { recursive: true, force: true })
  const gone = Date.now()
  await t.rejects(patient.claim('w', 'x', 1000), { code: 'ENOENT' })
  t.ok(Date.now() - gone < 30_000, 'a missing directory is not retried')
})

t.test('retry delays grow exponentially with jitter, capped', async (t) => {
  t.equal(retryDelayMs(1, 1000, 60_000, () => 0), 500)
  t.equal(retryDelayMs(1, 1000, 60_000, () => 1), 1000)
  t.equal(retryDelayMs(3, 1000, 60_000, () => 1), 4000)
  t.equal(retryDelayMs(30, 1000, 60_000, () => 1), 60_000)
  t.same(findCycle([newTaskNode({ id: 'a', type: 'x' }, new Date())]), undefined)
})
