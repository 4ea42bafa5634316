// Throughput of POST /v1/assist (JSON, echo agent) against a bare Fastify route in the same
// process, alternating rounds so that machine noise hits both. Run: npm run build && node bench/assist.js
// Options: --duration=<s per round> --rounds=<n> --connections=<n>
import autocannon from 'autocannon'
import { randomUUID } from 'node:crypto'
import { buildApp } from '../dist/src/app.js'
import { loadConfig } from '../dist/src/config.js'
import { arg, mean, saveResult, tempDir } from './common.js'

const duration = arg('duration', 5)
const rounds = arg('rounds', 3)
const connections = arg('connections', 10)

const data = tempDir()
// no rate limits: the benchmark is the limit's only caller
const app = await buildApp(loadConfig({ DATA_DIR: data.dir, LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '0', RATE_LIMIT_AGENT_MAX: '0' }))
app.post('/bench/bare', async (request) => ({ echo: request.body.payload.payload.query }))
await app.listen({ host: '127.0.0.1', port: 0 })
const base = `http://127.0.0.1:${app.server.address().port}`

const session = randomUUID()
const envelope = () => JSON.stringify({
  request_id: randomUUID(),
  context: {
    session_id: session,
    agent_id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01',
    user: { user_id: 'bench', tier: 'free', locale: 'en' },
    trace: { trace_id: randomUUID(), span_id: randomUUID() },
    permissions: [],
    created_at: new Date().toISOString()
  },
  payload: { session_id: session, payload: { query: 'hello benchmark' } }
})

async function round (path) {
  const result = await autocannon({
    url: base + path,
    method: 'POST',
    connections,
    duration,
    headers: { 'content-type': 'application/json' },
    // every request is a new request id: a repeated one would be answered from the journal
    requests: [{ setupRequest: (req) => ({ ...req, body: envelope() }) }]
  })
  const failed = result.non2xx + result.errors + result.timeouts
  if (failed > 0) throw new Error(`${path}: ${failed} failed requests`)
  return { path, rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, requests: result.requests.total }
}

const memoryBefore = process.memoryUsage()
const results = { assist: [], bare: [] }
for (let i = 0; i < rounds; i++) {
  results.assist.push(await round('/v1/assist'))
  results.bare.push(await round('/bench/bare'))
}
const memoryAfter = process.memoryUsage()
await app.close()
data.remove()

console.log('\nround  route        req/s    p50 ms  p99 ms')
for (let i = 0; i < rounds; i++) {
  for (const r of [results.assist[i], results.bare[i]]) console.log(`${String(i + 1).padEnd(6)} ${r.path.padEnd(12)} ${r.rps.toFixed(0).padStart(7)} ${String(r.p50).padStart(7)} ${String(r.p99).padStart(7)}`)
}
const assist = mean(results.assist.map((r) => r.rps))
const bare = mean(results.bare.map((r) => r.rps))
const ratio = assist / bare
console.log(`\nmean req/s: /v1/assist ${assist.toFixed(0)}, bare route ${bare.toFixed(0)}; ratio assist/bare = ${ratio.toFixed(3)}`)
console.log(`rss ${(memoryBefore.rss / 2 ** 20).toFixed(0)} -> ${(memoryAfter.rss / 2 ** 20).toFixed(0)} MiB, heap used ${(memoryBefore.heapUsed / 2 ** 20).toFixed(0)} -> ${(memoryAfter.heapUsed / 2 ** 20).toFixed(0)} MiB`)
saveResult('assist', {
  settings: { duration, rounds, connections },
  rounds: results,
  mean: { assist, bare },
  ratio,
  memory: { before: memoryBefore, after: memoryAfter }
})
