// How long `npm run dev` takes to serve again after a saved agent file (issue 31): the time from
// the save (the file's mtime set to now, as an editor does) until `GET /health` answers from the
// new process (another `instance_id`), how long nothing answered in between, how many polls (every
// 20 ms) were refused a connection (ECONNREFUSED; none since scripts/dev.mjs: the old process
// answers until the new one listens) or failed otherwise (a reset connection), and the
// CPU the new process used until it answered (/proc: on a shared machine the wall times move with
// the load, the CPU much less: quote its ratio).
// Each round starts `npm run dev` afresh (a fresh DATA_DIR, the bundled agents, the default
// settings: what a reader of the README runs) and saves `agents/echo/index.ts` `--restarts` times.
// It runs in a folder of its own that links the checkout's files and holds a copy of its agents: a
// save there restarts no other watcher of the checkout's `agents/` (the dev-mode test's, under npm test).
// With `--compare=<dir>` (a checkout of another commit, with its node_modules) both are measured
// in the same rounds, one after the other.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { cpSync, existsSync, readFileSync, symlinkSync, utimesSync } from 'node:fs'
import { createServer } from 'node:net'
import { loadavg } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { arg, childrenOf, cpuMs, saveResult, smoke, tempDir } from './common.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const rounds = arg('rounds', 3, 1)
const restarts = arg('restarts', 3, 1)
const compare = process.argv.find((a) => a.startsWith('--compare='))?.slice('--compare='.length)
const targets = [{ name: 'this', dir: ROOT }, ...(compare === undefined ? [] : [{ name: 'compare', dir: resolve(compare) }])]
const POLL_MS = 20

/** This process's environment without a test harness's hooks (the smoke test runs us under tap). */
function devEnv (extra) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'NODE_OPTIONS' && name !== 'NODE_V8_COVERAGE' && !name.startsWith('_TAPJS') && !name.startsWith('TAP')))
  return { ...env, _TAPJS_PROCESSINFO_COVERAGE_: '0', FORCE_COLOR: '0', ...extra }
}

async function freePort () {
  return await new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => { resolve(port) })
    })
  })
}

/** The server's instance id, `refused` (ECONNREFUSED), or `failed` (a reset connection, another answer). */
async function instance (port) {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`)
    return res.ok ? (await res.json()).instance_id : 'failed'
  } catch (err) {
    return err.cause?.code === 'ECONNREFUSED' ? 'refused' : 'failed'
  }
}
const answered = (id) => id !== undefined && id !== 'refused' && id !== 'failed'

/** The newest process under `pid` (npm → sh → the watcher, scripts/dev.mjs or tsx's → the server it started last). */
function newestDescendant (pid) {
  const all = []
  const walk = (p) => { for (const child of childrenOf(p)) { all.push(child); walk(child) } }
  walk(pid)
  const started = (p) => { try { return Number(readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1].split(' ')[19]) } catch { return -1 } }
  return all.sort((a, b) => started(b) - started(a) || b - a)[0]
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** One round of a target: `npm run dev` started, then `restarts` saves, each timed until the new process answers. */
/** A folder that runs `target`'s `npm run dev` on a copy of its agents: its files linked, `agents/` copied. */
function project (target, dir) {
  for (const entry of ['package.json', 'tsconfig.json', 'src', 'scripts', 'test', 'client', 'node_modules']) {
    if (existsSync(join(target, entry))) symlinkSync(join(target, entry), join(dir, entry))
  }
  cpSync(join(target, 'agents'), join(dir, 'agents'), { recursive: true })
  return dir
}

async function round (target) {
  const data = tempDir()
  const cwd = project(target.dir, data.dir)
  const port = await freePort()
  const started = performance.now()
  const dev = spawn('npm', ['run', 'dev'], { cwd, env: devEnv({ PORT: String(port), DATA_DIR: join(data.dir, 'data'), AGENTS_DIR: join(cwd, 'agents') }), stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  let output = ''
  dev.stdout.on('data', (c) => { output += c })
  dev.stderr.on('data', (c) => { output += c })
  const exited = once(dev, 'exit')
  const result = { first_start_ms: 0, restart_ms: [], refused_ms: [], refused_polls: [], failed_polls: [], polls: [], restart_cpu_ms: [], output: '' }
  try {
    const deadline = Date.now() + 120_000
    let id
    while (!answered(id = await instance(port))) {
      if (dev.exitCode !== null || Date.now() > deadline) throw new Error(`npm run dev did not answer in ${target.dir}:\n${output}`)
      await sleep(POLL_MS)
    }
    result.first_start_ms = performance.now() - started
    for (let i = 0; i < restarts; i++) {
      await sleep(1000) // the boot's last log lines, as a developer reads them before the next save
      const file = join(cwd, 'agents/echo/index.ts')
      const saved = performance.now()
      utimesSync(file, new Date(), new Date())
      let lastOld = saved
      let refused = 0
      let failed = 0
      let polls = 0
      let next
      for (;;) {
        next = await instance(port)
        polls++
        if (answered(next) && next !== id) break
        if (next === id) lastOld = performance.now()
        else if (next === 'refused') refused++
        else failed++
        if (performance.now() - saved > 120_000) throw new Error(`no restart after a save in ${target.dir}:\n${output}`)
        await sleep(POLL_MS)
      }
      const now = performance.now()
      const server = newestDescendant(dev.pid)
      result.restart_cpu_ms.push(server === undefined ? NaN : cpuMs(server) ?? NaN)
      result.restart_ms.push(now - saved)
      result.refused_ms.push(now - lastOld)
      result.refused_polls.push(refused)
      result.failed_polls.push(failed)
      result.polls.push(polls)
      id = next
    }
  } finally {
    try { process.kill(-dev.pid, 'SIGTERM') } catch {}
    await exited
    // npm exits before the server it started has closed its database: wait for the whole group
    for (;;) {
      try { process.kill(-dev.pid, 0) } catch { break }
      await sleep(POLL_MS)
    }
    data.remove()
  }
  result.output = output
  return result
}

const sum = (values) => values.reduce((a, b) => a + b, 0)
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

const measured = Object.fromEntries(targets.map((t) => [t.name, { dir: t.dir, first_start_ms: [], restart_ms: [], refused_ms: [], refused_polls: [], failed_polls: [], polls: [], restart_cpu_ms: [] }]))
let lastOutput = ''
for (let r = 0; r < rounds; r++) {
  for (const target of targets) {
    const res = await round(target)
    const m = measured[target.name]
    m.first_start_ms.push(Math.round(res.first_start_ms))
    m.restart_ms.push(...res.restart_ms.map(Math.round))
    m.refused_ms.push(...res.refused_ms.map(Math.round))
    m.refused_polls.push(...res.refused_polls)
    m.failed_polls.push(...res.failed_polls)
    m.polls.push(...res.polls)
    m.restart_cpu_ms.push(...res.restart_cpu_ms)
    lastOutput = res.output
    console.log(`round ${r + 1} ${target.name}: first start ${Math.round(res.first_start_ms)} ms, restarts ${res.restart_ms.map((v) => Math.round(v)).join(', ')} ms (no answer for ${res.refused_ms.map((v) => Math.round(v)).join(', ')} ms; of ${res.polls.join(', ')} polls ${res.refused_polls.join(', ')} refused, ${res.failed_polls.join(', ')} failed otherwise; CPU of the new server ${res.restart_cpu_ms.join(', ')} ms; load average ${loadavg()[0].toFixed(1)})`)
  }
}
if (process.argv.includes('--verbose')) console.log(lastOutput)

console.log('\n| target | first start (median) | save → answer (median, min-max) | no answer (median) | polls: refused / failed otherwise / all (all restarts) | CPU of the new server until it answered (median) |')
console.log('|---|---|---|---|---|---|')
const summary = {}
for (const [name, m] of Object.entries(measured)) {
  summary[name] = { dir: m.dir, first_start_ms: median(m.first_start_ms), restart_ms: median(m.restart_ms), restart_min_ms: Math.min(...m.restart_ms), restart_max_ms: Math.max(...m.restart_ms), refused_ms: median(m.refused_ms), refused_polls: sum(m.refused_polls), failed_polls: sum(m.failed_polls), polls: sum(m.polls), restart_cpu_ms: median(m.restart_cpu_ms), samples: m }
  console.log(`| ${name} | ${summary[name].first_start_ms} ms | **${summary[name].restart_ms} ms** (${summary[name].restart_min_ms}-${summary[name].restart_max_ms}) | ${summary[name].refused_ms} ms | ${summary[name].refused_polls} / ${summary[name].failed_polls} / ${summary[name].polls} | ${summary[name].restart_cpu_ms} ms |`)
}
if (summary.compare !== undefined) console.log(`\nthis / compare: save → answer ${(summary.this.restart_ms / summary.compare.restart_ms).toFixed(2)}×, CPU ${(summary.this.restart_cpu_ms / summary.compare.restart_cpu_ms).toFixed(2)}×`)
if (smoke) console.log('(smoke: one round, one restart; no timing claims)')
saveResult('dev-restart', { rounds, restarts, targets: summary })
