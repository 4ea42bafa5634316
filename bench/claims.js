// Claims per second (claim + complete per task) of the task stores at 100, 1 000 and 10 000 tasks,
// with 1 and 4 worker processes (drain-worker.js): the file store, the SQLite store (one DATA_DIR),
// the PostgreSQL store (one database) and its floor (`pg floor`: the same two writes a task costs,
// as bare statements on a bare table, drain-worker.js), and two naive baselines (a read-modify-write of the same JSON
// under proper-lockfile: `naive` as safe as the file store, `naive-in-place` without temp file or
// fsync, see drain-worker.js); with --compare=<dir>, also the file store of another build. Each
// configuration runs until the graph is drained or --seconds pass; the targets take turns within
// each round, and the table gives medians over --rounds, with the CPU each claim cost the workers
// and, on PostgreSQL, the database server.
// PostgreSQL: PG_TEST_URL or DATABASE_URL (a role that may create a database: the bench works in a
// database of its own, dropped at the end), else a throwaway server (scripts/pg-cluster.ts), else
// the PostgreSQL target is skipped, saying so. The throwaway server runs with fsync and synchronous
// commit on (bench/common.js DURABLE_POSTGRES), as production does.
// Run: npm run build && node bench/claims.js [--compare=/tmp/before] [--sizes=100,1000,10000] [--processes=1,4] [--targets=postgres,pg floor]
// --compare: the file store (and the PostgreSQL store, when there is a server) of another build, as `<name>@before`
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { arg, childExecArgv, load, postgresCpuMs, saveResult, smoke, startDurablePostgres, tempDir } from './common.js'

const { openDatabase } = await load('storage/sqlite/database')
const { FileTaskStore } = await load('storage/file/tasks')
const { SqliteTaskStore } = await load('storage/sqlite/tasks')
const { PgTaskStore } = await load('storage/postgres/tasks')
const { openPostgres } = await load('storage/postgres/database')
const seconds = arg('seconds', 5, 2)
const rounds = arg('rounds', 3, 1)
const compareFlag = process.argv.find((a) => a.startsWith('--compare='))
const compare = compareFlag === undefined ? undefined : resolve(compareFlag.slice('--compare='.length))
/** `--name=a,b` as numbers, else `fallback`. */
const list = (name, fallback) => {
  const given = process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
  return given === undefined ? fallback : given.split(',').map(Number)
}
/** Tasks each worker claims and completes before its clock starts: its code compiled, its connection and statements ready. */
const WARMUP = smoke ? 2 : 50
/** --targets=a,b: only these targets (names as in the table) */
const only = process.argv.find((a) => a.startsWith('--targets='))?.slice(10).split(',')
const sizes = smoke ? [20] : list('sizes', [100, 1000, 10000])
const processes = smoke ? [2] : list('processes', [1, 4])
const median = (values) => { const s = [...values].sort((a, b) => a - b); return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }

/**
 * The PostgreSQL server to measure, and a database of its own on it: `PG_TEST_URL` or `DATABASE_URL`,
 * else a throwaway server with durable settings (fsync and synchronous commit on, as in production); undefined when there is none. `postmaster` (the server's pid) only when
 * the bench started the server: a shared server's CPU is not only ours.
 */
async function postgresServer () {
  let url = process.env.PG_TEST_URL || process.env.DATABASE_URL || undefined
  let stop = () => {}
  let postmaster
  if (url === undefined) {
    const started = await startDurablePostgres()
    if (started === undefined) return undefined
    ;({ url, stop, postmaster } = started)
  }
  const name = `agent_host_bench_${randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  const u = new URL(url)
  u.pathname = `/${name}`
  const pool = await openPostgres(u.toString(), { max: 2, applicationName: 'bench-claims' })
  return {
    url: u.toString(),
    pool,
    postmaster,
    close: async () => {
      await pool.end()
      await admin.query(`DROP DATABASE ${name} WITH (FORCE)`)
      await admin.end()
      stop()
    }
  }
}

const postgres = await postgresServer()
const targets = [
  { name: 'file', store: 'file' },
  { name: 'naive', store: 'naive' },
  { name: 'naive-in-place', store: 'naive-in-place' },
  ...(compare !== undefined ? [{ name: 'file@before', store: 'file', build: compare }] : []),
  { name: 'sqlite', store: 'sqlite' },
  ...(postgres !== undefined ? [{ name: 'postgres', store: 'postgres' }, { name: 'pg floor', store: 'pg-floor' }] : []),
  ...(postgres !== undefined && compare !== undefined ? [{ name: 'postgres@before', store: 'postgres', build: compare }] : [])
].filter((t) => only === undefined || only.includes(t.name))

async function run (target, size, procs) {
  const data = tempDir()
  // and WARMUP tasks of another type per worker, drained before its clock starts (steady state, not start-up, is measured)
  const tasks = [...Array.from({ length: size }, (_, i) => ({ id: `t${i}`, type: 'w' })), ...Array.from({ length: WARMUP * procs }, (_, i) => ({ id: `warm${i}`, type: 'warm' }))]
  let location = data.dir
  if (target.store === 'postgres') {
    await postgres.pool.query('TRUNCATE tasks')
    await new PgTaskStore(postgres.pool).create(tasks)
    location = postgres.url
  } else if (target.store === 'pg-floor') {
    await postgres.pool.query('CREATE TABLE IF NOT EXISTS floor_tasks (id text PRIMARY KEY, type text NOT NULL, status text NOT NULL, owner text)')
    await postgres.pool.query('CREATE INDEX IF NOT EXISTS floor_tasks_claim ON floor_tasks (type, status, id)')
    await postgres.pool.query('TRUNCATE floor_tasks')
    await postgres.pool.query("INSERT INTO floor_tasks (id, type, status) SELECT unnest($1::text[]), unnest($2::text[]), 'PENDING'", [tasks.map((t) => t.id), tasks.map((t) => t.type)])
    location = postgres.url
  } else {
    const db = openDatabase(data.dir)
    const store = target.store === 'sqlite' ? new SqliteTaskStore(db) : new FileTaskStore(data.dir)
    await store.create(tasks)
    await store.close()
    db.close()
  }
  const serverBefore = (target.store === 'postgres' || target.store === 'pg-floor') && postgres.postmaster !== undefined ? postgresCpuMs(postgres.postmaster) : undefined
  const workers = Array.from({ length: procs }, (_, i) => {
    const args = [new URL('./drain-worker.js', import.meta.url).pathname, target.store, location, `w${i}`, String(seconds), String(WARMUP), ...(target.build !== undefined ? [target.build] : [])]
    const child = spawn(process.execPath, [...childExecArgv, ...args, ...(smoke ? ['--smoke'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (c) => { out += c })
    return once(child, 'exit').then(() => JSON.parse(out))
  })
  const results = await Promise.all(workers)
  let serverMs
  if (serverBefore !== undefined) {
    // the workers' connections are gone once their backends have exited and been reaped: their CPU is then the postmaster's children's
    for (let waits = 0; waits < 500; waits++) {
      const { rows } = await postgres.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'bench-claims-w%'")
      if (rows[0].n === 0 && results.every((r) => r.backend === undefined || !existsSync(`/proc/${r.backend}`))) break
      await sleep(10)
    }
    serverMs = postgresCpuMs(postgres.postmaster) - serverBefore
  }
  data.remove()
  const done = results.reduce((n, r) => n + r.done, 0)
  const start = Math.min(...results.filter((r) => r.first !== undefined).map((r) => r.first))
  const end = Math.max(...results.filter((r) => r.last !== undefined).map((r) => r.last))
  const perClaim = (ms) => ms === undefined || done === 0 ? undefined : ms * 1000 / done
  return {
    done,
    drained: done === size,
    claimsPerSecond: done / Math.max(0.001, (end - start) / 1000),
    workersCpuUsPerClaim: perClaim(results.reduce((n, r) => n + r.cpuMs, 0)),
    backendsCpuUsPerClaim: target.store !== 'file' && target.store !== 'sqlite' && !target.store.startsWith('naive') && results.every((r) => r.backendCpuMs !== undefined) ? perClaim(results.reduce((n, r) => n + r.backendCpuMs, 0)) : undefined,
    serverCpuUsPerClaim: perClaim(serverMs)
  }
}

const samples = new Map()
const us = (v) => v === undefined ? '-' : v.toFixed(0)
for (let round = 1; round <= rounds; round++) {
  for (const size of sizes) {
    for (const procs of processes) {
      for (const target of targets) {
        const r = await run(target, size, procs)
        const key = `${target.name} ${size} ${procs}`
        samples.set(key, [...(samples.get(key) ?? []), r])
        const cpu = `cpu/claim: workers ${us(r.workersCpuUsPerClaim)} µs${target.store.startsWith('p') ? `, db backends ${us(r.backendsCpuUsPerClaim)} µs, db server ${us(r.serverCpuUsPerClaim)} µs` : ''}`
        console.log(`round ${round}  ${target.name.padEnd(14)} ${String(size).padStart(6)} tasks  ${procs} proc  ${String(r.done).padStart(6)} claimed${r.drained ? '' : ' (time up)'}  ${r.claimsPerSecond.toFixed(0).padStart(6)} claims/s  ${cpu}`)
      }
    }
  }
}
await postgres?.close()

const rows = []
const medianOf = (name, size, procs, field) => {
  const values = samples.get(`${name} ${size} ${procs}`)?.map((r) => r[field]).filter((v) => v !== undefined) ?? []
  return values.length === 0 ? undefined : median(values)
}
const ratio = (a, b) => a === undefined || b === undefined ? '-' : `${(a / b).toFixed(2)}x`
console.log(`\nmedian claims/s over ${rounds} round(s)\n${'tasks'.padStart(6)} procs ${targets.map((t) => t.name.padStart(15)).join('')}   file/naive  /in-place${compare !== undefined ? '  file/before' : ''}  sqlite/file  pg/sqlite  pg/floor`)
for (const size of sizes) {
  for (const procs of processes) {
    const row = { tasks: size, processes: procs, claimsPerSecond: Object.fromEntries(targets.map((t) => [t.name, medianOf(t.name, size, procs, 'claimsPerSecond')])) }
    row.fileOverNaive = row.claimsPerSecond.file / row.claimsPerSecond.naive
    row.fileOverNaiveInPlace = row.claimsPerSecond.file / row.claimsPerSecond['naive-in-place']
    if (compare !== undefined) row.fileOverBefore = row.claimsPerSecond.file / row.claimsPerSecond['file@before']
    row.sqliteOverFile = row.claimsPerSecond.sqlite / row.claimsPerSecond.file
    if (postgres !== undefined) {
      row.postgresOverSqlite = row.claimsPerSecond.postgres / row.claimsPerSecond.sqlite
      row.postgresOverFloor = row.claimsPerSecond.postgres / row.claimsPerSecond['pg floor']
    }
    row.cpuUsPerClaim = {
      sqlite: { workers: medianOf('sqlite', size, procs, 'workersCpuUsPerClaim') },
      ...(postgres !== undefined
        ? {
            postgres: {
              workers: medianOf('postgres', size, procs, 'workersCpuUsPerClaim'),
              dbBackends: medianOf('postgres', size, procs, 'backendsCpuUsPerClaim'),
              dbServer: medianOf('postgres', size, procs, 'serverCpuUsPerClaim')
            }
          }
        : {})
    }
    rows.push(row)
    console.log(`${String(size).padStart(6)} ${String(procs).padStart(5)} ${targets.map((t) => row.claimsPerSecond[t.name].toFixed(0).padStart(15)).join('')}   ${row.fileOverNaive.toFixed(2).padStart(9)}x${row.fileOverNaiveInPlace.toFixed(2).padStart(9)}x${compare !== undefined ? `${row.fileOverBefore.toFixed(2).padStart(11)}x` : ''}  ${row.sqliteOverFile.toFixed(1).padStart(10)}x  ${ratio(row.claimsPerSecond.postgres, row.claimsPerSecond.sqlite).padStart(8)}  ${ratio(row.claimsPerSecond.postgres, row.claimsPerSecond['pg floor']).padStart(8)}`)
  }
}
console.log('\nmedian CPU per claim (µs): the workers (all their processes), and on PostgreSQL the database: the backends serving the workers\n(/proc/<backend pid>/stat, read by each worker before it disconnects) and the whole server (postmaster and every child, /proc; only on a server the bench started)')
console.log(`${'tasks'.padStart(6)} procs ${'sqlite workers'.padStart(15)}${'pg workers'.padStart(12)}${'pg backends'.padStart(13)}${'pg server'.padStart(11)}${'pg total'.padStart(10)}`)
for (const row of rows) {
  const p = row.cpuUsPerClaim.postgres
  const total = p?.workers !== undefined && p?.dbServer !== undefined ? p.workers + p.dbServer : undefined
  console.log(`${String(row.tasks).padStart(6)} ${String(row.processes).padStart(5)} ${us(row.cpuUsPerClaim.sqlite.workers).padStart(15)}${us(p?.workers).padStart(12)}${us(p?.dbBackends).padStart(13)}${us(p?.dbServer).padStart(11)}${us(total).padStart(10)}`)
}
saveResult('claims', { settings: { seconds, rounds, sizes, processes, compare, postgres: postgres === undefined ? 'skipped: no server' : postgres.postmaster !== undefined ? 'throwaway server' : 'given server (PG_TEST_URL/DATABASE_URL)' }, rows, samples: Object.fromEntries(samples) })
