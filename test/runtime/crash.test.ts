import t from 'tap'
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteAuditLog } from '../../src/storage/sqlite/audit.js'
import { SqliteEventStore } from '../../src/storage/sqlite/events.js'
import { FileTaskStore } from '../../src/storage/file/tasks.js'
import { Reaper } from '../../src/runtime/reaper.js'
import { FIXTURE_AGENTS_DIR, tempDataDir, type Teardown } from '../helper.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const LEASE_MS = 600

interface Worker { child: ChildProcessWithoutNullStreams, output: () => string }

/**
 * A worker process. The one a test kills or freezes holds LEASE_MS; the one that takes over holds a
 * lease that a loaded machine's scheduling cannot outlast (its own heartbeats arriving late would
 * be refused as stale too, and muddle what the test reads).
 */
function startWorker (t: Teardown, dataDir: string, leaseMs = LEASE_MS): Worker {
  const child = spawn(process.execPath, [...process.execArgv, 'src/cli.ts', 'worker', '--type', 'sleep'], {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR, TASK_LEASE_MS: String(leaseMs), TASK_HEARTBEAT_MS: String(Math.min(150, leaseMs / 4)), TASK_POLL_MS: '30' }
  })
  let output = ''
  child.stdout.on('data', (c: Buffer) => { output += c.toString() })
  child.stderr.on('data', (c: Buffer) => { output += c.toString() })
  t.teardown(() => { child.kill('SIGKILL') })
  return { child, output: () => output }
}

async function until (check: () => Promise<boolean> | boolean, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!await check()) {
    if (Date.now() > deadline) throw new Error('timed out')
    await sleep(10)
  }
}

function setup (t: Teardown) {
  const dataDir = tempDataDir(t)
  const db = openDatabase(dataDir)
  t.teardown(() => db.close())
  const store = new FileTaskStore(dataDir, { retryBaseMs: 10, retryCapMs: 20 })
  const audit = new SqliteAuditLog(db)
  const reaper = new Reaper(store, new SqliteEventStore(db), audit)
  return { dataDir, store, audit, reaper }
}

t.test('SIGKILL a worker mid-task: the task is reclaimed after its lease and completed by another worker', async (t) => {
  const { dataDir, store, reaper } = setup(t)
  await store.create([{ id: 'job', type: 'sleep', inputs: { ms: 1000 } }])
  const a = startWorker(t, dataDir)
  await until(() => a.output().includes('started job'))
  a.child.kill('SIGKILL')
  const killed = Date.now()
  await once(a.child, 'exit')
  await until(async () => (await reaper.reap()).some((task) => task.id === 'job'))
  const reclaimMs = Date.now() - killed
  t.ok(reclaimMs >= LEASE_MS - 200, `reclaimed ${reclaimMs} ms after SIGKILL (lease ${LEASE_MS} ms)`)
  t.comment(`SIGKILL → reclaim: ${reclaimMs} ms with a ${LEASE_MS} ms lease`)
  const b = startWorker(t, dataDir, 60_000)
  await until(async () => (await store.get('job'))?.status === 'COMPLETED')
  const job = await store.get('job')
  t.equal(job?.attempt, 2)
  t.equal((job?.outputs?.artifacts as Array<{ pid: number }>)[0]?.pid, b.child.pid, 'the second worker finished it')
  b.child.kill('SIGTERM')
  const [code] = await once(b.child, 'exit') as [number]
  t.equal(code, 0, 'a worker stops cleanly on SIGTERM')
  t.match(b.output(), /worker stopped/)
})

t.test('SIGSTOP a worker past its lease, SIGCONT it: its late completion is refused as stale and changes nothing', async (t) => {
  const { dataDir, store, audit, reaper } = setup(t)
  await store.create([{ id: 'frozen', type: 'sleep', inputs: { ms: 400 } }])
  const a = startWorker(t, dataDir)
  await until(() => a.output().includes('started frozen'))
  a.child.kill('SIGSTOP')
  await sleep(LEASE_MS + 50)
  t.equal((await reaper.reap())[0]?.id, 'frozen')
  const b = startWorker(t, dataDir, 60_000)
  await until(async () => (await store.get('frozen'))?.status === 'COMPLETED')
  a.child.kill('SIGCONT')
  await until(() => audit.list({ limit: 1000 }).some((row) => /^task\.(complete|fail|heartbeat)\.stale$/.test(row.action)))
  const stale = audit.list({ limit: 1000 }).filter((row) => row.action.endsWith('.stale'))
  t.ok(stale.every((row) => row.actor.includes(`:${String(a.child.pid)}#`)), `the stale attempt came from the frozen worker (pid ${String(a.child.pid)}; the taker is ${String(b.child.pid)}): ${JSON.stringify(stale.map((row) => [row.action, row.actor]))}`)
  const frozen = await store.get('frozen')
  t.match(frozen, { status: 'COMPLETED', attempt: 2 })
  t.equal((frozen?.outputs?.artifacts as Array<{ pid: number }>)[0]?.pid, b.child.pid, 'the result is the second worker\'s')
  for (const w of [a, b]) w.child.kill('SIGTERM')
  await Promise.all([once(a.child, 'exit'), once(b.child, 'exit')])
})
