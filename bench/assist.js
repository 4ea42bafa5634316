// POST /v1/assist (JSON and SSE, the echo agent, a fresh request id per request) against a bare
// Fastify route validating the same envelope, a bare node:http JSON echo (raw-server.js --echo) and
// the official A2A JS SDK's SendMessage with the same text (a2a-server.js), each server in its own
// process, in interleaved rounds.
// With --compare=<dir> the same two assist targets also run against another build (a checkout with
// its own dist/, "before"), interleaved with this one ("after"): see bench/README.md.
// With --settings=NAME=VALUE[,NAME=VALUE...] (DB_*, SESSION_SEARCH, AUDIT_RUNS: assist-server.js passes
// them on) a third assist server runs with those settings, JSON only, interleaved ("tuned json").
//   npm run build && node bench/assist.js [--duration=5] [--rounds=5] [--connections=50] [--compare=<dir>] [--settings=...] [--smoke]
// --smoke: one 0.25 s round with 2 connections against this checkout's sources, checking only that
// every answer is a 2xx (npm test runs it so the benchmark cannot rot).
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { arg, saveResult, smoke, startServer } from './common.js'

const duration = arg('duration', 5, 0.25)
const rounds = arg('rounds', 5, 1)
const connections = arg('connections', 50, 2)
const compare = process.argv.find((a) => a.startsWith('--compare='))?.slice(10)
const tuned = process.argv.find((a) => a.startsWith('--settings='))?.slice(11)
const tunedEnv = tuned === undefined ? undefined : Object.fromEntries(tuned.split(',').map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]))
const here = fileURLToPath(new URL('..', import.meta.url))
const TICK = 100 // clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux)

/** Start a server script (default bench/assist-server.js for `build` and `target`). */
async function server (build, target, script = './assist-server.js', extra = [], env = process.env) {
  return await startServer(script, [`--build=${build}`, `--target=${target}`, ...(smoke ? ['--smoke'] : []), ...extra], env)
}

/** Bytes the process has caused to be written to storage (`write_bytes` of /proc/<pid>/io; page cache writeback included). */
function diskBytes (pid) {
  return Number(/write_bytes: (\d+)/.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))[1])
}

/** CPU seconds the process has used (user + system), from /proc. */
function cpuSeconds (pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) / TICK
}

const session = randomUUID()
/** About 1 KB: a CAP envelope with a fresh request id and some padding in the query. */
const envelope = () => JSON.stringify({
  request_id: randomUUID(),
  context: {
    session_id: session,
    agent_id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01',
    user: { user_id: 'bench', tier: 'free', locale: 'en-GB' },
    trace: { trace_id: randomUUID(), span_id: randomUUID() },
    permissions: [],
    created_at: new Date().toISOString()
  },
  payload: { session_id: session, payload: { query: 'hello benchmark '.repeat(36) } }
})

async function measure (target) {
  const before = cpuSeconds(target.server.pid)
  const written = diskBytes(target.server.pid)
  const result = await autocannon({
    url: `${target.server.url}${target.path ?? '/v1/assist'}`,
    method: 'POST',
    connections,
    duration,
    headers: { 'content-type': 'application/json', accept: target.accept, ...target.headers },
    requests: [{ setupRequest: (req) => ({ ...req, body: (target.body ?? envelope)() }) }]
  })
  const cpu = cpuSeconds(target.server.pid) - before
  const disk = diskBytes(target.server.pid) - written
  const failed = result.non2xx + result.errors + result.timeouts
  if (failed > 0 || result.requests.total === 0) throw new Error(`${target.name}: ${failed} failed of ${result.requests.total}`)
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, requests: result.requests.total, cpu_us_per_request: cpu / result.requests.total * 1e6, disk_bytes_per_request: disk / result.requests.total }
}

const median = (values) => { const s = [...values].sort((a, b) => a - b); return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }

const builds = compare === undefined ? [['after', here]] : [['after', here], ['before', compare]]
const targets = []
for (const [label, build] of builds) {
  const assist = await server(build, 'assist')
  targets.push({ name: `${label} json`, server: assist, accept: 'application/json' })
  targets.push({ name: `${label} sse`, server: assist, accept: 'text/event-stream' })
}
if (tunedEnv !== undefined) targets.push({ name: 'tuned json', server: await server(here, 'assist', './assist-server.js', [], { ...process.env, ...tunedEnv }), accept: 'application/json' })
const bare = await server(here, 'bare')
targets.push({ name: 'bare route', server: bare, accept: 'application/json' })
targets.push({ name: 'node:http echo', server: await server(here, 'raw', './raw-server.js', ['--echo']), accept: 'application/json' })
// the same text as the envelope's query, as an A2A SendMessage (JSON-RPC, A2A-Version: 1.0)
const sendMessage = () => JSON.stringify({ jsonrpc: '2.0', id: randomUUID(), method: 'SendMessage', params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'hello benchmark '.repeat(36) }] } } })
targets.push({ name: 'a2a SendMessage', server: await server(here, 'a2a', './a2a-server.js'), accept: 'application/json', path: '/', headers: { 'a2a-version': '1.0' }, body: sendMessage })

const results = Object.fromEntries(targets.map((t) => [t.name, []]))
try {
  for (let round = 0; round < rounds; round++) {
    for (const target of targets) results[target.name].push(await measure(target))
  }
} finally {
  await Promise.all([...new Set(targets.map((t) => t.server))].map(async (s) => await s.stop()))
}

const summary = Object.fromEntries(Object.entries(results).map(([name, rs]) => [name, {
  rps: median(rs.map((r) => r.rps)),
  p50: median(rs.map((r) => r.p50)),
  p99: median(rs.map((r) => r.p99)),
  cpu_us_per_request: median(rs.map((r) => r.cpu_us_per_request)),
  disk_bytes_per_request: median(rs.map((r) => r.disk_bytes_per_request))
}]))
console.log('\ntarget            req/s   p50 ms  p99 ms  server CPU µs/request  disk KiB/request   (medians of ' + rounds + ' rounds)')
for (const [name, s] of Object.entries(summary)) console.log(`${name.padEnd(16)} ${s.rps.toFixed(0).padStart(6)} ${String(s.p50).padStart(8)} ${String(s.p99).padStart(7)} ${s.cpu_us_per_request.toFixed(0).padStart(12)} ${(s.disk_bytes_per_request / 1024).toFixed(1).padStart(21)}`)
const ratios = {}
const bareRps = summary['bare route'].rps
for (const [label] of builds) {
  ratios[`${label} json / bare`] = summary[`${label} json`].rps / bareRps
  ratios[`${label} sse / bare`] = summary[`${label} sse`].rps / bareRps
  ratios[`${label} json / a2a SendMessage`] = summary[`${label} json`].rps / summary['a2a SendMessage'].rps
}
ratios['bare route / node:http echo'] = bareRps / summary['node:http echo'].rps
if (tunedEnv !== undefined) {
  ratios['tuned json / after json'] = summary['tuned json'].rps / summary['after json'].rps
  ratios['tuned json CPU per request / after json'] = summary['tuned json'].cpu_us_per_request / summary['after json'].cpu_us_per_request
  ratios['tuned json disk bytes per request / after json'] = summary['tuned json'].disk_bytes_per_request / summary['after json'].disk_bytes_per_request
}
if (compare !== undefined) {
  ratios['json after / before'] = summary['after json'].rps / summary['before json'].rps
  ratios['sse after / before'] = summary['after sse'].rps / summary['before sse'].rps
  ratios['json CPU per request after / before'] = summary['after json'].cpu_us_per_request / summary['before json'].cpu_us_per_request
  ratios['sse CPU per request after / before'] = summary['after sse'].cpu_us_per_request / summary['before sse'].cpu_us_per_request
  ratios['json disk bytes per request after / before'] = summary['after json'].disk_bytes_per_request / summary['before json'].disk_bytes_per_request
}
console.log('')
for (const [name, value] of Object.entries(ratios)) console.log(`${name.padEnd(36)} ${value.toFixed(3)}`)
saveResult(tunedEnv === undefined ? 'assist' : 'assist-tuned', { settings: { duration, rounds, connections, compare: compare ?? null, tuned: tunedEnv ?? null }, rounds: results, median: summary, ratios })
