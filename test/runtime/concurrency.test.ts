import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { FileTaskStore } from '../../src/storage/file/tasks.js'
import { tempDataDir } from '../helper.js'
import { taskStoreMakers } from '../storage/tasks/task-stores.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const TASKS = 500
const WORKERS = 4

const stores = taskStoreMakers()

for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} store: ${WORKERS} processes drain ${TASKS} tasks, each completed exactly once`, async (t) => {
    const made = await make(t)
    if (made === undefined) return
    const { store, location } = made
    await store.create(Array.from({ length: TASKS }, (_, i) => ({ id: `t${i}`, type: 'w' })))

    const workers = Array.from({ length: WORKERS }, (_, i) => {
      const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/task-drainer.ts', kind, location, `worker-${i}`], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] })
      t.teardown(() => { child.kill('SIGKILL') })
      let out = ''
      const ready = new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (c: Buffer) => { out += c.toString(); if (out.startsWith('ready\n')) resolve() })
        child.once('exit', (code) => { reject(new Error(`worker-${i} exited before it was ready (${String(code)})`)) })
      })
      const exited = once(child, 'exit').then(([code]) => ({ code, lines: out.trim().split('\n').slice(1).filter((l) => l !== '') }))
      return { child, ready, exited }
    })
    await Promise.all(workers.map(async (w) => { await w.ready }))
    for (const w of workers) w.child.stdin.end('go\n')
    let reads = 0
    let torn = 0
    const state = { running: kind === 'file' }
    const reader = (async () => {
      while (state.running) {
        try {
          JSON.parse(readFileSync((store as FileTaskStore).file, 'utf8'))
          reads++
        } catch {
          torn++
        }
        await sleep(1)
      }
    })()
    const results = await Promise.all(workers.map(async (w) => await w.exited))
    state.running = false
    await reader

    t.same(results.map((r) => r.code), [0, 0, 0, 0])
    const done = results.flatMap((r) => r.lines)
    t.equal(done.length, TASKS, 'as many completions as tasks')
    t.equal(new Set(done.map((l) => l.split(':')[0])).size, TASKS, 'no task completed twice')
    t.ok(done.every((l) => l.endsWith(':1')), 'every task on its first attempt: no claim was shared')
    const tasks = await store.list({ limit: TASKS })
    t.ok(tasks.every((task) => task.status === 'COMPLETED' && task.attempt === 1 && task.outputs?.by === task.owner))
    t.ok(results.filter((r) => r.lines.length > 0).length >= 2, `the work was shared: ${results.map((r) => r.lines.length).join(', ')}`)
    if (kind === 'file') {
      t.equal(torn, 0, `the file parsed on every one of ${reads} reads during the run`)
      t.ok(reads > 0)
    }
  })
}

t.test('a process killed while holding the file lock: another proceeds once the lock is stale', async (t) => {
  const dir = tempDataDir(t)
  const store = new FileTaskStore(dir, { staleMs: 2000 })
  t.teardown(async () => { await store.close() })
  await store.create([{ id: 'before', type: 'w' }])
  const holder = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/hold-lock.ts', store.file], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  await once(holder.stdout, 'data')
  holder.kill('SIGKILL')
  await once(holder, 'exit')
  const started = Date.now()
  const [task] = await store.create([{ id: 'after', type: 'w' }])
  const waited = Date.now() - started
  t.equal(task?.id, 'after')
  t.ok(waited >= 1000, `waited ${waited} ms for the stale lock`)
  t.ok(waited < 10_000)
  t.same((await store.list()).map((x) => x.id), ['before', 'after'])
})

// Regression: a worker paused (SIGSTOP) past the stale period while it held the lock lost it to
// another process, and on SIGCONT wrote the snapshot it had read before the pause over the newer
// graph: one 12 s pause reverted 40 COMPLETED tasks, and all 40 were completed twice.
t.test('a worker paused while it holds the file lock never writes its stale graph once the lock was taken over', async (t) => {
  const dir = tempDataDir(t)
  const store = new FileTaskStore(dir, { staleMs: 1000 })
  t.teardown(async () => { await store.close() })
  await store.create(['a', 'b', 'c'].map((id) => ({ id, type: 'w' })))
  const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/paused-claimer.ts', dir], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  let out = ''
  child.stdout.on('data', (c: Buffer) => { out += c.toString() })
  const state = (): string => readFileSync(`/proc/${child.pid ?? 0}/stat`, 'utf8').split(') ')[1]?.[0] ?? ''
  for (const deadline = Date.now() + 30_000; !(out.includes('paused') && state() === 'T'); await sleep(20)) {
    if (Date.now() > deadline) throw new Error('the claimer never paused')
  }
  // the lock is the paused process's until it goes stale; then this process takes it over and drains the graph
  const started = Date.now()
  for (let task = await store.claim('w', 'live-worker', 60_000); task !== undefined; task = await store.claim('w', 'live-worker', 60_000)) {
    await store.complete(task.id, { owner: 'live-worker', attempt: task.attempt }, { by: 'live-worker' })
  }
  t.ok(Date.now() - started >= 900, 'it waited for the paused holder\'s lock to go stale')
  const exited = once(child, 'exit')
  child.kill('SIGCONT')
  await exited
  t.equal(out.trim().split('\n').at(-1), 'none', 'continued, the paused worker found nothing left to claim')
  const tasks = await store.list()
  t.same(tasks.map((task) => [task.id, task.status, task.owner, task.attempt]), [['a', 'COMPLETED', 'live-worker', 1], ['b', 'COMPLETED', 'live-worker', 1], ['c', 'COMPLETED', 'live-worker', 1]], 'nothing was reverted')
  const another = new FileTaskStore(dir)
  await another.list()
  await another.close()
  t.same(readdirSync(dir).filter((f) => f.includes('.lock') || f.endsWith('.tmp')), [], 'no lock directory or temp file left behind')
})
