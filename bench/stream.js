// One long SSE stream: `--packets` DELTAs of the echo-stream agent (no delay) through POST /v1/assist,
// every packet journaled, against a bare node:http server writing the very same frames in a
// res.write loop. Each server in its own process, this one reads; interleaved rounds, medians.
//   npm run build && node bench/stream.js [--packets=20000] [--rounds=5] [--build=<dir>] [--smoke]
// --build: the host from another checkout with its own dist/ (to measure a change against the code before it)
import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { request } from 'node:http'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { arg, saveResult, smoke, startServer, tempDir } from './common.js'

const packets = arg('packets', 20000, 200)
const rounds = arg('rounds', 5, 1)
const ECHO_STREAM = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02'
const build = process.argv.find((a) => a.startsWith('--build='))?.slice(8) ?? fileURLToPath(new URL('..', import.meta.url))

const start = async (script, args) => await startServer(script, args)

const session = randomUUID()
const body = () => JSON.stringify({
  request_id: randomUUID(),
  context: { session_id: session, agent_id: ECHO_STREAM, user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
  payload: { session_id: session, payload: { query: 'w '.repeat(packets), delay_ms: 0 } }
})

/** POST, read the whole stream; resolves with its text and timings. */
function read (url) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    let text = ''
    const req = request(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (c) => { text += c })
      res.on('end', () => {
        const deltas = (text.match(/"op":"DELTA"/g) ?? []).length
        if (res.statusCode !== 200 || deltas !== packets) reject(new Error(`${url}: status ${res.statusCode}, ${deltas} of ${packets} deltas`))
        else resolve({ text, seconds: (performance.now() - started) / 1000 })
      })
    })
    req.on('error', reject)
    req.end(body())
  })
}

const data = tempDir()
const host = await start('./assist-server.js', ['--target=assist', `--build=${build}`, ...(smoke ? ['--smoke'] : [])])
let raw
try {
  // the raw server replays exactly what the host sent once
  const { text } = await read(host.url)
  const frames = text.split(/(?<=\n\n)/).filter((f) => f.trim() !== '')
  const file = join(data.dir, 'frames.jsonl')
  writeFileSync(file, frames.map((f) => JSON.stringify(f)).join('\n') + '\n')
  raw = await start('./raw-server.js', [`--frames=${file}`])
  const results = { host: [], raw: [] }
  for (let round = 0; round < rounds; round++) {
    for (const [name, target] of [['host', host], ['raw', raw]]) {
      const { seconds } = await read(target.url)
      results[name].push({ seconds, packetsPerSecond: frames.length / seconds })
    }
  }
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }
  const summary = Object.fromEntries(Object.entries(results).map(([name, rs]) => [name, { packetsPerSecond: median(rs.map((r) => r.packetsPerSecond)) }]))
  const ratio = summary.host.packetsPerSecond / summary.raw.packetsPerSecond
  console.log(`\n${frames.length} frames a stream, medians of ${rounds} rounds`)
  console.log(`host (/v1/assist, journaled)  ${summary.host.packetsPerSecond.toFixed(0).padStart(8)} packets/s`)
  console.log(`raw res.write loop            ${summary.raw.packetsPerSecond.toFixed(0).padStart(8)} packets/s`)
  console.log(`host / raw                    ${ratio.toFixed(3)}`)
  saveResult('stream', { settings: { packets, rounds, frames: frames.length, build }, rounds: results, median: summary, ratios: { 'host / raw': ratio } })
} finally {
  await host.stop()
  await raw?.stop()
  data.remove()
}
