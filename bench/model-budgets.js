// What model budgets (issue 36) cost a backend call: with BUDGETS_FILE set, every backend call of a
// run reserves an estimate against its caller's tenant (and key) limits in one transaction of the
// budget store before the call, and settles what it used after (src/assist/budgeted-backend.ts).
// The looper agent (model-budgets-agents/) makes --calls LLM calls one after another in one run, on
// a fake OpenAI-compatible provider in the bench's process (loopback, one write per answer, 100
// tokens reported a call): fast, so that the budgets' own cost shows instead of hiding behind a
// model's. Targets, each a server of its own (model-budgets-server.js), in interleaved rounds:
// `sqlite none` (no BUDGETS_FILE) and `sqlite budgets` (a tenant limit far from reached), and the
// same two on PostgreSQL, each on a database of its own.
// Per target and round: `1 run` (one run alone: ms per backend call, the latency a caller sees) and
// `N runs` (--runs runs at once: backend calls per second, and the server's and the database's CPU
// per call, /proc). The ratios budgets / none and the added ms and µs per call are taken per round
// (each round's pair ran back to back) and the median over rounds reported, with their spread.
// PostgreSQL: a throwaway server with fsync, synchronous_commit and full_page_writes on
// (common.js:benchPostgres), whose CPU is measured, or --pg-url=<url> of a server whose role may
// create databases (its CPU is then not measured); without either, the PostgreSQL rows are SKIPPED.
//   npm run build && node bench/model-budgets.js [--calls=200] [--runs=8] [--rounds=5] [--pg-url=<url>] [--smoke]
// --smoke: one round of 3 calls against this checkout's sources, checking only that every run
// answers and that budgets counted every call of their targets and nothing of the others.
import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { Agent, createServer, request } from 'node:http'
import { join } from 'node:path'
import { arg, benchDatabases, benchPostgres, cpuMs, postgresCpuMs, saveResult, smoke, startServer, tempDir } from './common.js'

const calls = arg('calls', 200, 3)
const runs = arg('runs', 8, 2)
const rounds = arg('rounds', 5, 1)
const LOOPER = 'b0000000-0000-4000-8000-0000000000b1'
/** Tokens the provider reports a call (prompt + completion). */
const TOKENS_PER_CALL = 100

const median = (xs) => { const s = xs.filter((x) => x !== undefined).sort((a, b) => a - b); return s.length === 0 ? undefined : s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }
const spread = (xs) => xs.length === 0 ? undefined : [Math.min(...xs), Math.max(...xs)]

// --- the provider: one OpenAI chat completion stream, written at once -----------------------------
const chunk = (body) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'bench-model', ...body })}\n\n`
const ANSWER = [
  chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }),
  chunk({ choices: [{ index: 0, delta: { content: 'ok' }, finish_reason: null }] }),
  chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
  chunk({ choices: [], usage: { prompt_tokens: 60, completion_tokens: 40, total_tokens: TOKENS_PER_CALL } }),
  'data: [DONE]\n\n'
].join('')
let providerCalls = 0
const provider = createServer((req, res) => {
  req.resume()
  req.on('end', () => {
    providerCalls++
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    res.end(ANSWER)
  })
})
await new Promise((resolve) => provider.listen(0, '127.0.0.1', resolve))
const providerUrl = `http://127.0.0.1:${provider.address().port}`

// --- the targets ---------------------------------------------------------------------------------
const files = tempDir()
const budgetsFile = join(files.dir, 'budgets.json')
// far from reached: no call comes near it, so every reservation is admitted on its first look
writeFileSync(budgetsFile, JSON.stringify({ default: { day: { tokens: 1e12, cost_usd: 1e6 }, month: { tokens: 1e13, cost_usd: 1e7 } } }))

const postgres = await benchPostgres()
const databases = await benchDatabases(postgres)

const targets = []
for (const store of ['sqlite', ...(postgres === undefined ? [] : ['postgres'])]) {
  for (const budgets of [false, true]) {
    const args = [`--provider=${providerUrl}`, ...(budgets ? [`--budgets=${budgetsFile}`] : []), ...(store === 'postgres' ? [`--database=${await databases.fresh()}`] : []), ...(smoke ? ['--smoke'] : [])]
    targets.push({ name: `${store} ${budgets ? 'budgets' : 'none'}`, store, budgets, server: await startServer('./model-budgets-server.js', args), agent: new Agent({ keepAlive: true, maxSockets: runs }) })
  }
}

/** One run of the looper making `calls` calls on `target`; throws unless it answered with all of them made. */
function run (target) {
  const session = randomUUID()
  const body = JSON.stringify({
    request_id: randomUUID(),
    context: { session_id: session, agent_id: LOOPER, user: { user_id: 'bench', tier: 'free', locale: 'en' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
    payload: { session_id: session, payload: { query: 'go', calls } }
  })
  return new Promise((resolve, reject) => {
    const req = request(`${target.server.url}/v1/assist`, { method: 'POST', agent: target.agent, headers: { 'content-type': 'application/json', accept: 'application/json' } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { text += c })
      res.on('end', () => {
        if (res.statusCode !== 200 || !text.includes(`${calls} calls`)) reject(new Error(`${target.name}: status ${res.statusCode}: ${text.slice(0, 300)}`))
        else resolve()
      })
    })
    req.on('error', reject)
    req.end(body)
  })
}

const databaseCpu = (target) => target.store === 'postgres' && postgres.postmaster !== undefined ? postgresCpuMs(postgres.postmaster) : undefined

/** `n` runs at once on `target`: ms per call of one run, calls per second, server and database CPU (µs) per call. */
async function measure (target, n) {
  const before = { server: cpuMs(target.server.pid), database: databaseCpu(target), provider: providerCalls }
  const started = performance.now()
  await Promise.all(Array.from({ length: n }, () => run(target)))
  const ms = performance.now() - started
  const made = n * calls
  if (providerCalls - before.provider !== made) throw new Error(`${target.name}: the provider got ${providerCalls - before.provider} calls, not ${made}`)
  const database = before.database === undefined ? undefined : (databaseCpu(target) - before.database) * 1000 / made
  return { ms_per_call: ms / calls, calls_per_s: made / ms * 1000, server_us: (cpuMs(target.server.pid) - before.server) * 1000 / made, database_us: database }
}

// warm-up, not counted: code optimized, pools filled, the budgets' counters made
for (const target of targets) await measure(target, runs)

const rows = Object.fromEntries(targets.map((t) => [t.name, { one: [], many: [] }]))
for (let r = 0; r < rounds; r++) {
  // each store's pair back to back, none first then budgets, every round in the same order
  for (const target of targets) rows[target.name].one.push(await measure(target, 1))
  for (const target of targets) rows[target.name].many.push(await measure(target, runs))
  const line = targets.map((t) => `${t.name} ${rows[t.name].many.at(-1).calls_per_s.toFixed(0)}/s`).join(', ')
  console.log(`round ${r + 1}/${rounds}: ${line}`)
}

// every call of a budgets target was counted, none of the others' (GET /v1/usage: AUTH_MODE off is the host's admin)
const warmedAndMeasured = runs + rounds * (1 + runs)
for (const target of targets) {
  const res = await fetch(`${target.server.url}/v1/usage`)
  const { budgets } = await res.json()
  const day = budgets.find((b) => b.key === null && b.period === 'day')
  const tokens = day?.used.tokens ?? 0
  const expected = target.budgets ? warmedAndMeasured * calls * TOKENS_PER_CALL : 0
  if (tokens !== expected || (day?.reserved.calls ?? 0) !== 0) throw new Error(`${target.name}: the budgets counted ${tokens} tokens (${day?.reserved.calls} calls still held), not ${expected}`)
}

const summary = {}
for (const target of targets) {
  const { one, many } = rows[target.name]
  summary[target.name] = {
    ms_per_call: median(one.map((x) => x.ms_per_call)),
    calls_per_s: median(many.map((x) => x.calls_per_s)),
    server_us_per_call: median(many.map((x) => x.server_us)),
    database_us_per_call: median(many.map((x) => x.database_us))
  }
}
const fixed = (x, digits) => x === undefined ? '-' : x.toFixed(digits)
console.log(`\n${calls} backend calls a run; "1 run": one run alone, "${runs} runs": ${runs} at once; medians of ${rounds} round(s)`)
console.table(Object.fromEntries(targets.map((t) => {
  const s = summary[t.name]
  return [t.name, { '1 run ms/call': fixed(s.ms_per_call, 3), [`${runs} runs calls/s`]: fixed(s.calls_per_s, 0), 'server µs/call': fixed(s.server_us_per_call, 0), 'database µs/call': fixed(s.database_us_per_call, 0) }]
})))

/** budgets / none, per round (each round's pair ran back to back), as medians and spreads over rounds. */
const comparisons = {}
for (const store of new Set(targets.map((t) => t.store))) {
  const none = rows[`${store} none`]
  const held = rows[`${store} budgets`]
  const per = (pick, f) => held[pick].map((x, i) => f(x, none[pick][i])).filter((x) => x !== undefined && !Number.isNaN(x))
  const added = {
    ratio_calls_per_s: per('many', (b, n) => b.calls_per_s / n.calls_per_s),
    added_ms_per_call: per('one', (b, n) => b.ms_per_call - n.ms_per_call),
    ratio_ms_per_call: per('one', (b, n) => b.ms_per_call / n.ms_per_call),
    added_server_us_per_call: per('many', (b, n) => b.server_us - n.server_us),
    ratio_server_cpu: per('many', (b, n) => b.server_us / n.server_us),
    added_database_us_per_call: per('many', (b, n) => b.database_us === undefined ? undefined : b.database_us - n.database_us)
  }
  comparisons[store] = Object.fromEntries(Object.entries(added).map(([k, xs]) => [k, { median: median(xs), spread: spread(xs) }]))
  const c = comparisons[store]
  const range = (m, digits) => m.median === undefined ? 'not measured' : `${m.median.toFixed(digits)} (${m.spread.map((x) => x.toFixed(digits)).join(' to ')})`
  console.log(`\n${store}, budgets / none (median of rounds, and their range):`)
  console.log(`  calls/s, ${runs} runs at once: ×${range(c.ratio_calls_per_s, 3)}`)
  console.log(`  latency of a call, one run:   ×${range(c.ratio_ms_per_call, 3)}, +${range(c.added_ms_per_call, 3)} ms per call`)
  console.log(`  server CPU per call:          ×${range(c.ratio_server_cpu, 3)}, +${range(c.added_server_us_per_call, 0)} µs per call`)
  if (store === 'postgres') console.log(`  database CPU per call:        +${range(c.added_database_us_per_call, 0)} µs per call`)
}
if (postgres === undefined) console.log('\npostgres: SKIPPED (no PostgreSQL server binaries and no --pg-url)')

saveResult('model-budgets', {
  settings: { calls, runs, rounds, tokens_per_call: TOKENS_PER_CALL, postgres: postgres?.about ?? 'skipped: no server binaries and no --pg-url' },
  summary,
  comparisons,
  rounds: rows
})

for (const target of targets) {
  await target.server.stop()
  target.agent.destroy()
}
await databases?.dropAll()
postgres?.stop()
provider.close()
files.remove()
