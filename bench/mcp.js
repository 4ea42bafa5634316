// The host's MCP binding (/mcp, a tools/call of the echo agent: a run with its full durability)
// against a bare official MCP server with an echo tool (mcp-server.js), in alternating rounds of one
// run: `--clients` MCP clients (the official SDK's Client over Streamable HTTP, one session each),
// each calling the tool back to back for `--duration` seconds; calls per second, p99 latency, and
// the server's CPU per call.
//   npm run build && node bench/mcp.js [--clients=20] [--duration=5] [--rounds=5] [--smoke]
import { readFileSync } from 'node:fs'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { arg, saveResult, smoke, startServer } from './common.js'

const clients = arg('clients', 20, 2)
const duration = arg('duration', 5, 0.25)
const rounds = arg('rounds', 5, 1)
const TICK = 100

/** CPU seconds the process has used (user + system), from /proc. */
function cpuSeconds (pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) / TICK
}

const percentile = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))] }
const median = (values) => percentile(values, 0.5)

/** `clients` sessions calling `tool` back to back for `duration` seconds. */
async function measure (server, tool) {
  const connected = await Promise.all(Array.from({ length: clients }, async () => {
    const client = new Client({ name: 'bench', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`)))
    return client
  }))
  const before = cpuSeconds(server.pid)
  const latencies = []
  const end = performance.now() + duration * 1000
  const started = performance.now()
  await Promise.all(connected.map(async (client) => {
    while (performance.now() < end) {
      const at = performance.now()
      const result = await client.callTool({ name: tool, arguments: { query: 'hello benchmark' } })
      if (result.isError === true || JSON.stringify(result.structuredContent).includes('hello benchmark') !== true) throw new Error(`${server.url}: ${JSON.stringify(result)}`)
      latencies.push(performance.now() - at)
    }
  }))
  const seconds = (performance.now() - started) / 1000
  const cpu = cpuSeconds(server.pid) - before
  await Promise.all(connected.map(async (client) => await client.close()))
  return { calls_per_second: latencies.length / seconds, p99_ms: percentile(latencies, 0.99), cpu_us_per_call: cpu / latencies.length * 1e6 }
}

const servers = []
try {
  const host = await startServer('./assist-server.js', ['--target=assist', ...(smoke ? ['--smoke'] : [])])
  servers.push(host)
  const bare = await startServer('./mcp-server.js', [])
  servers.push(bare)
  const targets = { 'host /mcp (echo agent)': async () => await measure(host, 'echo'), 'bare MCP SDK server': async () => await measure(bare, 'echo') }
  const results = Object.fromEntries(Object.keys(targets).map((name) => [name, []]))
  for (let round = 0; round < rounds; round++) {
    for (const [name, run] of Object.entries(targets)) results[name].push(await run())
  }
  const summary = Object.fromEntries(Object.entries(results).map(([name, rs]) => [name, Object.fromEntries(Object.keys(rs[0]).map((k) => [k, median(rs.map((r) => r[k]))]))]))
  console.log(`\nMCP tools/call, ${clients} clients back to back for ${duration} s, medians of ${rounds} rounds`)
  for (const [name, s] of Object.entries(summary)) console.log(`${name.padEnd(24)} ${Object.entries(s).map(([k, v]) => `${k} ${v.toFixed(1)}`).join('   ')}`)
  const [h, b] = Object.values(summary)
  const ratios = { 'tools/call calls/s host / bare': h.calls_per_second / b.calls_per_second, 'CPU per call host / bare': h.cpu_us_per_call / b.cpu_us_per_call }
  console.log('')
  for (const [name, value] of Object.entries(ratios)) console.log(`${name.padEnd(32)} ${value.toFixed(3)}`)
  saveResult('mcp', { settings: { clients, duration, rounds }, rounds: results, median: summary, ratios })
} finally {
  await Promise.all(servers.map(async (s) => await s.stop()))
}
