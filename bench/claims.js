// Claims per second (claim + complete per task) of the task stores at 100, 1 000 and 10 000 tasks,
// with 1 and 4 worker processes (drain-worker.js) on one DATA_DIR: the file store, the SQLite store,
// and two naive baselines (a read-modify-write of the same JSON under proper-lockfile: `naive` as
// safe as the file store, `naive-in-place` without temp file or fsync, see drain-worker.js); with
// --compare=<dir>, also the file store of another build. Each configuration runs until the graph is
// drained or --seconds pass; the targets take turns within each round, and the table gives medians
// over --rounds. Run: npm run build && node bench/claims.js [--compare=/tmp/before]
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { resolve } from 'node:path'
import { arg, childExecArgv, load, saveResult, smoke, tempDir } from './common.js'

const { openDatabase } = await load('storage/database')
const { FileTaskStore } = await load('runtime/file-task-store')
const { SqliteTaskStore } = await load('runtime/sqlite-task-store')
const seconds = arg('seconds', 5, 2)
const rounds = arg('rounds', 3, 1)
const compareFlag = process.argv.find((a) => a.startsWith('--compare='))
const compare = compareFlag === undefined ? undefined : resolve(compareFlag.slice('--compare='.length))
const sizes = smoke ? [20] : [100, 1000, 10000]
const processes = smoke ? [2] : [1, 4]
const targets = [
  { name: 'file', store: 'file' },
  { name: 'naive', store: 'naive' },
  { name: 'naive-in-place', store: 'naive-in-place' },
  ...(compare !== undefined ? [{ name: 'file@before', store: 'file', build: compare }] : []),
  { name: 'sqlite', store: 'sqlite' }
]
const median = (values) => { const s = [...values].sort((a, b) => a - b); return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }

async function run (target, size, procs) {
  const data = tempDir()
  const db = openDatabase(data.dir)
  const store = target.store === 'sqlite' ? new SqliteTaskStore(db) : new FileTaskStore(data.dir)
  await store.create(Array.from({ length: size }, (_, i) => ({ id: `t${i}`, type: 'w' })))
  await store.close()
  db.close()
  const workers = Array.from({ length: procs }, (_, i) => {
    const args = [new URL('./drain-worker.js', import.meta.url).pathname, target.store, data.dir, `w${i}`, String(seconds), ...(target.build !== undefined ? [target.build] : [])]
    const child = spawn(process.execPath, [...childExecArgv, ...args, ...(smoke ? ['--smoke'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (c) => { out += c })
    return once(child, 'exit').then(() => JSON.parse(out))
  })
  const results = await Promise.all(workers)
  data.remove()
  const done = results.reduce((n, r) => n + r.done, 0)
  const start = Math.min(...results.filter((r) => r.first !== undefined).map((r) => r.first))
  const end = Math.max(...results.filter((r) => r.last !== undefined).map((r) => r.last))
  return { done, drained: done === size, claimsPerSecond: done / Math.max(0.001, (end - start) / 1000) }
}

const samples = new Map()
for (let round = 1; round <= rounds; round++) {
  for (const size of sizes) {
    for (const procs of processes) {
      for (const target of targets) {
        const r = await run(target, size, procs)
        const key = `${target.name} ${size} ${procs}`
        samples.set(key, [...(samples.get(key) ?? []), r])
        console.log(`round ${round}  ${target.name.padEnd(11)} ${String(size).padStart(6)} tasks  ${procs} proc  ${String(r.done).padStart(6)} claimed${r.drained ? '' : ' (time up)'}  ${r.claimsPerSecond.toFixed(0).padStart(6)} claims/s`)
      }
    }
  }
}

const rows = []
const rate = (name, size, procs) => median(samples.get(`${name} ${size} ${procs}`).map((r) => r.claimsPerSecond))
console.log(`\nmedian claims/s over ${rounds} round(s)\n${'tasks'.padStart(6)} procs ${targets.map((t) => t.name.padStart(15)).join('')}   file/naive  /in-place${compare !== undefined ? '  file/before' : ''}  sqlite/file`)
for (const size of sizes) {
  for (const procs of processes) {
    const row = { tasks: size, processes: procs, claimsPerSecond: Object.fromEntries(targets.map((t) => [t.name, rate(t.name, size, procs)])) }
    row.fileOverNaive = row.claimsPerSecond.file / row.claimsPerSecond.naive
    row.fileOverNaiveInPlace = row.claimsPerSecond.file / row.claimsPerSecond['naive-in-place']
    if (compare !== undefined) row.fileOverBefore = row.claimsPerSecond.file / row.claimsPerSecond['file@before']
    row.sqliteOverFile = row.claimsPerSecond.sqlite / row.claimsPerSecond.file
    rows.push(row)
    console.log(`${String(size).padStart(6)} ${String(procs).padStart(5)} ${targets.map((t) => row.claimsPerSecond[t.name].toFixed(0).padStart(15)).join('')}   ${row.fileOverNaive.toFixed(2).padStart(9)}x${row.fileOverNaiveInPlace.toFixed(2).padStart(9)}x${compare !== undefined ? `${row.fileOverBefore.toFixed(2).padStart(11)}x` : ''}  ${row.sqliteOverFile.toFixed(1).padStart(10)}x`)
  }
}
saveResult('claims', { settings: { seconds, rounds, sizes, processes, compare }, rows, samples: Object.fromEntries(samples) })
