// What authentication and rate limiting cost per request: GET /v1/agents on an app with AUTH_MODE=off
// and no limits, against the same route on an app with AUTH_MODE=apikey and RATE_LIMIT_MAX on (too
// high to refuse anything), alternating rounds so that machine noise hits both.
// Run: npm run build && node bench/limits.js   Options: --duration=<s per round> --rounds=<n> --connections=<n>
import autocannon from 'autocannon'
import { arg, load, mean, saveResult, tempDir } from './common.js'

const { buildApp } = await load('app')
const { loadConfig } = await load('config')
const duration = arg('duration', 5, 1)
const rounds = arg('rounds', 3, 1)
const connections = arg('connections', 10, 2)

async function start (env) {
  const data = tempDir()
  const app = await buildApp(loadConfig({ DATA_DIR: data.dir, LOG_LEVEL: 'silent', WORKERS_PER_TYPE: '0', ...env }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, data, url: `http://127.0.0.1:${app.server.address().port}/v1/agents` }
}

const open = await start({ RATE_LIMIT_MAX: '0', RATE_LIMIT_AGENT_MAX: '0' })
const guarded = await start({ AUTH_MODE: 'apikey', RATE_LIMIT_MAX: '100000000', RATE_LIMIT_WINDOW_MS: '3600000' })
const key = guarded.app.keys.create({ name: 'bench', scopes: ['agents:read'] }).key

async function round (name, target, headers) {
  const result = await autocannon({ url: target.url, connections, duration, headers })
  const failed = result.non2xx + result.errors + result.timeouts
  if (failed > 0) throw new Error(`${name}: ${failed} failed requests`)
  return { name, rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, requests: result.requests.total }
}

const results = { open: [], guarded: [] }
for (let i = 0; i < rounds; i++) {
  results.open.push(await round('open', open, {}))
  results.guarded.push(await round('guarded', guarded, { authorization: `Bearer ${key}` }))
}
for (const s of [open, guarded]) {
  await s.app.close()
  s.data.remove()
}

console.log('\nround  app       req/s    p50 ms  p99 ms')
for (let i = 0; i < rounds; i++) {
  for (const r of [results.open[i], results.guarded[i]]) console.log(`${String(i + 1).padEnd(6)} ${r.name.padEnd(9)} ${r.rps.toFixed(0).padStart(7)} ${String(r.p50).padStart(7)} ${String(r.p99).padStart(7)}`)
}
const o = mean(results.open.map((r) => r.rps))
const g = mean(results.guarded.map((r) => r.rps))
const perRequestUs = (1 / g - 1 / o) * 1e6
console.log(`\nmean req/s: auth off, no limits ${o.toFixed(0)}; API key + rate limit ${g.toFixed(0)}; ratio guarded/open = ${(g / o).toFixed(3)} (≈ ${perRequestUs.toFixed(1)} µs of server time per request)`)
saveResult('limits', { settings: { duration, rounds, connections }, rounds: results, mean: { open: o, guarded: g }, ratio: g / o, perRequestUs })
