// Many streams at once: `--streams` concurrent SSE requests, each `--packets` DELTAs of the
// echo-stream agent (no delay) through POST /v1/assist, against raw-server.js writing the very same
// frames with one event-loop turn per frame, and against the official A2A JS SDK's
// SendStreamingMessage of the same words (a2a-server.js: one artifact-update per word, one turn each).
// Measures time to first packet (its first `data:` line; p50, p99) and packets per second over the whole burst.
// Each server in its own process, this one is the client; interleaved rounds, medians.
//   npm run build && node bench/fanout.js [--streams=200] [--packets=200] [--rounds=5] [--compare=<dir>] [--no-a2a] [--smoke]
// --compare: the host from another checkout with its own dist/ runs too, as `before`, in the same
// interleaved rounds (to measure a change against the code before it); --no-a2a leaves the A2A SDK out
// (a change measured against the code before it needs many rounds, and the SDK's burst is the longest)
import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { join } from 'node:path'
import { arg, saveResult, smoke, startServer, tempDir } from './common.js'

const streams = arg('streams', 200, 5)
const packets = arg('packets', 200, 10)
const rounds = arg('rounds', 5, 1)
const ECHO_STREAM = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02'
const words = 'w '.repeat(packets)
const compare = process.argv.find((a) => a.startsWith('--compare='))?.slice(10)

const start = async (script, args) => await startServer(script, args)

const session = randomUUID()
const targets = {
  host: {
    path: '/v1/assist',
    headers: { accept: 'text/event-stream' },
    body: () => JSON.stringify({
      request_id: randomUUID(),
      context: { session_id: session, agent_id: ECHO_STREAM, user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
      payload: { session_id: session, payload: { query: words, delay_ms: 0 } }
    }),
    count: (text) => (text.match(/"op":"DELTA"/g) ?? []).length
  },
  a2a: {
    path: '/',
    headers: { accept: 'text/event-stream', 'a2a-version': '1.0' },
    body: () => JSON.stringify({ jsonrpc: '2.0', id: randomUUID(), method: 'SendStreamingMessage', params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: words }], metadata: { stream: true } } } }),
    count: (text) => (text.match(/"artifactUpdate"/g) ?? []).length
  }
}
targets.raw = { ...targets.host }
targets.before = { ...targets.host }

/**
 * One stream: resolves with ms to its first packet (the first `data:` line: not the headers, nor the
 * `retry:` line the host writes before any packet), the packets it counted and its frames.
 */
function one (url, target, agent) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    let first
    let text = ''
    const req = request(`${url}${target.path}`, { method: 'POST', agent, headers: { 'content-type': 'application/json', ...target.headers } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (c) => {
        text += c
        if (first === undefined && text.includes('data:')) first = performance.now() - started
      })
      res.on('end', () => {
        const got = target.count(text)
        if (res.statusCode !== 200 || got !== packets) reject(new Error(`${url}: status ${res.statusCode}, ${got} of ${packets} packets`))
        else resolve({ first, frames: text.split(/(?<=\n\n)/).filter((f) => f.trim() !== '' && !f.startsWith(':')).length, text })
      })
    })
    req.on('error', reject)
    req.end(target.body())
  })
}

const percentile = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))] }
const median = (xs) => percentile(xs, 0.5)

/** A burst: every stream at once; time to first packet per stream, and packets per second overall. */
async function burst (url, target) {
  const agent = new Agent({ keepAlive: true, maxSockets: streams })
  const started = performance.now()
  const all = await Promise.all(Array.from({ length: streams }, async () => await one(url, target, agent)))
  const seconds = (performance.now() - started) / 1000
  agent.destroy()
  const firsts = all.map((r) => r.first)
  return { p50: percentile(firsts, 0.5), p99: percentile(firsts, 0.99), packetsPerSecond: all.reduce((n, r) => n + r.frames, 0) / seconds, sample: all[0].text }
}

const data = tempDir()
const servers = []
try {
  const host = await start('./assist-server.js', ['--target=assist', ...(smoke ? ['--smoke'] : [])])
  servers.push(host)
  // the raw server replays exactly the frames the host sent for one such stream
  const { text } = await one(host.url, targets.host, undefined)
  const file = join(data.dir, 'frames.jsonl')
  writeFileSync(file, text.split(/(?<=\n\n)/).filter((f) => f.trim() !== '').map((f) => JSON.stringify(f)).join('\n') + '\n')
  const raw = await start('./raw-server.js', [`--frames=${file}`, '--turns'])
  const a2a = await start('./a2a-server.js', [])
  servers.push(raw, a2a)
  const urls = { host: host.url, raw: raw.url, a2a: a2a.url }
  const results = { host: [], raw: [], a2a: [] }
  if (process.argv.includes('--no-a2a')) delete results.a2a
  if (compare !== undefined) {
    const before = await start('./assist-server.js', ['--target=assist', `--build=${compare}`])
    servers.push(before)
    urls.before = before.url
    results.before = []
  }
  const names = Object.keys(results)
  for (let round = 0; round < rounds; round++) {
    // each round starts with the next target: no target always runs right after the same one
    for (const name of [...names.slice(round % names.length), ...names.slice(0, round % names.length)]) {
      const { sample, ...r } = await burst(urls[name], targets[name])
      results[name].push(r)
    }
  }
  const summary = Object.fromEntries(Object.entries(results).map(([name, rs]) => [name, {
    ttfp_p50_ms: median(rs.map((r) => r.p50)),
    ttfp_p99_ms: median(rs.map((r) => r.p99)),
    packetsPerSecond: median(rs.map((r) => r.packetsPerSecond))
  }]))
  console.log(`\n${streams} streams × ${packets} packets at once, medians of ${rounds} rounds`)
  console.log('target   first packet p50 ms   p99 ms   packets/s')
  for (const [name, s] of Object.entries(summary)) console.log(`${name.padEnd(8)} ${s.ttfp_p50_ms.toFixed(1).padStart(20)} ${s.ttfp_p99_ms.toFixed(1).padStart(8)} ${s.packetsPerSecond.toFixed(0).padStart(11)}`)
  const ratios = {
    'time to first packet p50 host / raw': summary.host.ttfp_p50_ms / summary.raw.ttfp_p50_ms,
    'time to first packet p99 host / raw': summary.host.ttfp_p99_ms / summary.raw.ttfp_p99_ms,
    ...(summary.a2a === undefined ? {} : { 'packets/s host / a2a': summary.host.packetsPerSecond / summary.a2a.packetsPerSecond }),
    'packets/s host / raw': summary.host.packetsPerSecond / summary.raw.packetsPerSecond,
    ...(compare === undefined
      ? {}
      : {
          'time to first packet p50 host / before': summary.host.ttfp_p50_ms / summary.before.ttfp_p50_ms,
          'time to first packet p99 host / before': summary.host.ttfp_p99_ms / summary.before.ttfp_p99_ms,
          'packets/s host / before': summary.host.packetsPerSecond / summary.before.packetsPerSecond
        })
  }
  console.log('')
  for (const [name, value] of Object.entries(ratios)) console.log(`${name.padEnd(38)} ${value.toFixed(3)}`)
  saveResult('fanout', { settings: { streams, packets, rounds, compare: compare ?? null }, rounds: results, median: summary, ratios })
} finally {
  await Promise.all(servers.map(async (s) => await s.stop()))
  data.remove()
}
