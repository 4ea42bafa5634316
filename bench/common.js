// Shared by the benchmarks: a throwaway DATA_DIR, the result file, the server's modules, smoke mode,
// a throwaway PostgreSQL server and the CPU of processes.
import { execSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs'
import { tmpdir, cpus, totalmem } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { tsImport } from 'tsx/esm/api'

/** `--smoke`: tiny sizes, the TypeScript sources, no timing claims (npm test runs every bench so). */
export const smoke = process.argv.includes('--smoke')

const ROOT = fileURLToPath(new URL('..', import.meta.url))

/**
 * Import one of the server's modules (`'app'`, `'storage/database'`, ...) from `build` (a checkout,
 * default this one): its `dist/` (run `npm run build` first), or under `--smoke` its `src/`
 * through the TypeScript loader the test runner started us with.
 */
export async function load (path, build = ROOT) {
  return await import(pathToFileURL(resolve(build, smoke ? `src/${path}.ts` : `dist/src/${path}.js`)).href)
}

/** Node flags a child process needs to run the same way (the TypeScript loader under --smoke). */
export const childExecArgv = smoke ? process.execArgv : []

export function tempDir () {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-bench-'))
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) }
}

export function mean (values) {
  return values.reduce((a, b) => a + b, 0) / values.length
}

/** The commit this checkout is at (and whether it has uncommitted changes), for result files. */
function commit () {
  try {
    const head = execSync('git rev-parse --short HEAD', { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim()
    const dirty = execSync('git status --porcelain -- src', { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim() !== ''
    return dirty ? `${head}+changes` : head
  } catch {
    return 'unknown'
  }
}

/** Where results are written and read: bench/results/, or BENCH_RESULTS_DIR (the smoke test's temporary one). */
export const resultsDir = () => process.env.BENCH_RESULTS_DIR ?? fileURLToPath(new URL('./results/', import.meta.url))

/**
 * Write `result` with the machine it ran on to `<dir>/<name>-<time>.json` and `<name>-latest.json`,
 * and say where. `<dir>` is bench/results/, or BENCH_RESULTS_DIR (the smoke test's temporary one).
 */
export function saveResult (name, result) {
  const dir = resultsDir()
  mkdirSync(dir, { recursive: true })
  const stamp = new Date().toISOString().replace(/[:.]/g, '-')
  const machine = { node: process.version, cpus: cpus().length, cpu_model: cpus()[0]?.model, memory_gib: Math.round(totalmem() / 2 ** 30), platform: process.platform }
  const body = JSON.stringify({ ...machine, commit: commit(), at: new Date().toISOString(), smoke, ...result }, null, 2) + '\n'
  writeFileSync(join(dir, `${name}-${stamp}.json`), body)
  writeFileSync(join(dir, `${name}-latest.json`), body)
  console.log(`\nwritten to ${join(dir, `${name}-${stamp}.json`)} (and ${name}-latest.json)`)
  if (smoke) console.log(`smoke: ${name} ran end to end and wrote its result`)
}

/** A numeric option: `--name=<n>`, else BENCH_<NAME>, else `fallback` (`smokeValue` under --smoke). */
export function arg (name, fallback, smokeValue = fallback) {
  const flag = process.argv.find((a) => a.startsWith(`--${name}=`))
  const value = flag?.slice(name.length + 3) ?? process.env[`BENCH_${name.toUpperCase()}`]
  return value === undefined ? (smoke ? smokeValue : fallback) : Number(value)
}

/**
 * Start a server script of the benchmarks (`./assist-server.js`, `./raw-server.js`, ...) in its own
 * process; resolves once it printed its `{"url": ...}` line, with the url, its pid and a stop().
 */
export async function startServer (script, args = [], env = process.env) {
  const child = spawn(process.execPath, [...childExecArgv, fileURLToPath(new URL(script, import.meta.url)), ...args], { stdio: ['ignore', 'pipe', 'inherit'], env })
  let out = ''
  child.stdout.on('data', (c) => { out += c })
  while (!out.includes('\n')) {
    if (child.exitCode !== null) throw new Error(`${script} ${args.join(' ')} exited`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return { url: JSON.parse(out).url, pid: child.pid, stop: async () => { child.kill('SIGTERM'); await once(child, 'exit') } }
}

/** What a production PostgreSQL runs with: every commit flushed to disk before it is acknowledged. */
export const DURABLE_POSTGRES = { fsync: 'on', synchronous_commit: 'on', full_page_writes: 'on' }

/** CPU (ms) a process has used: its own, and with `withChildren` its reaped children's; undefined once it is gone (/proc/<pid>/stat, USER_HZ 100). */
export function cpuMs (pid, withChildren = false) {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
    return (Number(fields[11]) + Number(fields[12]) + (withChildren ? Number(fields[13]) + Number(fields[14]) : 0)) * 10
  } catch {
    return undefined
  }
}

/** The processes whose parent is `pid`. */
export function childrenOf (pid) {
  return readdirSync('/proc').filter((f) => /^\d+$/.test(f)).filter((f) => {
    try {
      return readFileSync(`/proc/${f}/stat`, 'utf8').split(') ')[1].split(' ')[1] === String(pid)
    } catch {
      return false
    }
  }).map(Number)
}

/**
 * The PostgreSQL server a benchmark measures: the one `--pg-url=` names (its CPU not measured), or
 * a throwaway one with durable settings; undefined, saying so, when there is neither.
 */
export async function benchPostgres () {
  const givenUrl = process.argv.find((a) => a.startsWith('--pg-url='))?.slice('--pg-url='.length)
  if (givenUrl !== undefined) return { url: givenUrl, postmaster: undefined, about: 'given server (--pg-url), its CPU not measured', stop: () => {} }
  return await startDurablePostgres()
}

/**
 * A throwaway PostgreSQL server (scripts/pg-cluster.ts) with {@link DURABLE_POSTGRES} settings, for a
 * bench to measure: its superuser `url`, its `postmaster` pid (to read its CPU with
 * {@link postgresCpuMs}), `about` it, and `stop`; undefined, saying so, when the server binaries
 * are missing.
 */
export async function startDurablePostgres () {
  const { serverBinaries, startCluster } = await tsImport('../scripts/pg-cluster.ts', import.meta.url)
  if (serverBinaries() === undefined) {
    console.log('postgres: SKIPPED, no PostgreSQL server binaries (apt-get install -y postgresql, or set PG_BIN, or give a server\'s URL)')
    return undefined
  }
  // on a disk: its commits are flushed (fsync on), as a deployment's are
  const cluster = await startCluster({ settings: DURABLE_POSTGRES, where: 'disk' })
  process.once('exit', () => { cluster.destroy() })
  return {
    url: cluster.url,
    postmaster: Number(readFileSync(join(cluster.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]),
    about: `throwaway server, ${Object.entries(DURABLE_POSTGRES).map(([k, v]) => `${k}=${v}`).join(' ')}`,
    stop: () => { cluster.destroy() }
  }
}

/**
 * Databases of their own on `postgres` (from {@link benchPostgres}), one for each target a bench
 * measures: `fresh()` makes one and answers its URL, `dropAll()` drops them all and closes the
 * connection. Undefined when there is no server.
 */
export async function benchDatabases (postgres) {
  if (postgres === undefined) return undefined
  const { default: pg } = await import('pg')
  const { randomBytes } = await import('node:crypto')
  const admin = new pg.Client({ connectionString: postgres.url })
  await admin.connect()
  const names = []
  return {
    admin,
    fresh: async () => {
      // a generated name, not input: identifiers cannot be query parameters
      const name = `agent_host_bench_${randomBytes(4).toString('hex')}`
      await admin.query(`CREATE DATABASE ${name}`)
      names.push(name)
      const url = new URL(postgres.url)
      url.pathname = `/${name}`
      return url.toString()
    },
    dropAll: async () => {
      for (const name of names) await admin.query(`DROP DATABASE ${name} WITH (FORCE)`)
      await admin.end()
    }
  }
}

/** The CPU (ms) a whole PostgreSQL server has used so far: the postmaster, every live child (backends, WAL writer, checkpointer, autovacuum) and every reaped one. */
export function postgresCpuMs (postmaster) {
  return cpuMs(postmaster, true) + childrenOf(postmaster).reduce((sum, pid) => sum + (cpuMs(pid, true) ?? 0), 0)
}
