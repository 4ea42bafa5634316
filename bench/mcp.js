// The host's MCP binding (/mcp, a tools/call of the echo agent: a run with its full durability)
// against a bare official MCP server with an echo tool (mcp-server.js), in alternating rounds of one
// run: `--clients` MCP clients (the official SDK's Client over Streamable HTTP, one session each),
// each calling the tool back to back for `--duration` seconds; calls per second, p99 latency, and
// the servers' CPU per call. The host is measured three ways: one instance on SQLite
// (assist-server.js), one instance on PostgreSQL, and two instances on one PostgreSQL database
// (cluster-server.js) with every session's requests alternating between them (issue 35: no sticky
// routing; each client's transport has a `fetch` that sends its requests to the instances in turn,
// so no proxy's CPU or hop is measured, and the servers' CPU is the sum of both). PostgreSQL: a
// throwaway server with fsync, synchronous_commit and full_page_writes on (common.js), whose CPU
// (every process of it) is measured per call beside the servers'; or --pg-url=<url> of a server
// whose role may create databases (its CPU is then not measured); without either, the PostgreSQL
// targets are SKIPPED, saying so.
//   npm run build && node bench/mcp.js [--clients=20] [--duration=5] [--rounds=5] [--warmup=5] [--pg-url=<url>] [--smoke]

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { arg, benchDatabases, benchPostgres, cpuMs, postgresCpuMs, saveResult, smoke, startServer } from './common.js'

const clients = arg('clients', 20, 2)
const duration = arg('duration', 5, 0.25)
const rounds = arg('rounds', 5, 1)
/**
 * Seconds of calls on each target before the first round, not counted: code optimized, pools filled.
 * Two instances each compile the same code on half the calls, so a short warm-up charges them more.
 */
const warmup = arg('warmup', 5, 0)

const percentile = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))] }
const median = (xs) => { const s = xs.filter((x) => x !== undefined).sort((a, b) => a - b); return s.length === 0 ? undefined : s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }

/**
 * A `fetch` for one client's transport that sends its requests to `urls` in turn, from `first` on
 * (with two, no request of a session goes where the one before it went), counting them in `counts`.
 */
function alternating (urls, first, counts) {
  const hosts = urls.map((u) => new URL(u).host)
  let next = first
  return async (url, init) => {
    const i = next++ % hosts.length
    counts[i]++
    const to = new URL(url)
    to.host = hosts[i]
    return await fetch(to, init)
  }
}

/** `clients` sessions calling `tool` back to back for `seconds` on `target`'s instances; CPU of its servers and (on a server the bench started) of the database, per call. */
async function measure (target, seconds, tool = 'echo') {
  const urls = target.servers.map((s) => s.url)
  const counts = urls.map(() => 0)
  const connected = await Promise.all(Array.from({ length: clients }, async (_, i) => {
    const client = new Client({ name: 'bench', version: '1.0.0' })
    // every target through the same fetch, so the clients' own cost is alike; half the sessions begin on each instance
    const transport = new StreamableHTTPClientTransport(new URL(`${urls[0]}/mcp`), { fetch: alternating(urls, i, counts) })
    await client.connect(transport)
    return { client, transport }
  }))
  const serversCpu = () => target.servers.reduce((sum, s) => sum + cpuMs(s.pid), 0)
  const databaseCpu = () => target.postgres && postgres?.postmaster !== undefined ? postgresCpuMs(postgres.postmaster) : undefined
  const before = { servers: serversCpu(), database: databaseCpu(), counts: [...counts] }
  const latencies = []
  const end = performance.now() + seconds * 1000
  const started = performance.now()
  await Promise.all(connected.map(async ({ client }) => {
    while (performance.now() < end) {
      const at = performance.now()
      const result = await client.callTool({ name: tool, arguments: { query: 'hello benchmark' } })
      if (result.isError === true || JSON.stringify(result.structuredContent).includes('hello benchmark') !== true) throw new Error(`${target.name}: ${JSON.stringify(result)}`)
      latencies.push(performance.now() - at)
    }
  }))
  const elapsed = (performance.now() - started) / 1000
  const servers = serversCpu() - before.servers
  const database = before.database === undefined ? undefined : databaseCpu() - before.database
  const requests = counts.map((n, i) => n - before.counts[i])
  // the sessions end (DELETE /mcp), so that a round's sessions do not count against the next's MCP_MAX_SESSIONS
  await Promise.all(connected.map(async ({ client, transport }) => { await transport.terminateSession(); await client.close() }))
  return {
    calls_per_second: latencies.length / elapsed,
    p99_ms: percentile(latencies, 0.99),
    cpu_us_per_call: servers * 1000 / latencies.length,
    db_us_per_call: database === undefined ? undefined : database * 1000 / latencies.length,
    // with two instances: the share of the requests the first one answered (0.5: spread evenly)
    first_instance_share: requests[0] / requests.reduce((a, b) => a + b, 0)
  }
}

const postgres = await benchPostgres()
const databases = await benchDatabases(postgres)

const HOST = 'host /mcp (echo agent)'
const PG = 'host on PostgreSQL'
const TWO = 'host on two instances'
const BARE = 'bare MCP SDK server'
const servers = []
const start = async (script, args) => { const server = await startServer(script, [...args, ...(smoke ? ['--smoke'] : [])]); servers.push(server); return server }

try {
  const targets = [{ name: HOST, servers: [await start('./assist-server.js', ['--target=assist'])], postgres: false }]
  if (postgres !== undefined) {
    targets.push({ name: PG, servers: [await start('./cluster-server.js', [`--database=${await databases.fresh()}`])], postgres: true })
    const two = await databases.fresh()
    // the first boots alone, so the second finds the database migrated
    const first = await start('./cluster-server.js', [`--database=${two}`])
    targets.push({ name: TWO, servers: [first, await start('./cluster-server.js', [`--database=${two}`])], postgres: true })
  }
  targets.push({ name: BARE, servers: [await start('./mcp-server.js', [])], postgres: false })

  console.log('SQLite: WAL, synchronous=NORMAL (the app\'s setting: a commit reaches the OS, not the disk, before it is acknowledged)')
  console.log(postgres === undefined ? 'PostgreSQL: SKIPPED (no server binaries and no --pg-url)' : `PostgreSQL: ${postgres.about}`)
  console.log(`${clients} clients back to back, ${rounds} round(s) of ${duration} s per target${warmup > 0 ? `, after ${warmup} s of warm-up each` : ''}\n`)
  if (warmup > 0) for (const target of targets) await measure(target, warmup)
  const results = Object.fromEntries(targets.map((t) => [t.name, []]))
  const us = (v) => v === undefined ? '-' : v.toFixed(0)
  for (let round = 1; round <= rounds; round++) {
    for (const target of targets) {
      const r = await measure(target, duration)
      results[target.name].push(r)
      console.log(`round ${round}  ${target.name.padEnd(24)} ${r.calls_per_second.toFixed(0).padStart(6)} calls/s  p99 ${r.p99_ms.toFixed(1).padStart(6)} ms  CPU/call servers ${us(r.cpu_us_per_call).padStart(5)} µs  db ${us(r.db_us_per_call).padStart(5)} µs${target.servers.length > 1 ? `  first instance's share ${r.first_instance_share.toFixed(2)}` : ''}`)
    }
  }
  const summary = Object.fromEntries(Object.entries(results).map(([name, rs]) => [name, Object.fromEntries(Object.keys(rs[0]).map((k) => [k, median(rs.map((r) => r[k]))]))]))
  const cell = (v, width, digits = 0) => (v === undefined ? '-' : v.toFixed(digits)).padStart(width)
  console.log(`\nMCP tools/call, ${clients} clients back to back for ${duration} s, medians of ${rounds} round(s)`)
  console.log(`${'target'.padEnd(24)}  calls/s  p99 ms   CPU µs/call: servers      db`)
  for (const [name, s] of Object.entries(summary)) console.log(`${name.padEnd(24)}${cell(s.calls_per_second, 9)}${cell(s.p99_ms, 8, 1)}${cell(s.cpu_us_per_call, 23)}${cell(s.db_us_per_call, 8)}`)
  console.log('(servers: both instances\' CPU summed; db: every PostgreSQL process, on a server the bench started; on SQLite the database works inside the server)')

  const b = summary[BARE]
  const ratios = { 'tools/call calls/s host / bare': summary[HOST].calls_per_second / b.calls_per_second, 'CPU per call host / bare': summary[HOST].cpu_us_per_call / b.cpu_us_per_call }
  if (postgres !== undefined) {
    const p = summary[PG]
    const t = summary[TWO]
    Object.assign(ratios, {
      'tools/call calls/s host on PostgreSQL / bare': p.calls_per_second / b.calls_per_second,
      'tools/call calls/s two instances / bare': t.calls_per_second / b.calls_per_second,
      'tools/call calls/s two instances / host on PostgreSQL': t.calls_per_second / p.calls_per_second,
      'CPU per call host on PostgreSQL / bare': p.cpu_us_per_call / b.cpu_us_per_call,
      'CPU per call two instances / bare': t.cpu_us_per_call / b.cpu_us_per_call,
      ...(t.db_us_per_call === undefined ? {} : { 'CPU per call two instances with the database / bare': (t.cpu_us_per_call + t.db_us_per_call) / b.cpu_us_per_call })
    })
  }
  console.log('')
  for (const [name, value] of Object.entries(ratios)) console.log(`${name.padEnd(54)} ${value.toFixed(3)}`)
  saveResult('mcp', {
    settings: { clients, duration, rounds, warmup, postgres: postgres === undefined ? 'skipped: no server' : postgres.about, two_instances: 'each session\'s requests alternate between the two (the client transport\'s fetch)' },
    rounds: results,
    median: summary,
    ratios
  })
} finally {
  await Promise.all(servers.map(async (s) => await s.stop()))
  await databases?.dropAll()
  postgres?.stop()
}
