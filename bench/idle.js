// What an open, quiet stream costs: `--streams` SSE streams of the echo-stream agent held open and
// silent (one word, then a 5 s wait per word) with SSE_HEARTBEAT_MS=1000, measuring the server's
// resident memory per stream and its CPU while they idle (heartbeats only). With --compare=<dir>
// the same against another build, interleaved. Each server in its own process; this one holds the
// streams.
//   npm run build && node bench/idle.js [--streams=2000] [--seconds=5] [--rounds=3] [--compare=<dir>] [--smoke]
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { fileURLToPath } from 'node:url'
import { arg, saveResult, smoke, startServer } from './common.js'

const streams = arg('streams', 2000, 20)
const seconds = arg('seconds', 5, 1)
const rounds = arg('rounds', 3, 1)
const compare = process.argv.find((a) => a.startsWith('--compare='))?.slice(10)
const here = fileURLToPath(new URL('..', import.meta.url))
const ECHO_STREAM = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02'
const TICK = 100

async function start (build) {
  return await startServer('./assist-server.js', ['--target=assist', `--build=${build}`, ...(smoke ? ['--smoke'] : [])], { ...process.env, SSE_HEARTBEAT_MS: '1000' })
}

const rss = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024
const cpu = (pid) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) / TICK }
const session = randomUUID()

/** Open `streams` streams and wait until each has its first packet; returns them, to be destroyed. */
async function open (url) {
  const agent = new Agent({ keepAlive: false, maxSockets: Infinity })
  const held = []
  await Promise.all(Array.from({ length: streams }, async () => await new Promise((resolve, reject) => {
    const req = request(`${url}/v1/assist`, { method: 'POST', agent, headers: { 'content-type': 'application/json', accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8')
      let text = ''
      res.on('data', (c) => { text += c; if (text.includes('"op":"DELTA"')) resolve() })
      res.on('error', () => {})
    })
    req.on('error', reject)
    held.push(req)
    req.end(JSON.stringify({
      request_id: randomUUID(),
      context: { session_id: session, agent_id: ECHO_STREAM, user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
      payload: { session_id: session, payload: { query: 'idle '.repeat(100), delay_ms: 5000 } }
    }))
  })))
  return { close: () => { for (const req of held) req.destroy(); agent.destroy() } }
}

async function measure (server) {
  const before = rss(server.pid)
  const held = await open(server.url)
  const cpuBefore = cpu(server.pid)
  const started = performance.now()
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000))
  const cpuShare = (cpu(server.pid) - cpuBefore) / ((performance.now() - started) / 1000)
  const perStream = (rss(server.pid) - before) / streams
  held.close()
  // the streams' runs go on (continue policy) until their agents finish: wait for a quiet server
  await new Promise((resolve) => setTimeout(resolve, 500))
  return { rss_bytes_per_stream: perStream, cpu_share: cpuShare }
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }
const builds = compare === undefined ? [['after', here]] : [['after', here], ['before', compare]]
const results = Object.fromEntries(builds.map(([label]) => [label, []]))
for (let round = 0; round < rounds; round++) {
  for (const [label, build] of builds) {
    // a fresh server per round: memory freed by closed streams is not handed back to the OS at once
    const server = await start(build)
    try {
      results[label].push(await measure(server))
    } finally {
      await server.stop()
    }
  }
}
const summary = Object.fromEntries(Object.entries(results).map(([label, rs]) => [label, { rss_bytes_per_stream: median(rs.map((r) => r.rss_bytes_per_stream)), cpu_share: median(rs.map((r) => r.cpu_share)) }]))
console.log(`\n${streams} idle streams, 1 s heartbeats, ${seconds} s, medians of ${rounds} rounds`)
for (const [label, s] of Object.entries(summary)) console.log(`${label.padEnd(7)} ${(s.rss_bytes_per_stream / 1024).toFixed(1).padStart(7)} KiB RSS per stream  ${(s.cpu_share * 100).toFixed(1).padStart(5)} % of a core`)
saveResult('idle', { settings: { streams, seconds, rounds, compare: compare ?? null }, rounds: results, median: summary })
