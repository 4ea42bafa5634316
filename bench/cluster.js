// A cluster on PostgreSQL beside one instance on SQLite (issue 19). Three targets, each in its own
// server process(es) (cluster-server.js), in interleaved rounds, each round on a fresh DATA_DIR and
// a fresh database: `sqlite` (one instance), `postgres x1` (one instance on PostgreSQL) and
// `postgres x2` (two instances on one database, the load spread evenly over both).
// Per target: POST /v1/assist in JSON (the echo agent, full durability, a fresh request id each;
// autocannon, its connections over the instances' urls in turn) with req/s and p50/p99 latency, then
// a burst of --streams SSE streams of --packets DELTAs at once (echo-stream, no delay, as
// fanout.js; the streams over the instances in turn) with packets/s and time to first packet p99;
// and for each, the CPU the servers spent (their processes, /proc/<pid>/stat) and the CPU the
// database server spent (the postmaster and every child, live or reaped, from /proc: only on a
// server the bench started), per request and per packet, so that a reader can size a cluster:
// requests per second per server core and per database core (BENCHMARKS.md has the formula).
// PostgreSQL: a throwaway server (scripts/pg-cluster.ts) with fsync, synchronous_commit and
// full_page_writes on, as a production server runs (the throwaway default is off), or --pg-url=<url>
// of a server to use (a role that may create databases; its CPU is then not measured); without
// either, the PostgreSQL targets are SKIPPED, saying so.
//   npm run build && node bench/cluster.js [--duration=5] [--rounds=3] [--connections=50] [--streams=200] [--packets=200] [--pg-url=<url>] [--smoke]
// --smoke: one short round of each target against this checkout's sources, checking only that every
// answer is a 2xx and every stream complete (npm test runs it so the benchmark cannot rot).
import { randomBytes, randomUUID } from 'node:crypto'
import { Agent, request } from 'node:http'
import autocannon from 'autocannon'
import pg from 'pg'
import { arg, benchPostgres, cpuMs, postgresCpuMs, saveResult, smoke, startServer } from './common.js'

const duration = arg('duration', 5, 0.25)
const rounds = arg('rounds', 3, 1)
const connections = arg('connections', 50, 2)
const streams = arg('streams', 200, 4)
const packets = arg('packets', 200, 10)
/** Seconds of JSON load on a freshly started target before measuring (its code warmed up, its pools filled). */
const warmup = arg('warmup', 1, 0)
const ECHO = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01'
const ECHO_STREAM = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02'

const postgres = await benchPostgres()
const admin = postgres === undefined ? undefined : new pg.Client({ connectionString: postgres.url })
await admin?.connect()

/** The CPU (ms) the whole database server has used so far: the postmaster, its live children and the reaped ones. */
function databaseCpuMs () {
  return postgres?.postmaster === undefined ? undefined : postgresCpuMs(postgres.postmaster)
}

/** A database of its own for one round of one target, dropped after it. */
async function freshDatabase () {
  // a generated name, not input: identifiers cannot be query parameters
  const name = `agent_host_bench_${randomBytes(4).toString('hex')}`
  await admin.query(`CREATE DATABASE ${name}`)
  const url = new URL(postgres.url)
  url.pathname = `/${name}`
  return { url: url.toString(), drop: async () => { await admin.query(`DROP DATABASE ${name} WITH (FORCE)`) } }
}

const serversCpuMs = (servers) => servers.reduce((sum, s) => sum + cpuMs(s.pid), 0)

/** Where the server's write-ahead log is: it grows by every byte any database writes. */
const walPosition = async () => (await admin.query('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0].lsn

/**
 * CPU spent by the servers and (on PostgreSQL) the database while `work` ran, and the bytes of WAL
 * it wrote, per `units(result)` (µs, bytes).
 */
async function measured (target, servers, work, units) {
  const server = serversCpuMs(servers)
  const database = target.postgres ? databaseCpuMs() : undefined
  const wal = target.postgres ? await walPosition() : undefined
  const result = await work()
  const n = units(result)
  const databaseAfter = databaseCpuMs()
  const walBytes = wal === undefined ? undefined : Number((await admin.query('SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1) AS bytes', [wal])).rows[0].bytes)
  return {
    ...result,
    server_us: (serversCpuMs(servers) - server) * 1000 / n,
    database_us: database === undefined ? undefined : (databaseAfter - database) * 1000 / n,
    wal_bytes: walBytes === undefined ? undefined : walBytes / n
  }
}

/** About 1 KB: a CAP envelope of the echo agent with a fresh request id and some padding in the query. */
const envelope = (session) => JSON.stringify({
  request_id: randomUUID(),
  context: { session_id: session, agent_id: ECHO, user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
  payload: { session_id: session, payload: { query: 'hello benchmark '.repeat(36) } }
})

/** JSON load for `seconds` over every instance; as many sessions as connections, taken in turn (one user per connection, not one hot session). */
async function json (servers, seconds) {
  const sessions = Array.from({ length: connections }, () => randomUUID())
  let turn = 0
  const result = await autocannon({
    url: servers.map((s) => `${s.url}/v1/assist`),
    method: 'POST',
    connections,
    duration: seconds,
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    requests: [{ setupRequest: (req) => ({ ...req, body: envelope(sessions[turn++ % sessions.length]) }) }]
  })
  const failed = result.non2xx + result.errors + result.timeouts
  if (failed > 0 || result.requests.total === 0) throw new Error(`${failed} of ${result.requests.total} JSON requests failed`)
  return { rps: result.requests.average, p50_ms: result.latency.p50, p99_ms: result.latency.p99, requests: result.requests.total }
}

const words = 'w '.repeat(packets)
/** One SSE stream of echo-stream: ms to its first body byte and the frames it got. */
function stream (url, agent) {
  const session = randomUUID()
  const body = JSON.stringify({
    request_id: randomUUID(),
    context: { session_id: session, agent_id: ECHO_STREAM, user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
    payload: { session_id: session, payload: { query: words, delay_ms: 0 } }
  })
  return new Promise((resolve, reject) => {
    const started = performance.now()
    let first
    let text = ''
    const req = request(`${url}/v1/assist`, { method: 'POST', agent, headers: { 'content-type': 'application/json', accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (c) => {
        text += c
        // the first packet, not the `retry:` line written before any
        if (first === undefined && text.includes('data:')) first = performance.now() - started
      })
      res.on('end', () => {
        const deltas = (text.match(/"op":"DELTA"/g) ?? []).length
        if (res.statusCode !== 200 || deltas !== packets) reject(new Error(`${url}: status ${res.statusCode}, ${deltas} of ${packets} packets`))
        else resolve({ first, frames: text.split(/(?<=\n\n)/).filter((f) => f.trim() !== '' && !f.startsWith(':')).length })
      })
    })
    req.on('error', reject)
    req.end(body)
  })
}

const percentile = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))] }
const median = (xs) => { const s = xs.filter((x) => x !== undefined).sort((a, b) => a - b); return s.length === 0 ? undefined : s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }

/** Every stream at once, over the instances in turn: time to first packet per stream, packets per second overall. */
async function burst (servers) {
  const agents = servers.map(() => new Agent({ keepAlive: true, maxSockets: streams }))
  const started = performance.now()
  const all = await Promise.all(Array.from({ length: streams }, async (_, i) => await stream(servers[i % servers.length].url, agents[i % servers.length])))
  const seconds = (performance.now() - started) / 1000
  for (const agent of agents) agent.destroy()
  const frames = all.reduce((n, r) => n + r.frames, 0)
  return { packets_per_second: frames / seconds, ttfp_p50_ms: percentile(all.map((r) => r.first), 0.5), ttfp_p99_ms: percentile(all.map((r) => r.first), 0.99), frames }
}

/** One round of one target: started afresh, warmed up, JSON measured, then an SSE burst; stopped. */
async function round (target) {
  const database = target.postgres ? await freshDatabase() : undefined
  const servers = []
  try {
    const args = [...(database !== undefined ? [`--database=${database.url}`] : []), ...(smoke ? ['--smoke'] : [])]
    // instances of one cluster boot together: the migration runs once, under its lock
    servers.push(...await Promise.all(Array.from({ length: target.instances }, async () => await startServer('./cluster-server.js', args))))
    if (warmup > 0) await json(servers, warmup)
    const j = await measured(target, servers, async () => await json(servers, duration), (r) => r.requests)
    const s = await measured(target, servers, async () => await burst(servers), (r) => r.frames)
    return {
      json_rps: j.rps,
      json_p50_ms: j.p50_ms,
      json_p99_ms: j.p99_ms,
      json_server_us_per_request: j.server_us,
      json_database_us_per_request: j.database_us,
      json_wal_bytes_per_request: j.wal_bytes,
      sse_packets_per_second: s.packets_per_second,
      sse_ttfp_p50_ms: s.ttfp_p50_ms,
      sse_ttfp_p99_ms: s.ttfp_p99_ms,
      sse_server_us_per_packet: s.server_us,
      sse_database_us_per_packet: s.database_us,
      sse_wal_bytes_per_packet: s.wal_bytes
    }
  } finally {
    await Promise.all(servers.map(async (s) => await s.stop()))
    await database?.drop()
  }
}

const targets = [
  { name: 'sqlite', instances: 1, postgres: false },
  ...(postgres !== undefined ? [{ name: 'postgres x1', instances: 1, postgres: true }, { name: 'postgres x2', instances: 2, postgres: true }] : [])
]
const sqliteDurability = 'WAL, synchronous=NORMAL (the app\'s setting: a commit is not flushed to disk before it is acknowledged; a power cut may lose the last ones)'
console.log(`SQLite: ${sqliteDurability}`)
if (postgres !== undefined) console.log(`PostgreSQL: ${postgres.about}${postgres.postmaster !== undefined ? ' (every commit flushed before it is acknowledged)' : ''}`)
console.log(`${rounds} round(s); per target and round: ${warmup} s warm-up, ${duration} s of JSON at ${connections} connections, then ${streams} SSE streams × ${packets} packets at once\n`)

const samples = Object.fromEntries(targets.map((t) => [t.name, []]))
const us = (v) => v === undefined ? '-' : v.toFixed(0)
try {
  for (let r = 1; r <= rounds; r++) {
    for (const target of targets) {
      const s = await round(target)
      samples[target.name].push(s)
      console.log(`round ${r}  ${target.name.padEnd(12)} JSON ${s.json_rps.toFixed(0).padStart(6)} req/s p99 ${String(s.json_p99_ms).padStart(4)} ms, CPU/request server ${us(s.json_server_us_per_request)} µs db ${us(s.json_database_us_per_request)} µs WAL ${us(s.json_wal_bytes_per_request)} B   SSE ${s.sse_packets_per_second.toFixed(0).padStart(7)} packets/s first p99 ${s.sse_ttfp_p99_ms.toFixed(0).padStart(5)} ms, CPU/packet server ${s.sse_server_us_per_packet.toFixed(1)} µs db ${s.sse_database_us_per_packet?.toFixed(1) ?? '-'} µs`)
    }
  }
} finally {
  await admin?.end()
  postgres?.stop()
}

const summary = Object.fromEntries(Object.entries(samples).map(([name, rs]) => [name, Object.fromEntries(Object.keys(rs[0]).map((key) => [key, median(rs.map((r) => r[key]))]))]))
for (const s of Object.values(summary)) {
  // what one core serves: a reader sizes a cluster with these (BENCHMARKS.md)
  s.json_rps_per_server_core = 1e6 / s.json_server_us_per_request
  s.json_rps_per_database_core = s.json_database_us_per_request === undefined ? undefined : 1e6 / s.json_database_us_per_request
}
const cell = (v, width, digits = 0) => (v === undefined ? '-' : v.toFixed(digits)).padStart(width)
console.log(`\nJSON, medians of ${rounds} round(s)`)
console.log('target        req/s  p50 ms  p99 ms   CPU µs/request: servers      db   req/s per core: server      db   WAL bytes/request')
for (const [name, s] of Object.entries(summary)) {
  console.log(`${name.padEnd(12)}${cell(s.json_rps, 7)}${cell(s.json_p50_ms, 8)}${cell(s.json_p99_ms, 8)}${cell(s.json_server_us_per_request, 26)}${cell(s.json_database_us_per_request, 8)}${cell(s.json_rps_per_server_core, 25)}${cell(s.json_rps_per_database_core, 8)}${cell(s.json_wal_bytes_per_request, 20)}`)
}
console.log(`\nSSE, ${streams} streams × ${packets} packets at once, medians of ${rounds} round(s)`)
console.log('target      packets/s  first packet p50 ms  p99 ms   CPU µs/packet: servers      db   WAL bytes/packet')
for (const [name, s] of Object.entries(summary)) {
  console.log(`${name.padEnd(12)}${cell(s.sse_packets_per_second, 9)}${cell(s.sse_ttfp_p50_ms, 21)}${cell(s.sse_ttfp_p99_ms, 8)}${cell(s.sse_server_us_per_packet, 25, 1)}${cell(s.sse_database_us_per_packet, 8, 1)}${cell(s.sse_wal_bytes_per_packet, 19)}`)
}
console.log(postgres?.postmaster === undefined
  ? '\n(db: the database server\'s CPU, measured only on a server the bench started; on SQLite the database works inside the server process)'
  : '\n(db: the database server\'s CPU, all its processes; on SQLite the database works inside the server process)')

// the budgets on a 2-core machine: PostgreSQL JSON req/s ≥ 0.5× SQLite's, p99 ≤ 3× SQLite's
const budgets = {}
if (postgres !== undefined) {
  const sqlite = summary.sqlite
  for (const name of ['postgres x1', 'postgres x2']) {
    const p = summary[name]
    budgets[`${name} JSON req/s / sqlite (≥ 0.5)`] = { value: p.json_rps / sqlite.json_rps, met: p.json_rps / sqlite.json_rps >= 0.5 }
    budgets[`${name} JSON p99 / sqlite (≤ 3)`] = { value: p.json_p99_ms / sqlite.json_p99_ms, met: p.json_p99_ms / sqlite.json_p99_ms <= 3 }
    budgets[`${name} SSE first packet p99 / sqlite (≤ 3)`] = { value: p.sse_ttfp_p99_ms / sqlite.sse_ttfp_p99_ms, met: p.sse_ttfp_p99_ms / sqlite.sse_ttfp_p99_ms <= 3 }
    budgets[`${name} SSE packets/s / sqlite`] = { value: p.sse_packets_per_second / sqlite.sse_packets_per_second }
  }
  console.log('')
  // a smoke run's second of load on the TypeScript sources says nothing of a budget
  for (const [name, b] of Object.entries(budgets)) console.log(`${name.padEnd(48)} ${b.value.toFixed(2)}x${b.met === undefined || smoke ? '' : b.met ? '  met' : '  NOT met'}`)
}
saveResult('cluster', {
  settings: { duration, rounds, connections, streams, packets, warmup, sqlite: sqliteDurability, postgres: postgres === undefined ? 'skipped: no server' : postgres.about },
  rounds: samples,
  median: summary,
  budgets
})
