import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteEventStore } from '../../src/storage/sqlite/events.js'
import { type AppendedEvent, type EventInput, type EventLog } from '../../src/storage/events.js'
import { openPostgres } from '../../src/storage/postgres/database.js'
import { PgEventStore } from '../../src/storage/postgres/events.js'
import { FileTaskStore } from '../../src/storage/file/tasks.js'
import { AgentRuntime } from '../../src/runtime/agent-runtime.js'
import { type TaskNarrator } from '../../src/storage/tasks/narration.js'
import { SqliteNarrator } from '../../src/storage/sqlite/narrator.js'
import { PgNarrator } from '../../src/storage/postgres/narrator.js'
import { Reaper } from '../../src/runtime/reaper.js'
import { build, envelope, FIXTURE_AGENTS_DIR, SCRIPTED, tempDataDir } from '../helper.js'
import { pgDatabase } from '../pg.js'
import { until } from '../socket.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** A database of one kind with its event log, and narrators on it. */
interface Backend {
  events: EventLog
  /** A narrator over `events`. */
  narrator: TaskNarrator
  /** Another narrator on the same database (on PostgreSQL with a pool of its own: another instance). */
  another: () => Promise<TaskNarrator>
  /** Where a child process finds the database: a folder or a URL. */
  location: string
  /** The settings of a server on this database. */
  env: Record<string, string>
}

/** A new, empty database of each kind; undefined (the test skipped, loudly) when PostgreSQL is missing. */
const backends: Record<string, (t: Test) => Promise<Backend | undefined>> = {
  sqlite: async (t) => {
    const dir = tempDataDir(t)
    const db = openDatabase(dir)
    t.teardown(() => db.close())
    const events = new SqliteEventStore(db)
    return { events, narrator: new SqliteNarrator(events, db), another: async () => new SqliteNarrator(events, db), location: dir, env: { DATA_DIR: dir } }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const open = async (): Promise<{ pool: pg.Pool, events: PgEventStore }> => {
      const pool = await openPostgres(url, { max: 2 })
      t.teardown(async () => { await pool.end() })
      return { pool, events: new PgEventStore(pool) }
    }
    const { pool, events } = await open()
    return {
      events,
      narrator: new PgNarrator(pool, events),
      another: async () => {
        const other = await open()
        return new PgNarrator(other.pool, other.events)
      },
      location: url,
      env: { DATA_DIR: tempDataDir(t), DATABASE_URL: url, TASK_STORE: 'postgres' }
    }
  }
}

const narrations = async (events: EventLog, conversation: string, owner?: string | null): Promise<string[]> =>
  (await events.list({ session_id: conversation, type: 'NARRATION', limit: 1000, ...(owner === undefined ? {} : { owner_key: owner }) })).map((e) => String(e.event.text))

/** A task event as the runtime writes it (`AGENT_RESULT` of a completed task unless told). */
function taskEvent (conversation: string, task: string, over: Partial<EventInput> = {}): EventInput {
  return { kind: 'task', id: randomUUID(), type: 'AGENT_RESULT', source: 'agents/w', time: new Date().toISOString(), session_id: conversation, task_id: task, event: { task_id: task, task_type: 'count', outcome: 'completed' }, ...over }
}

for (const [kind, make] of Object.entries(backends)) {
  t.test(`${kind}: the narrator contract`, async (t) => {
    t.test('the narrator follows the event log: each task result and each stall is narrated once, by whichever narrator gets there first', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const { events } = backend
      const store = new FileTaskStore(tempDataDir(t), { retryBaseMs: 10, retryCapMs: 20 })
      const runtime = new AgentRuntime({ agentId: 'w', agentType: 'count', store, events, heartbeatMs: 1000, leaseMs: 5000 })
      const first = backend.narrator
      const second = await backend.another()
      await store.create([{ id: 'a', type: 'count', metadata: { conversation_id: 'c1' } }, { id: 'b', type: 'count', metadata: { conversation_id: 'c2' } }])
      await runtime.claimTask()
      await runtime.completeTask('a', { task_id: 'a', outcome: 'completed' })
      t.equal(await first.follow() + await second.follow(), 1, 'two narrators on one database: one narration')
      t.same(await narrations(events, 'c1'), ['count a is done.'])
      // a stall the reaper found (its event is the host's, like a worker's result from another process)
      const stalled = new AgentRuntime({ agentId: 'gone', agentType: 'count', store, events, heartbeatMs: 1000, leaseMs: 1 })
      await stalled.claimTask()
      const reaper = new Reaper(store, events)
      await until('the reaper to find the stalled task', async () => (await reaper.reap()).length > 0, 20_000, 5)
      t.equal(await second.follow(), 1)
      t.same(await narrations(events, 'c2'), ['count b stopped responding; it has been handed to another worker.'])
      t.equal(await first.follow(), 0, 'nothing new')
      // a restart: a new narrator on the same database narrates nothing again
      t.equal(await (await backend.another()).follow(), 0)
      t.same(await narrations(events, 'c1'), ['count a is done.'], 'said once')
    })

    t.test('an agent\'s event named like a task result is the agent\'s: the narrator neither hears nor describes it', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const { narrator } = backend
      await backend.events.append(taskEvent('s1', 'x', { kind: 'cloudevent', source: 'agents/scripted' }))
      t.equal(await narrator.follow(), 0)
      t.type(await narrator.narrate('s1', 'user_waiting'), 'number')
      t.same(await narrations(backend.events, 's1'), ['Still working on it.'])
    })

    t.test('without a hint or a recent result, a narration is suppressed and recorded, and its events wait for the next one', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const { events } = backend
      const { narrator } = backend
      const told: AppendedEvent[] = []
      events.appended.on('event', (e: AppendedEvent) => { told.push(e) })
      const update = await events.append(taskEvent('c', 'a', { type: 'AGENT_UPDATE', event: { task_id: 'a', task_type: 'count', message: 'halfway' } }))
      t.equal(await narrator.narrate('c'), undefined, 'suppressed')
      const [suppressed] = await events.list({ session_id: 'c', type: 'NARRATION_SUPPRESSED' })
      t.match(suppressed, { visibility: 'internal', event: { hint: null, considered: 1 } })
      t.equal(await narrator.narrate('c', 'not a hint' as 'user_waiting'), undefined, 'an unknown hint opens nothing')
      const seq = await narrator.narrate('c', 'user_waiting')
      const [spoken] = await events.list({ session_id: 'c', type: 'NARRATION' })
      t.match(spoken, { seq, visibility: 'user', event: { text: 'count a: halfway', hint: 'user_waiting', based_on: [update] } }, 'the suppressed narrations\' own events are not news')
      t.equal(told.find((e) => e.type === 'NARRATION')?.seq, seq, 'this process is told of the narration')
      await narrator.narrate('c', 'task_completed')
      t.same(await narrations(events, 'c'), ['count a: halfway', 'Update on your request.'], 'nothing new since: a plain update')
    })

    t.test('a recent internal ERROR opens the gate without a hint; what has no description is not said', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const { events, narrator } = backend
      await events.append(taskEvent('e', 'a', { type: 'AGENT_UPDATE', event: { task_id: 'a' } }))
      await events.append(taskEvent('e', 'a', { type: 'ERROR', event: { message: 'disk full' } }))
      t.type(await narrator.narrate('e'), 'number')
      t.same(await narrations(events, 'e'), ['Update on your request.'])
    })

    t.test('conversations are per owner: the same id of two owners and of the host are narrated apart', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const { events } = backend
      const { narrator } = backend
      await events.append(taskEvent('talk', 'mine', { owner_key: 'k1' }), 'host')
      await events.append(taskEvent('talk', 'theirs', { owner_key: 'k2', event: { task_id: 'theirs', task_type: 'count', outcome: 'failed', error: { reason: 'boom' }, status: 'FAILED' } }), 'host')
      await events.append(taskEvent('talk', 'host'), 'host')
      t.equal(await narrator.follow(), 3)
      t.same(await narrations(events, 'talk', 'k1'), ['count mine is done.'])
      t.same(await narrations(events, 'talk', 'k2'), ['count theirs failed: boom'])
      t.same(await narrations(events, 'talk', null), ['count host is done.'])
      t.same((await events.list({ session_id: 'talk', type: 'NARRATION', owner_key: 'k2' })).map((e) => e.event.hint), ['agent_failed'])
      await narrator.narrate('talk', 'user_waiting', 'k1')
      t.same(await narrations(events, 'talk', 'k1'), ['count mine is done.', 'Still working on it.'], 'k1\'s place moved past its own result only')
    })

    t.test('follow reads results in steps of `limit` (negative: all); a conversation with any failed result is narrated once as failed', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const { events } = backend
      const { narrator } = backend
      const retried = { task_id: 'b', task_type: 'count', outcome: 'failed', error: { reason: 'flaky' }, status: 'PENDING' }
      await events.append(taskEvent('one', 'a'), 'host')
      await events.append(taskEvent('two', 'b', { event: retried }), 'host')
      await events.append(taskEvent('two', 'c'), 'host')
      await events.append(taskEvent('three', 'd', { type: 'task.stalled', source: 'agent-host/reaper', event: { task_id: 'd', task_type: 'count', status: 'FAILED' } }), 'host')
      await events.append(taskEvent('four', 'e'), 'host')
      t.equal(await narrator.follow(1), 1, 'one result read')
      t.same(await narrations(events, 'one'), ['count a is done.'])
      t.equal(await narrator.follow(2), 1, 'two results of one conversation, one narration')
      t.same(await narrations(events, 'two'), ['count b failed: flaky (it will be retried)\ncount c is done.'])
      t.same((await events.list({ session_id: 'two', type: 'NARRATION' })).map((e) => e.event.hint), ['agent_failed'])
      t.equal(await narrator.follow(-1), 2, 'the rest at once')
      t.same(await narrations(events, 'three'), ['count d stopped responding; it has been given up.'])
      t.same(await narrations(events, 'four'), ['count e is done.'])
      t.equal(await narrator.follow(-1), 0)
    })

    t.test('narrators in three processes following one log at once narrate each result exactly once', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const { events } = backend
      // 24 conversations (8 of them k1's, and k2's own "c1"), 7 with a second, failed result: 32 results
      const conversations: Array<{ id: string, owner: string | null }> = []
      for (let i = 0; i < 24; i++) conversations.push({ id: `c${i}`, owner: i % 3 === 0 ? 'k1' : null })
      conversations.push({ id: 'c1', owner: 'k2' })
      const results: number[] = []
      for (const [i, c] of conversations.entries()) {
        results.push(await events.append(taskEvent(c.id, `t${i}`, { owner_key: c.owner }), 'host'))
        if (i % 4 === 0) results.push(await events.append(taskEvent(c.id, `u${i}`, { owner_key: c.owner, event: { task_id: `u${i}`, outcome: 'failed' } }), 'host'))
      }
      // two results a step: the followers take many turns, and some conversations' results fall in two steps
      const followers = Array.from({ length: 3 }, (_, i) => {
        const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/narrator-follower.ts', kind, backend.location, '2'], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] })
        t.teardown(() => { child.kill('SIGKILL') })
        let out = ''
        const ready = new Promise<void>((resolve, reject) => {
          child.stdout.on('data', (c: Buffer) => { out += c.toString(); if (out.startsWith('ready\n')) resolve() })
          child.once('exit', (code) => { reject(new Error(`follower ${i} exited before it was ready (${String(code)})`)) })
        })
        const exited = once(child, 'exit').then(([code]) => ({ code, spoken: Number(out.split('\n')[1]) }))
        return { child, ready, exited }
      })
      await Promise.all(followers.map(async (f) => { await f.ready }))
      for (const f of followers) f.child.stdin.end('go\n')
      const ends = await Promise.all(followers.map(async (f) => await f.exited))
      t.same(ends.map((e) => e.code), [0, 0, 0], 'every follower finished')
      const spoken = await events.list({ type: 'NARRATION', limit: -1 })
      t.equal(ends.reduce((sum, e) => sum + e.spoken, 0), spoken.length, 'the followers wrote every narration there is')
      const told = spoken.flatMap((e) => e.event.based_on as number[]).sort((a, b) => a - b)
      t.same(told, results, 'each result told in exactly one narration')
      const counts = await Promise.all(conversations.map(async (c) => (await narrations(events, c.id, c.owner)).length))
      t.ok(counts.every((n) => n >= 1), 'every conversation narrated')
      t.equal(await backend.narrator.follow(), 0, 'nothing left')
    })

    // Regression: a CAP agent's response.emit({ type: 'AGENT_RESULT', ... }) produced a user-visible NARRATION.
    t.test('an agent\'s CloudEvent named like a task result is the agent\'s event: the server\'s narrator neither hears nor repeats it', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const app = await build(t, { ...backend.env, AGENTS_DIR: FIXTURE_AGENTS_DIR })
      const sessionId = '5e550000-0000-4000-8000-00000000aa01'
      const event = { specversion: '1.0', id: 'ev-1', source: 'agents/scripted', type: 'AGENT_RESULT', data: { task_id: 'x', outcome: 'completed' } }
      const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(SCRIPTED, { script: [{ op: 'emit', event }] }, { sessionId }) })
      t.equal(res.statusCode, 200)
      t.equal((await app.events.list({ session_id: sessionId, type: 'AGENT_RESULT' })).length, 1, 'stored, as the agent\'s event')
      t.equal(await app.narrator.follow(), 0)
      await app.narrator.narrate(sessionId, 'user_waiting')
      t.same(await narrations(app.events, sessionId), ['Still working on it.'], 'and not described when the conversation is narrated')
    })

    // Regression: tasks finished by `agent-host worker` processes were never narrated (0 NARRATION events
    // for 1 600 worker-completed conversation tasks): the narrator only heard its own process.
    t.test('a task finished by an agent-host worker process is narrated by the server', async (t) => {
      const backend = await make(t)
      if (backend === undefined) return
      const app = await build(t, { ...backend.env, AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0', TASK_POLL_MS: '50' })
      await app.tasks.create([{ id: 'far', type: 'sleep', inputs: { ms: 10 }, metadata: { conversation_id: 'remote-talk' } }])
      const child = spawn(process.execPath, [...process.execArgv, 'src/cli.ts', 'worker', '--type', 'sleep'], {
        cwd: ROOT,
        env: { ...process.env, ...backend.env, AGENTS_DIR: FIXTURE_AGENTS_DIR, TASK_POLL_MS: '30', LOG_LEVEL: 'silent' },
        stdio: 'ignore'
      })
      t.teardown(() => { child.kill('SIGKILL') })
      await until('the narration', async () => (await narrations(app.events, 'remote-talk')).length > 0, 20_000, 20)
      t.same(await narrations(app.events, 'remote-talk'), ['sleep far: assigned\nsleep far is done.'])
    })
  })
}
