// What a run waiting for a person costs (issue 32, human in the loop), and how fast an answer goes on.
// 1. Resident cost: `--runs` runs of the `ask` agent that stopped to ask and wait, against as many runs
//    of the same agent that were answered and ended, in the same server, in interleaved rounds: the
//    heap and RSS each batch added (after a full GC), per run, the timers and other handles the
//    process holds (process.getActiveResourcesInfo()) before and after, and the runs in memory
//    (app.runs.size). A waiting run should cost what an ended one does: its rows in the database.
// 2. Answer to next packet: the time from sending an answer (a resume request, SSE) to its first
//    packet, against the time from a new request to its first packet, over real sockets, interleaved.
// The app runs in this process (its heap is what is measured); the requests are `inject` for part 1
// and HTTP over loopback for part 2.
//   npm run build && node bench/interrupts.js [--runs=10000] [--latency=500] [--rounds=3] [--smoke]
import { randomUUID } from 'node:crypto'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { arg, load, saveResult, tempDir } from './common.js'

const runs = arg('runs', 10000, 20)
const latency = arg('latency', 500, 10)
const rounds = arg('rounds', 3, 1)
const ASK = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a0e'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc')
const settle = async () => { for (let i = 0; i < 3; i++) { gc(); await new Promise((resolve) => setImmediate(resolve)) } }
const rss = () => process.memoryUsage().rss
const heap = () => process.memoryUsage().heapUsed
const resources = () => process.getActiveResourcesInfo().length

function envelope (session, payload, requestId = randomUUID()) {
  return {
    request_id: requestId,
    context: { session_id: session, agent_id: ASK, user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
    payload: { session_id: session, payload }
  }
}

const { buildApp } = await load('app')
const { loadConfig } = await load('config')
const data = tempDir()
const app = await buildApp(loadConfig({ DATA_DIR: data.dir, LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '0', RATE_LIMIT_AGENT_MAX: '0', MAX_EVENT_LOOP_DELAY_MS: '0', MAX_STREAMS: '0', MAX_STREAMS_PER_CALLER: '0', WORKERS_PER_TYPE: '0' }))
await app.listen({ host: '127.0.0.1', port: 0 })
const url = `http://127.0.0.1:${app.server.address().port}`

/** Ask `n` questions (one run each, 50 at a time); with `answer`, answer each, so the runs end. */
async function batch (n, answer) {
  const waiting = []
  for (let i = 0; i < n; i += 50) {
    await Promise.all(Array.from({ length: Math.min(50, n - i) }, async () => {
      const session = randomUUID()
      const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(session, { question: 'Which colour?' }) })
      const [interrupt] = res.json().interrupts
      if (!answer) { waiting.push(interrupt.id); return }
      const done = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(session, { resume: [{ interrupt_id: interrupt.id, value: { answer: 'blue' } }] }) })
      if (done.json().output.answer !== 'blue') throw new Error('the answer did not go through')
    }))
  }
  return waiting
}

async function cost (answer) {
  await settle()
  const before = { heap: heap(), rss: rss(), resources: resources() }
  const started = performance.now()
  await batch(runs, answer)
  const seconds = (performance.now() - started) / 1000
  await settle()
  return {
    heap_bytes_per_run: (heap() - before.heap) / runs,
    rss_bytes_per_run: (rss() - before.rss) / runs,
    resources_added: resources() - before.resources,
    runs_in_memory: app.runs.size,
    seconds
  }
}

/** Milliseconds from sending `body` (SSE) to its first packet; the body is read to its end. */
async function firstPacket (body) {
  const started = performance.now()
  const res = await fetch(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify(body) })
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let text = ''
  let first
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    text += decoder.decode(value, { stream: true })
    if (first === undefined && text.includes('event: stream.packet')) first = performance.now() - started
  }
  return { ms: first, text }
}

async function latencies () {
  const resumed = []
  const fresh = []
  for (let i = 0; i < latency; i++) {
    const session = randomUUID()
    const asked = await firstPacket(envelope(session, { question: 'Which colour?' }))
    fresh.push(asked.ms)
    const id = /"interrupts":\[\{"id":"([0-9a-f-]{36})"/.exec(asked.text)[1]
    const answered = await firstPacket(envelope(session, { resume: [{ interrupt_id: id, value: { answer: 'blue' } }] }))
    if (!answered.text.includes('"answer":"blue"')) throw new Error('the answer did not go through')
    resumed.push(answered.ms)
  }
  return { resumed, fresh }
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))] }
const median = (xs) => pct(xs, 0.5)
const result = { waiting: [], ended: [], latency: [] }
try {
  // first uses (compiled validators, prepared statements, the agent's module) are not a run's cost
  await batch(50, true)
  await batch(50, false)
  await latencies()
  for (let round = 0; round < rounds; round++) {
    // interleaved, the order swapped each round: what one batch leaves behind weighs on the other alike
    const order = round % 2 === 0 ? [false, true] : [true, false]
    for (const answer of order) result[answer ? 'ended' : 'waiting'].push(await cost(answer))
    const { resumed, fresh } = await latencies()
    result.latency.push({ answer_to_packet_ms: { p50: pct(resumed, 0.5), p99: pct(resumed, 0.99) }, request_to_packet_ms: { p50: pct(fresh, 0.5), p99: pct(fresh, 0.99) } })
  }
} finally {
  await app.close()
  data.remove()
}
const summary = {
  waiting: { heap_bytes_per_run: median(result.waiting.map((r) => r.heap_bytes_per_run)), rss_bytes_per_run: median(result.waiting.map((r) => r.rss_bytes_per_run)), resources_added: Math.max(...result.waiting.map((r) => r.resources_added)), runs_in_memory: Math.max(...result.waiting.map((r) => r.runs_in_memory)) },
  ended: { heap_bytes_per_run: median(result.ended.map((r) => r.heap_bytes_per_run)), rss_bytes_per_run: median(result.ended.map((r) => r.rss_bytes_per_run)), resources_added: Math.max(...result.ended.map((r) => r.resources_added)), runs_in_memory: Math.max(...result.ended.map((r) => r.runs_in_memory)) },
  answer_to_packet_ms: { p50: median(result.latency.map((l) => l.answer_to_packet_ms.p50)), p99: median(result.latency.map((l) => l.answer_to_packet_ms.p99)) },
  request_to_packet_ms: { p50: median(result.latency.map((l) => l.request_to_packet_ms.p50)), p99: median(result.latency.map((l) => l.request_to_packet_ms.p99)) }
}
const kib = (b) => `${(b / 1024).toFixed(2)} KiB`
console.log(`\n${runs} runs per batch, ${latency} answers per latency round, medians of ${rounds} rounds`)
console.log(`waiting runs: ${kib(summary.waiting.heap_bytes_per_run)} heap, ${kib(summary.waiting.rss_bytes_per_run)} RSS per run; ${summary.waiting.resources_added} timers/handles added; ${summary.waiting.runs_in_memory} runs in memory`)
console.log(`ended runs:   ${kib(summary.ended.heap_bytes_per_run)} heap, ${kib(summary.ended.rss_bytes_per_run)} RSS per run; ${summary.ended.resources_added} timers/handles added; ${summary.ended.runs_in_memory} runs in memory`)
console.log(`answer → next packet: p50 ${summary.answer_to_packet_ms.p50.toFixed(2)} ms, p99 ${summary.answer_to_packet_ms.p99.toFixed(2)} ms; new request → first packet: p50 ${summary.request_to_packet_ms.p50.toFixed(2)} ms, p99 ${summary.request_to_packet_ms.p99.toFixed(2)} ms (ratio p50 ${(summary.answer_to_packet_ms.p50 / summary.request_to_packet_ms.p50).toFixed(2)})`)
saveResult('interrupts', { settings: { runs, latency, rounds }, rounds: result, median: summary })
