import t, { type Test } from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { hostname } from 'node:os'
import { request } from 'node:http'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import type { Cluster } from '../../../scripts/pg-cluster.js'
import type { StreamPacket } from '../../../src/protocol/packets.js'
import type { EventInput } from '../../../src/storage/events.js'
import { buildApp } from '../../../src/app.js'
import { inTransaction, openPostgres } from '../../../src/storage/postgres/database.js'
import { PgEventStore } from '../../../src/storage/postgres/events.js'
import { observed } from '../../fixtures/agents/scripted/index.js'
import { FIXTURE_AGENTS_DIR, SCRIPTED, envelope, streamingScript, tempDataDir, testConfig } from '../../helper.js'
import { ownPgServer, pgDatabase } from '../../pg.js'
import { startServer, type ServerChild } from '../../server-child.js'
import { until } from '../../socket.js'
import { assertStreamRules, parseSse } from '../../sse.js'

// The issue's chaos paragraph, with real processes on a throwaway PostgreSQL server of this test's
// own (it stops and starts it): two API instances and three `agent-host worker` processes; streams on
// both instances, one instance SIGKILLed mid-stream and its clients resumed on the other; a worker
// SIGSTOPped past its lease while it holds a task; the database restarted mid-run under JSON traffic
// and task work. Every wait is for a condition, bounded. Then the two faults the chaos test found,
// each reproduced alone.

t.setTimeout(240_000)
const ROOT = fileURLToPath(new URL('../../../', import.meta.url))
const RUN_LEASE_MS = 1500
const TASK_LEASE_MS = 1000
/** Long enough that a worker seen holding a task still holds it when the SIGSTOP lands. */
const TASK_MS = 1000
const STREAMS_ON_A = 3
const STREAMS_ON_B = 2

type Envelope = ReturnType<typeof envelope>
interface Task { id: string, status: string, owner: string | null, attempt: number }
interface Worker { child: ChildProcess, pid: number, output: () => string }
interface Sse { status: number, text: () => string, ended: Promise<void> }

/** POST an envelope for a stream over a real socket; a connection the server drops ends the response (no throw). */
async function sse (url: string, body: Envelope, headers: Record<string, string> = {}): Promise<Sse> {
  return await new Promise((resolve, reject) => {
    const req = request(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...headers } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString('utf8') })
      res.on('error', () => {})
      const ended = new Promise<void>((resolve) => { res.on('close', resolve) })
      resolve({ status: res.statusCode ?? 0, text: () => text, ended })
    })
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
}

/** The complete packets of an SSE body that may have been cut off mid-event. */
function packetsOf (text: string): StreamPacket[] {
  return parseSse(text.slice(0, text.lastIndexOf('\n\n') + 2), false).packets
}

const key = (p: Pick<StreamPacket, 'stream_id' | 'seq'>): string => `${p.stream_id}:${p.seq}`

/** JSON over HTTP, bounded: no answer within `ms` (a hang) or no connection (a crash) is status 0, with why. */
async function call (url: string, init: { method?: string, body?: unknown, ms?: number } = {}): Promise<{ status: number, json: any, error?: string }> {
  try {
    const res = await fetch(url, {
      method: init.method ?? 'GET',
      headers: init.body === undefined ? {} : { 'content-type': 'application/json', accept: 'application/json' },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
      signal: AbortSignal.timeout(init.ms ?? 20_000)
    })
    const text = await res.text()
    return { status: res.status, json: text === '' ? undefined : JSON.parse(text) }
  } catch (err) {
    return { status: 0, json: undefined, error: `${(err as Error).name}: ${(err as Error).message}` }
  }
}

/** `agent-host worker --type sleep` on the cluster's database. */
function startWorker (t: Test, url: string): Worker {
  const child = spawn(process.execPath, [...process.execArgv, join(ROOT, 'src/cli.ts'), 'worker', '--type', 'sleep'], {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: url,
      TASK_STORE: 'postgres',
      DATA_DIR: tempDataDir(t),
      AGENTS_DIR: FIXTURE_AGENTS_DIR,
      TASK_LEASE_MS: String(TASK_LEASE_MS),
      TASK_HEARTBEAT_MS: '200',
      TASK_POLL_MS: '50',
      BUS_POLL_MS: '200'
    },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  child.stdout?.on('data', (c: Buffer) => { output += c.toString() })
  child.stderr?.on('data', (c: Buffer) => { output += c.toString() })
  t.teardown(() => {
    if (child.exitCode !== null || child.signalCode !== null) return
    child.kill('SIGCONT')
    child.kill('SIGKILL')
  })
  return { child, pid: child.pid as number, output: () => output }
}

const owns = (worker: Worker, task: Pick<Task, 'owner'>): boolean => task.owner?.startsWith(`sleep@${hostname()}:${worker.pid}#`) === true
const alive = (child: ChildProcess): boolean => child.exitCode === null && child.signalCode === null

/** Run `sql` on the cluster with a connection of its own. */
async function query<R extends pg.QueryResultRow> (cluster: Cluster, sql: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: cluster.url })
  await client.connect()
  try {
    return (await client.query<R>(sql, values)).rows
  } finally {
    await client.end()
  }
}

/** Every packet of a run's journal, in order, read from the database. */
async function journal (cluster: Cluster, wireId: string): Promise<string[]> {
  const rows = await query<{ frames: string }>(cluster, 'SELECT j.frames FROM journal j JOIN runs r ON r.run_id = j.run_id WHERE r.wire_id = $1 ORDER BY j.ord', [wireId])
  return rows.flatMap((row) => row.frames.split('\n'))
}

/** A PostgreSQL server of the test's own, since it stops it (which would break every other test on a shared one); undefined (skipped loudly) when there are no server binaries. */
async function ownCluster (t: Test): Promise<Cluster | undefined> {
  const cluster = await ownPgServer(t)
  if (cluster === undefined) return undefined
  return cluster
}

t.test('chaos across instances: an instance killed mid-stream, a worker paused past its lease, the database restarted mid-run', async (t) => {
  const cluster = await ownCluster(t)
  if (cluster === undefined) return
  const instanceEnv = (): Record<string, string> => ({
    DATABASE_URL: cluster.url,
    TASK_STORE: 'postgres',
    DATA_DIR: tempDataDir(t),
    AGENTS_DIR: FIXTURE_AGENTS_DIR,
    WORKERS_PER_TYPE: '0',
    RUN_LEASE_MS: String(RUN_LEASE_MS),
    TASK_LEASE_MS: String(TASK_LEASE_MS),
    TASK_HEARTBEAT_MS: '200',
    TASK_POLL_MS: '50',
    // the test's own polling must not be rate-limited, and /health must speak of the database only
    // (a loaded 2-core machine would otherwise trip the event-loop guard into `degraded`)
    RATE_LIMIT_MAX: '0',
    MAX_EVENT_LOOP_DELAY_MS: '0'
  })
  const workers = [startWorker(t, cluster.url), startWorker(t, cluster.url), startWorker(t, cluster.url)]
  const [a, b] = await Promise.all([startServer(t, instanceEnv()), startServer(t, instanceEnv())]) as [ServerChild, ServerChild]
  await until('three workers ready', () => workers.every((w) => w.output().includes('worker ready')), 60_000, 50)
  const figures = { instances: 2, kills: 0, pauses: 0, dbRestarts: 0, tasks: 0, completed: 0, lost: 0, doubled: 0, regressions: 0, streamGaps: 0, duplicatePackets: 0, acknowledged: 0, refused: 0 }

  // --- every task's status, watched through the instance that is never killed: COMPLETED is final
  const completedSeen = new Set<string>()
  const regressions: string[] = []
  const tasksNow = async (): Promise<Task[] | undefined> => {
    const res = await call(`${b.url}/v1/tasks?limit=1000`, { ms: 10_000 })
    return res.status === 200 ? res.json.tasks as Task[] : undefined
  }
  const watching = new AbortController()
  t.teardown(() => { watching.abort() })
  const watcher = (async () => {
    while (!watching.signal.aborted) {
      for (const task of await tasksNow() ?? []) {
        if (completedSeen.has(task.id) && task.status !== 'COMPLETED') regressions.push(`${task.id}: COMPLETED → ${task.status}`)
        if (task.status === 'COMPLETED') completedSeen.add(task.id)
      }
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  })()
  const taskIds: string[] = []
  const createTasks = async (url: string, count: number, batch: string): Promise<void> => {
    const res = await call(`${url}/v1/tasks`, { method: 'POST', body: { tasks: Array.from({ length: count }, (_, i) => ({ id: `${batch}-${i}`, type: 'sleep', inputs: { ms: TASK_MS }, max_attempts: 20 })) } })
    t.equal(res.status, 201, `${batch}: tasks created`)
    taskIds.push(...(res.json.tasks as Task[]).map((task) => task.id))
  }
  const allCompleted = async (): Promise<boolean> => {
    const now = await tasksNow()
    return now !== undefined && taskIds.every((id) => now.find((task) => task.id === id)?.status === 'COMPLETED')
  }
  /** What the database is busy with: a wait that timed out says why. */
  const busy = async (): Promise<string> => JSON.stringify(await query(cluster,
    "SELECT application_name, state, now() - xact_start AS in_transaction, left(query, 80) AS query FROM pg_stat_activity WHERE datname = 'postgres' AND state <> 'idle' AND pid <> pg_backend_pid()"))

  // --- phase 1: streams on both instances, A SIGKILLed mid-stream; a worker SIGSTOPped past its lease
  await createTasks(a.url, 8, 'one-a')
  await createTasks(b.url, 7, 'one-b')
  const bodies = Array.from({ length: STREAMS_ON_A + STREAMS_ON_B }, () => envelope(SCRIPTED, { script: streamingScript(60, 50) }))
  const onA = await Promise.all(bodies.slice(0, STREAMS_ON_A).map(async (body) => await sse(a.url, body)))
  const onB = await Promise.all(bodies.slice(STREAMS_ON_A).map(async (body) => await sse(b.url, body)))
  for (const s of [...onA, ...onB]) t.equal(s.status, 200)

  let replacement: Promise<ServerChild> | undefined
  const streams = async (): Promise<Array<{ body: Envelope, fromA: StreamPacket[], fromB: StreamPacket[] }>> => {
    await until('every stream on A mid-way', () => onA.every((s) => packetsOf(s.text()).filter((p) => p.op === 'DELTA').length >= 5), 30_000, 10)
    a.child.kill('SIGKILL')
    figures.kills++
    // a new instance in its place, booting while A's clients resume: two instances again for the database restart
    replacement = startServer(t, instanceEnv())
    replacement.catch(() => {})
    t.equal(await a.exited, 'SIGKILL')
    await Promise.all(onA.map(async (s) => { await s.ended }))
    // each client of A resumes on B after the last packet it got, as a CAP client does
    const resumed = await Promise.all(onA.map(async (s, i) => {
      const got = packetsOf(s.text())
      t.notOk(got.some((p) => p.op === 'CLOSE' && p.stream_id === got[0]?.stream_id), `client ${i} of A: its run was still going when A was killed`)
      const rest = await sse(b.url, bodies[i] as Envelope, { 'last-event-id': key(got.at(-1) as StreamPacket) })
      t.equal(rest.status, 200, `client ${i} of A resumed on B`)
      await rest.ended
      return { body: bodies[i] as Envelope, fromA: got, fromB: packetsOf(rest.text()) }
    }))
    const direct = await Promise.all(onB.map(async (s, i) => {
      await s.ended
      return { body: bodies[STREAMS_ON_A + i] as Envelope, fromA: [], fromB: packetsOf(s.text()) }
    }))
    return [...resumed, ...direct]
  }

  const pause = async (): Promise<void> => {
    const [paused] = workers as [Worker]
    for (let attempt = 0; attempt < 10; attempt++) {
      await until('the first worker to hold a task', async () => (await tasksNow())?.some((task) => task.status === 'IN_PROGRESS' && owns(paused, task)) === true, 30_000, 20)
      paused.child.kill('SIGSTOP')
      const held = (await tasksNow() ?? []).filter((task) => task.status === 'IN_PROGRESS' && owns(paused, task))
      let reclaimed = false
      if (held.length > 0) {
        // a completion already on its way when the signal landed may still commit: then it was not held
        const settled = async (): Promise<Map<string, Task>> => new Map((await tasksNow() ?? []).map((task) => [task.id, task]))
        await until('the held task to be reclaimed by another worker (or found completed before the pause)', async () => {
          const now = await settled()
          return held.every((h) => { const task = now.get(h.id); return task !== undefined && (task.status === 'COMPLETED' || (task.status === 'IN_PROGRESS' && !owns(paused, task))) })
        }, 30_000, 20).catch(async (err: unknown) => { throw new Error(`${(err as Error).message}; the database is busy with ${await busy()}`) })
        const now = await settled()
        reclaimed = held.some((h) => { const task = now.get(h.id); return task !== undefined && !owns(paused, task) && task.attempt > h.attempt })
      }
      paused.child.kill('SIGCONT')
      if (reclaimed) { figures.pauses++; return }
    }
    t.fail('the paused worker never held a task long enough to lose it')
  }

  const [followed] = await Promise.all([streams(), pause()])
  for (const [i, { body, fromA, fromB }] of followed.entries()) {
    const union = [...fromA, ...fromB]
    const frames = await journal(cluster, body.request_id)
    const keys = union.map(key)
    const gaps = frames.map((frame) => key(JSON.parse(frame) as StreamPacket)).filter((k) => !keys.includes(k)).length
    const duplicates = keys.length - new Set(keys).size
    figures.streamGaps += gaps
    figures.duplicatePackets += duplicates
    const who = i < STREAMS_ON_A ? `client ${i} of A (resumed on B)` : `client ${i - STREAMS_ON_A} of B`
    t.equal(gaps, 0, `${who}: no gap`)
    t.equal(duplicates, 0, `${who}: no duplicate packet`)
    t.same(union.map((p) => JSON.stringify(p)), frames, `${who}: exactly the journal, in order, byte for byte`)
    t.doesNotThrow(() => assertStreamRules(union), `${who}: the stream rules hold across the two instances`)
    if (i < STREAMS_ON_A) {
      t.ok(fromA.length > 0 && fromB.length > 0, `${who}: got part from A and the rest from B`)
      t.match(fromB.find((p) => p.op === 'ERROR'), { p: { code: 'run_interrupted' } }, `${who}: B recovered the dead instance's run: ERROR run_interrupted, then CLOSE`)
    } else {
      t.match(union.at(-1), { op: 'CLOSE', p: 'done' }, `${who}: B's own run finished`)
    }
  }
  const c = await (replacement as Promise<ServerChild>)
  figures.instances++
  await until('the first batch of tasks completed', allCompleted, 60_000, 50)
    .catch(async (err: unknown) => { throw new Error(`${(err as Error).message}; the database is busy with ${await busy()}`) })

  // --- phase 2: the database restarted while tasks are worked and JSON requests come in on both instances
  await createTasks(c.url, 5, 'two-c')
  await createTasks(b.url, 4, 'two-b')
  const instances = [b, c]
  const answers: Array<{ body: Envelope, status: number, code?: string, error?: string, phase: string }> = []
  let phase = 'before'
  const asking = new AbortController()
  t.teardown(() => { asking.abort() })
  const asker = (async () => {
    for (let i = 0; !asking.signal.aborted; i++) {
      const body = envelope(SCRIPTED, { script: [{ op: 'result', value: { n: i } }] })
      const at = phase
      const res = await call(`${(instances[i % 2] as ServerChild).url}/v1/assist`, { method: 'POST', body })
      answers.push({ body, status: res.status, code: res.json?.code, ...(res.error !== undefined ? { error: res.error } : {}), phase: at })
      if (res.status !== 200) await new Promise((resolve) => setTimeout(resolve, 50))
    }
  })()
  await until('answers acknowledged before the restart, and tasks in progress', async () =>
    answers.filter((x) => x.status === 200).length >= 4 && (await tasksNow())?.some((task) => task.status === 'IN_PROGRESS') === true, 30_000, 20)
  const workerOutput = workers.map((w) => w.output().length)
  phase = 'during'
  cluster.stop()
  figures.dbRestarts++
  for (const instance of instances) {
    await until(`${instance.url}: /health to say degraded while the database is down`, async () => (await call(`${instance.url}/health`)).json?.status === 'degraded', 20_000, 50)
    const started = Date.now()
    const refused = await call(`${instance.url}/v1/assist`, { method: 'POST', body: envelope(SCRIPTED, { script: [{ op: 'result', value: 'during' }] }) })
    t.equal(refused.status, 503, `${instance.url}: refused while the database is down${refused.error !== undefined ? ` (${refused.error})` : ''}`)
    t.equal(refused.json?.code, 'AH_ERR_STORAGE_UNAVAILABLE', 'with a clear code')
    t.ok(Date.now() - started < 20_000, 'answered, not hung')
  }
  // the outage lasts until every process has felt it: each instance refused the JSON client, each worker failed a write
  await until('the JSON client refused by both instances', () => instances.every((_, i) => answers.some((x, n) => n % 2 === i && x.phase === 'during' && x.status === 503)), 20_000, 20)
  await until('every worker to fail a write while the database is down', () => workers.every((w, i) => w.output().slice(workerOutput[i]).includes('task loop failed')), 20_000, 20)
  cluster.start()
  phase = 'after'
  for (const instance of instances) {
    await until(`${instance.url}: /health to say ok again`, async () => (await call(`${instance.url}/health`)).json?.status === 'ok', 30_000, 50)
  }
  await until('answers acknowledged by both instances after the restart', () => answers.filter((x) => x.phase === 'after' && x.status === 200).length >= 4, 30_000, 20)
  await until('every task completed', allCompleted, 60_000, 50)
  asking.abort()
  await asker
  watching.abort()
  await watcher

  // --- what must hold
  for (const [name, child] of [['B', b.child], ['C', c.child], ...workers.map((w, i) => [`worker ${i}`, w.child] as const)] as const) {
    t.ok(alive(child), `${name} survived everything (no crash)`)
  }
  const bad = answers.filter((x) => x.status !== 200 && !(x.status === 503 && x.code === 'AH_ERR_STORAGE_UNAVAILABLE'))
  t.same(bad.map((x) => ({ status: x.status, code: x.code, error: x.error, phase: x.phase })), [], 'every JSON request was answered 200, or 503 AH_ERR_STORAGE_UNAVAILABLE: never a hang, a crash or another error')
  const acknowledged = answers.filter((x) => x.status === 200)
  figures.acknowledged = acknowledged.length
  figures.refused = answers.filter((x) => x.status === 503).length
  for (const { body, phase } of acknowledged) {
    const audit = await call(`${b.url}/v1/audit?action=assist&request_id=${body.request_id}`)
    const history = await call(`${c.url}/v1/sessions/${body.context.session_id}/history`)
    const stored = audit.json?.rows?.length === 1 && history.json?.total === 1
    if (!stored) figures.lost++
    t.ok(stored, `the acknowledged answer ${body.request_id} is stored: its audit row and its interaction`, stored
      ? {}
      : {
          phase,
          audit: audit.json,
          history: history.json,
          run: await query(cluster, 'SELECT state, end_reason, owner_instance, response_status, started_at, ended_at FROM runs WHERE wire_id = $1', [body.request_id]),
          logs: [b, c].map((x) => x.stdout().split('\n').filter((l) => l.includes(body.request_id) || l.includes('"level":50') || l.includes('"level":40')).join('\n'))
        })
  }
  t.match((await call(`${c.url}/v1/audit/verify`)).json, { ok: true }, 'the audit chain verifies')

  const tasks = (await tasksNow() ?? []).filter((task) => taskIds.includes(task.id))
  figures.tasks = taskIds.length
  figures.completed = tasks.filter((task) => task.status === 'COMPLETED').length
  const results = new Map<string, number>()
  for (let after = 0; ;) {
    const page = await call(`${b.url}/v1/events?type=AGENT_RESULT&limit=1000&after=${after}`)
    t.equal(page.status, 200)
    for (const event of page.json.events as Array<{ event: { task_id: string, outcome: string } }>) {
      if (event.event.outcome === 'completed') results.set(event.event.task_id, (results.get(event.event.task_id) ?? 0) + 1)
    }
    if (page.json.next === undefined) break
    after = page.json.next
  }
  figures.doubled = taskIds.filter((id) => (results.get(id) ?? 0) > 1).length
  figures.regressions = regressions.length
  t.equal(figures.completed, taskIds.length, 'every task completed')
  t.same(taskIds.filter((id) => results.get(id) !== 1), [], 'every task completed exactly once (one AGENT_RESULT completed each)')
  t.same(regressions, [], 'no COMPLETED task ever changed state')
  t.equal(figures.pauses, 1, 'a worker was paused past its lease and lost its task')

  t.comment(`chaos: instances ${figures.instances}, kills ${figures.kills}, pauses ${figures.pauses}, db restarts ${figures.dbRestarts}, tasks ${figures.tasks}, completed ${figures.completed}, lost ${figures.lost}, doubled ${figures.doubled}, regressions ${figures.regressions}, stream gaps ${figures.streamGaps}, duplicate packets ${figures.duplicatePackets} (JSON answers acknowledged ${figures.acknowledged}, refused with 503 ${figures.refused})`)
  for (const name of ['lost', 'doubled', 'regressions', 'streamGaps', 'duplicatePackets'] as const) t.equal(figures[name], 0, `${name}: 0`)
})

/** An internal event, as a worker appends one. */
const event = (id: string): EventInput => ({ kind: 'task', id, type: 'AGENT_UPDATE', source: 'agents/test', time: new Date().toISOString(), visibility: 'internal', task_id: id, event: { task_id: id } })

/** `promise`, or a rejection naming `what` after `ms`. */
async function within<T> (ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => { reject(new Error(`${what}: still waiting after ${ms} ms`)) }, ms) })
  try {
    return await Promise.race([promise, late])
  } finally {
    clearTimeout(timer)
  }
}

// found by the chaos test: a database restart ended API instances and workers with an uncaught 'error'
t.test('a connection the server drops while it is checked out of the pool fails its transaction, not the process', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const admin = new pg.Client({ connectionString: url })
  await admin.connect()
  t.teardown(async () => { await admin.end() })
  await t.rejects(inTransaction(pool, async (client) => {
    const [{ pid }] = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows as [{ pid: number }]
    const ended = new Promise((resolve) => { client.once('end', resolve) })
    await admin.query('SELECT pg_terminate_backend($1)', [pid])
    // between two statements, as a transaction is while its process computes: the error has no query to go to
    await ended
    await client.query('SELECT 1')
  }), 'the transaction fails')
  t.same((await pool.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'the pool goes on with a new connection')
})

// found by the chaos test: a worker SIGSTOPped inside an event's transaction held the event log's
// lock, and every process's next event (so every task completion) waited for it to wake
t.test('a transaction left idle (its process frozen) is ended by the server, and its locks with it', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const frozen = await openPostgres(url, { idleInTransactionTimeoutMs: 300 })
  const other = await openPostgres(url)
  t.teardown(async () => { await frozen.end(); await other.end() })
  const client = await frozen.connect()
  t.teardown(() => { client.release(true) })
  await client.query('BEGIN')
  await new PgEventStore(frozen).appendIn(client, event('frozen'))
  // nothing more is sent on `client`: to the server, a process stopped in the middle of its transaction
  const events = new PgEventStore(other)
  const seq = await within(20_000, 'an event appended behind the frozen transaction', events.append(event('next')))
  t.ok(seq > 0, 'another process appended its event once the frozen transaction was ended')
  t.same((await events.list()).map((e) => e.event.task_id), ['next'], 'and only it: the frozen one was rolled back')
  await t.rejects(client.query('COMMIT'), 'the frozen process finds its transaction gone when it wakes')
})

// found by the chaos test: a JSON run that ended while the database was going away answered 200, its
// answer stored nowhere; once its lease lapsed it was recovered as interrupted, so a retry of the
// acknowledged request got another answer
t.test('a JSON answer that could not be stored because the database went away is a 503, never a 200; the retry gets what was stored', async (t) => {
  const cluster = await ownCluster(t)
  if (cluster === undefined) return
  const app = await buildApp({ ...testConfig(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR, RUN_LEASE_MS: '300' }), DATABASE_URL: cluster.url, TASK_STORE: 'postgres' })
  t.teardown(async () => { await app.close() })
  // long enough for the test to stop the database while the agent still runs, after its result
  const body = envelope(SCRIPTED, { script: [{ op: 'result', value: { n: 1 } }, { op: 'sleep', ms: 3000 }] })
  const first = app.inject({ method: 'POST', url: '/v1/assist', payload: body })
  await until('the run to start', () => observed.started.includes(body.context.session_id), 20_000)
  cluster.stop()
  const refused = await first
  t.equal(refused.statusCode, 503, 'not acknowledged')
  t.equal(refused.json().code, 'AH_ERR_STORAGE_UNAVAILABLE')
  t.equal(refused.headers['retry-after'], '5')
  cluster.start()
  const retry = async (): Promise<{ status: number, body: unknown }> => {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
    return { status: res.statusCode, body: res.json() }
  }
  let retried = await retry()
  await until('the retry to be answered once the database is back (and the run recovered)', async () => (retried = await retry()).status !== 503, 30_000, 50)
  t.same(await retry(), retried, 'every retry gets the same answer: the stored one')
  t.match(await app.audit.list({ request_id: body.request_id }), [{ request_id: body.request_id }], 'the stored answer is audited')
})
