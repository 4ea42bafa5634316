import t from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { FileTaskStore } from '../../src/storage/file/tasks.js'
import type { TaskNode } from '../../src/storage/tasks/task.js'
import { taskStoreMakers } from '../storage/tasks/task-stores.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const TASKS = 120

/** A worker process and everything it printed. */
interface Worker { child: ChildProcess, out: string, ready: Promise<void>, exited: Promise<unknown> }

function worker (kind: string, location: string, owner: string): Worker {
  const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/task-chaos-worker.ts', kind, location, owner], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] })
  const w: Worker = { child, out: '', ready: Promise.resolve(), exited: once(child, 'exit') }
  w.ready = new Promise((resolve, reject) => {
    child.stdout?.on('data', (c: Buffer) => { w.out += c.toString(); if (w.out.startsWith('ready\n')) resolve() })
    child.once('exit', (code, signal) => { reject(new Error(`worker ${owner} exited before it was ready (${String(code ?? signal)})`)) })
  })
  return w
}

const stopped = (child: ChildProcess): boolean => readFileSync(`/proc/${child.pid ?? 0}/stat`, 'utf8').split(') ')[1]?.[0] === 'T'

const stores = taskStoreMakers(1000)

// SIGSTOP past the lock's stale period and the claims' lease, SIGKILL at whatever moment the run is in,
// a replacement for each killed worker, and a reader looking at the graph the whole time.
for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} store under pauses and kills: every task completed, none twice, none reverted`, async (t) => {
    const made = await make(t)
    if (made === undefined) return
    const { store, location } = made
    await store.create(Array.from({ length: TASKS }, (_, i) => ({ id: `t${String(i).padStart(3, '0')}`, type: 'w' })))
    const workers = [0, 1, 2, 3].map((i) => worker(kind, location, `w${i}`))
    t.teardown(() => { for (const w of workers) { w.child.kill('SIGCONT'); w.child.kill('SIGKILL') } })
    await Promise.all(workers.map(async (w) => { await w.ready }))
    for (const w of workers) w.child.stdin?.end('go\n')

    let reads = 0
    let torn = 0
    const regressions: string[] = []
    const completed = new Set<string>()
    const look = async (): Promise<TaskNode[] | undefined> => {
      if (kind !== 'file') return await store.list({ limit: TASKS })
      try {
        return (JSON.parse(readFileSync((store as FileTaskStore).file, 'utf8')) as { tasks: TaskNode[] }).tasks
      } catch {
        torn++
        return undefined
      }
    }
    const state = { running: true, done: false }
    const reader = (async () => {
      while (state.running) {
        const tasks = await look()
        if (tasks !== undefined) {
          reads++
          for (const task of tasks) {
            if (task.status === 'COMPLETED') completed.add(task.id)
            else if (completed.has(task.id)) regressions.push(`${task.id}: COMPLETED -> ${task.status}`)
          }
          state.done = tasks.length === TASKS && tasks.every((task) => task.status === 'COMPLETED')
        }
        await sleep(2)
      }
    })()
    const until = async (what: string, ok: () => boolean, ms: number): Promise<void> => {
      for (const deadline = Date.now() + ms; !ok(); await sleep(10)) if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    }
    const chaos = { pauses: 0, kills: 0 }
    // a pause past the stale period (1 s) and the lease (1.5 s)
    await until('some progress', () => completed.size >= 10, 30_000)
    const paused = workers[0] as Worker
    paused.child.kill('SIGSTOP')
    const pausedAt = Date.now()
    await until('the pause', () => stopped(paused.child), 5_000)
    chaos.pauses++
    // the pause ends on its own clock: a worker stopped inside a SQLite write transaction holds
    // the database's lock, and no other worker progresses until it goes on
    let pauseMs = 0
    const resumed = sleep(2_500).then(() => { paused.child.kill('SIGCONT'); pauseMs = Date.now() - pausedAt })
    // kills, at whatever point each worker is, each replaced
    for (const i of [1, 2]) {
      await until('more progress', () => completed.size >= 10 + 25 * i, 30_000)
      const victim = workers[i] as Worker
      victim.child.kill('SIGKILL')
      await victim.exited
      chaos.kills++
      const next = worker(kind, location, `w${i}b`)
      workers.push(next)
      await next.ready
      next.child.stdin?.end('go\n')
    }
    await resumed
    await until('every task completed', () => state.done, 45_000)
    await Promise.all(workers.map(async (w) => { if (w.child.exitCode === null && w.child.signalCode === null) await w.exited }))
    state.running = false
    await reader

    const lines = workers.flatMap((w) => w.out.split('\n').slice(1).filter((l) => l !== ''))
    const byTask = new Map<string, string[]>()
    for (const line of lines) {
      const [id] = line.split(':') as [string]
      byTask.set(id, [...(byTask.get(id) ?? []), line])
    }
    const twice = [...byTask].filter(([, ls]) => ls.length > 1)
    const final = await store.list({ limit: TASKS })
    const lost = TASKS - final.filter((x) => x.status === 'COMPLETED').length
    t.comment(`${TASKS} tasks, ${chaos.kills} kills, ${chaos.pauses} pause of ${pauseMs} ms, ${reads} reads, ${lines.length} completions reported, ${final.filter((x) => x.attempt > 1).length} tasks retried; lost ${lost}, doubled ${twice.length}, regressions ${regressions.length}, torn reads ${torn}`)
    t.same(twice, [], 'no task completed twice')
    t.same(regressions, [], 'no COMPLETED task went back')
    t.equal(torn, 0, 'every read of the graph parsed')
    t.equal(final.length, TASKS)
    t.ok(final.every((task) => task.status === 'COMPLETED'), 'every task completed')
    for (const task of final) {
      const reported = byTask.get(task.id)?.[0]
      // a killed worker may have stored a completion without living to print it
      if (reported !== undefined) t.equal(reported, `${task.id}:${task.attempt}:${String(task.outputs?.by)}`, `${task.id}: the completion reported is the one stored`)
    }
  })
}
