// Claims per second of the two task stores (claim + complete per task), at 100, 1 000 and 10 000
// tasks, with 1 and 4 worker processes on one DATA_DIR. Each configuration runs until the graph is
// drained or --seconds pass (the file store rewrites the whole file per operation, so it slows
// down as the graph grows). Run: npm run build && node bench/claims.js
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { arg, childExecArgv, load, saveResult, smoke, tempDir } from './common.js'

const { openDatabase } = await load('storage/database')
const { FileTaskStore } = await load('runtime/file-task-store')
const { SqliteTaskStore } = await load('runtime/sqlite-task-store')
const seconds = arg('seconds', 10, 2)
const sizes = smoke ? [20] : [100, 1000, 10000]
const processes = smoke ? [2] : [1, 4]
const rows = []

for (const kind of ['file', 'sqlite']) {
  for (const size of sizes) {
    for (const procs of processes) {
      const data = tempDir()
      const db = openDatabase(data.dir)
      const store = kind === 'sqlite' ? new SqliteTaskStore(db) : new FileTaskStore(data.dir)
      await store.create(Array.from({ length: size }, (_, i) => ({ id: `t${i}`, type: 'w' })))
      db.close()
      const workers = Array.from({ length: procs }, (_, i) => {
        const child = spawn(process.execPath, [...childExecArgv, new URL('./drain-worker.js', import.meta.url).pathname, kind, data.dir, `w${i}`, String(seconds), ...(smoke ? ['--smoke'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] })
        let out = ''
        child.stdout.on('data', (c) => { out += c })
        return once(child, 'exit').then(() => JSON.parse(out))
      })
      const results = await Promise.all(workers)
      data.remove()
      const done = results.reduce((n, r) => n + r.done, 0)
      const start = Math.min(...results.filter((r) => r.first !== undefined).map((r) => r.first))
      const end = Math.max(...results.filter((r) => r.last !== undefined).map((r) => r.last))
      const claimsPerSecond = done / Math.max(0.001, (end - start) / 1000)
      rows.push({ store: kind, tasks: size, processes: procs, claimed: done, drained: done === size, claimsPerSecond })
      console.log(`${kind.padEnd(7)} ${String(size).padStart(6)} tasks  ${procs} proc  ${String(done).padStart(6)} claimed${done === size ? '' : ' (time up)'}  ${claimsPerSecond.toFixed(0).padStart(6)} claims/s`)
    }
  }
}
const ratio = (size, procs) => rows.find((r) => r.store === 'sqlite' && r.tasks === size && r.processes === procs).claimsPerSecond /
  rows.find((r) => r.store === 'file' && r.tasks === size && r.processes === procs).claimsPerSecond
console.log(`\nsqlite/file claims/s ratio: ${sizes.map((s) => processes.map((p) => `${s}x${p}p ${ratio(s, p).toFixed(1)}`).join(', ')).join('; ')}`)
saveResult('claims', { settings: { seconds, sizes, processes }, rows })
