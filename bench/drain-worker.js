// One worker process of bench/claims.js: claim and complete `warmup` tasks of type `warm` (off the
// clock), then `w` tasks until none is left or the time is up; print how many and when (ms since epoch) the first claim and last completion were.
// Stores: `file`, `sqlite` and `postgres` (this build's, or the build given as the fifth argument),
// `pg-floor` (PostgreSQL's floor: the same writes as bare statements, see pgFloor), and two
// naive ones, what a straightforward implementation does under proper-lockfile: lock, read, parse,
// change, stringify, write, unlock. `naive` writes as safely as the file store (a temporary file,
// fsynced, renamed over the graph: a reader never sees half a file, a power cut never empties it);
// `naive-in-place` writes the file in place without fsync (faster, and neither holds).
import { readFileSync } from 'node:fs'
import { open, readFile, rename, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import lockfile from 'proper-lockfile'
import { load } from './common.js'

const [kind, dataDir, owner, seconds, warmup, build] = process.argv.slice(2).filter((a) => !a.startsWith('--'))
// a build from before issue 29 has its modules at their old paths (newest first)
const loadEither = async (path, ...before) => {
  for (const older of before) {
    try { return await load(path, build) } catch { path = older }
  }
  return await load(path, build)
}
const { openDatabase } = await loadEither('storage/sqlite/database', 'storage/database')
const { FileTaskStore, TASK_GRAPH_FILE } = await loadEither('storage/file/tasks', 'storage/file/file-task-store', 'runtime/file-task-store')
const { SqliteTaskStore } = await loadEither('storage/sqlite/tasks', 'storage/sqlite/sqlite-task-store', 'runtime/sqlite-task-store')
// only asked for when used: a build given to compare may predate them
const postgres = kind === 'postgres' || kind === 'pg-floor' ? { ...await loadEither('storage/postgres/tasks', 'storage/postgres/pg-task-store', 'runtime/pg-task-store'), ...await load('storage/postgres/database', build) } : undefined
const graph = await loadEither('storage/tasks/task-graph', 'runtime/task-graph')

/** A naive store: lock, read, parse, change, stringify, write (`safely`: temp file, fsync, rename), unlock. */
function naiveStore (file, safely) {
  // a tuned wait, not a strawman: short randomised retries, as the file store's own lock waits (up
  // to ~50 s; not more, as the retry module computes every timeout up front: 100 000 cost 8 ms a lock)
  const options = { stale: 5000, retries: { retries: 1000, factor: 1.5, minTimeout: 1, maxTimeout: 50, randomize: true } }
  const rmw = async (change) => {
    const release = await lockfile.lock(file, options)
    try {
      const data = JSON.parse(await readFile(file, 'utf8'))
      const { result, write } = change(data, new Date())
      if (write && !safely) await writeFile(file, JSON.stringify(data))
      if (write && safely) {
        const tmp = `${file}.${process.pid}.tmp`
        const handle = await open(tmp, 'w')
        try {
          await handle.writeFile(JSON.stringify(data))
          await handle.sync()
        } finally {
          await handle.close()
        }
        await rename(tmp, file)
      }
      return result
    } finally {
      await release()
    }
  }
  return {
    claim: async (type, who, leaseMs) => await rmw((data, now) => {
      const status = new Map(data.tasks.map((t) => [t.id, t.status]))
      const chosen = data.tasks.filter((t) => graph.claimable(t, type, now, (id) => status.get(id))).sort(graph.claimOrder)[0]
      if (chosen === undefined) return { result: undefined, write: false }
      const claimed = graph.claimNode(chosen, who, leaseMs, now)
      data.tasks[data.tasks.findIndex((t) => t.id === chosen.id)] = claimed
      return { result: claimed, write: true }
    }),
    complete: async (id, token, outputs) => await rmw((data, now) => {
      const index = data.tasks.findIndex((t) => t.id === id)
      data.tasks[index] = graph.completeNode(data.tasks[index], token, outputs, now)
      return { result: data.tasks[index], write: true }
    })
  }
}

/**
 * PostgreSQL's floor: the two writes a claim and a completion make, as bare statements on a table of
 * its own (`floor_tasks`: id, type, status, owner; claims.js fills it), the claim not waiting for
 * the disk (as the store's does not) and the completion durable: no JSON node, rule or index.
 */
function pgFloor (pool) {
  return {
    claim: async (type, who) => {
      const { rows: [row] } = await pool.query({
        name: 'floor-claim',
        text: `UPDATE floor_tasks SET status = 'RUNNING', owner = $1 WHERE id = (
          SELECT id FROM floor_tasks, (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode
          WHERE type = $2 AND status = 'PENDING' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id`,
        values: [who, type]
      })
      return row === undefined ? undefined : { id: row.id, attempt: 1 }
    },
    complete: async (id) => { await pool.query({ name: 'floor-complete', text: "UPDATE floor_tasks SET status = 'DONE' WHERE id = $1", values: [id] }) }
  }
}

const db = kind === 'sqlite' ? openDatabase(dataDir) : undefined
// one connection: a worker makes one call at a time
const pool = postgres !== undefined ? await postgres.openPostgres(dataDir, { max: 1, applicationName: `bench-claims-${owner}` }) : undefined
const store = db !== undefined
  ? new SqliteTaskStore(db)
  : pool !== undefined
    ? kind === 'pg-floor' ? pgFloor(pool) : new postgres.PgTaskStore(pool)
    : kind.startsWith('naive') ? naiveStore(join(dataDir, TASK_GRAPH_FILE), kind === 'naive') : new FileTaskStore(dataDir)
// on PostgreSQL, the CPU its server process (the backend of our one connection) spends for us,
// from /proc (USER_HZ 100); undefined when the server is on another machine
const backend = pool !== undefined ? (await pool.query('SELECT pg_backend_pid() AS pid')).rows[0].pid : undefined
const backendCpuMs = () => {
  try {
    const fields = readFileSync(`/proc/${backend}/stat`, 'utf8').split(') ')[1].split(' ')
    return (Number(fields[11]) + Number(fields[12])) * 10
  } catch {
    return undefined
  }
}
// warm up on tasks of their own, off the clock and out of the CPU figures
for (let i = 0; i < Number(warmup); i++) {
  const task = await store.claim('warm', owner, 60_000)
  if (task === undefined) break
  await store.complete(task.id, { owner, attempt: task.attempt }, {})
}
const backendBefore = backend !== undefined ? backendCpuMs() : undefined
const deadline = Date.now() + Number(seconds) * 1000
let first
let last
let done = 0
const cpu = process.cpuUsage()
while (Date.now() < deadline) {
  const task = await store.claim('w', owner, 60_000)
  if (task === undefined) break
  first ??= Date.now()
  await store.complete(task.id, { owner, attempt: task.attempt }, {})
  last = Date.now()
  done++
}
const used = process.cpuUsage(cpu)
const backendAfter = backendBefore !== undefined ? backendCpuMs() : undefined
await store.close?.()
db?.close()
await pool?.end()
process.stdout.write(JSON.stringify({ done, first, last, cpuMs: (used.user + used.system) / 1000, backend, backendCpuMs: backendAfter === undefined ? undefined : backendAfter - backendBefore }) + '\n')
