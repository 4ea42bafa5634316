// What authentication and rate limiting cost per request: GET /v1/agents on an app with AUTH_MODE=off
// and no limits, against the same route on an app with AUTH_MODE=apikey and RATE_LIMIT_MAX on (too
// high to refuse anything), alternating rounds so that machine noise hits both.
// Then the rate-limit store alone: the per-caller limit as plugins/limits.ts applies it
// (@fastify/rate-limit, app.createRateLimit in a preParsing hook) on a bare Fastify app, with the
// in-process store against the PostgreSQL store shared by instances (one upsert per request), in
// alternating rounds; it needs a PostgreSQL server: PG_TEST_URL (a superuser's URL, as `npm run
// pg:dev` prints), else it is skipped and says so.
// Run: npm run build && node bench/limits.js   Options: --duration=<s per round> --rounds=<n> --connections=<n>
import autocannon from 'autocannon'
import Fastify from 'fastify'
import rateLimit from '@fastify/rate-limit'
import pg from 'pg'
import { randomBytes } from 'node:crypto'
import { arg, load, mean, saveResult, tempDir } from './common.js'

const { buildApp } = await load('app')
const { loadConfig } = await load('config')
const duration = arg('duration', 5, 0.25)
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

/** A bare app with the per-caller limit as plugins/limits.ts applies it, on `store` (undefined: the in-process one). */
async function limited (store) {
  const app = Fastify()
  await app.register(rateLimit, { global: false, timeWindow: 3_600_000, ...(store !== undefined ? { store } : {}) })
  const perCaller = app.createRateLimit({ max: 100_000_000, keyGenerator: (request) => String(request.headers['x-caller'] ?? 'bench') })
  app.addHook('preParsing', async (request, reply) => {
    const state = await perCaller(request)
    if (!state.isAllowed) reply.header('x-ratelimit-limit', state.max).header('x-ratelimit-remaining', state.remaining).header('x-ratelimit-reset', state.ttlInSeconds)
  })
  app.get('/v1/agents', async () => ({ agents: [] }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, url: `http://127.0.0.1:${app.server.address().port}/v1/agents` }
}

const storeRounds = { local: [], postgres: [] }
let statementsPerRequest
const pgUrl = process.env.PG_TEST_URL ?? ''
if (pgUrl === '') {
  console.log('\nPostgreSQL rate-limit store: SKIPPED (no PG_TEST_URL; npm run pg:dev starts a server and prints one)')
} else {
  const { openPostgres } = await load('storage/postgres/database')
  const { pgRateLimitStore } = await load('storage/postgres/rate-limit-store')
  const database = `bench_limits_${randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: pgUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${database}`)
  const url = new URL(pgUrl)
  url.pathname = `/${database}`
  const pool = await openPostgres(url.toString(), { max: connections })
  let statements = 0
  const query = pool.query.bind(pool)
  pool.query = (...args) => { statements++; return query(...args) }
  const local = await limited(undefined)
  const shared = await limited(pgRateLimitStore(pool))
  for (let i = 0; i < rounds; i++) {
    storeRounds.local.push(await round('local store', local, {}))
    const before = statements
    const r = await round('pg store', shared, {})
    storeRounds.postgres.push(r)
    statementsPerRequest = (statements - before) / r.requests
  }
  for (const s of [local, shared]) await s.app.close()
  await pool.end()
  await admin.query(`DROP DATABASE ${database} WITH (FORCE)`)
  await admin.end()
}

console.log('\nround  app       req/s    p50 ms  p99 ms')
for (let i = 0; i < rounds; i++) {
  for (const r of [results.open[i], results.guarded[i]]) console.log(`${String(i + 1).padEnd(6)} ${r.name.padEnd(9)} ${r.rps.toFixed(0).padStart(7)} ${String(r.p50).padStart(7)} ${String(r.p99).padStart(7)}`)
}
const o = mean(results.open.map((r) => r.rps))
const g = mean(results.guarded.map((r) => r.rps))
const perRequestUs = (1 / g - 1 / o) * 1e6
console.log(`\nmean req/s: auth off, no limits ${o.toFixed(0)}; API key + rate limit ${g.toFixed(0)}; ratio guarded/open = ${(g / o).toFixed(3)} (≈ ${perRequestUs.toFixed(1)} µs of server time per request)`)
let store
if (storeRounds.postgres.length > 0) {
  console.log('\nround  store        req/s    p50 ms  p99 ms')
  for (let i = 0; i < rounds; i++) {
    for (const r of [storeRounds.local[i], storeRounds.postgres[i]]) console.log(`${String(i + 1).padEnd(6)} ${r.name.padEnd(12)} ${r.rps.toFixed(0).padStart(7)} ${String(r.p50).padStart(7)} ${String(r.p99).padStart(7)}`)
  }
  const l = mean(storeRounds.local.map((r) => r.rps))
  const p = mean(storeRounds.postgres.map((r) => r.rps))
  store = { local: l, postgres: p, ratio: p / l, perRequestUs: (1 / p - 1 / l) * 1e6, statementsPerRequest }
  console.log(`\nmean req/s, per-caller limit: in-process store ${l.toFixed(0)}; PostgreSQL store ${p.toFixed(0)}; ratio = ${(p / l).toFixed(3)} (≈ ${store.perRequestUs.toFixed(1)} µs more per request; ${statementsPerRequest.toFixed(2)} statements per request)`)
}
saveResult('limits', { settings: { duration, rounds, connections }, rounds: results, mean: { open: o, guarded: g }, ratio: g / o, perRequestUs, store: store ?? 'skipped: no PG_TEST_URL', storeRounds })
