// The host as an A2A server against the official A2A JS SDK's own server (a2a-server.js: @a2a-js/sdk
// with Express 5, its DefaultRequestHandler, in-memory task store and an echo executor), over
// JSON-RPC with A2A-Version: 1.0, in alternating rounds of one run:
// - SendMessage: requests per second (autocannon, a fresh messageId each) and the server's CPU per
//   request. The host's is a run of the echo agent with its full durability (journal, stored
//   answer, session, audit row); the SDK's answers a Message from memory.
// - SendStreamingMessage: `--streams` streams at once of `--packets` words each (the host's
//   echo-stream agent, no delay; the SDK's executor, one artifact-update a word, one turn each):
//   packets per second over the burst.
//   npm run build && node bench/a2a.js [--duration=5] [--connections=50] [--streams=100] [--packets=100] [--rounds=5] [--smoke]
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import autocannon from 'autocannon'
import { arg, saveResult, smoke, startServer } from './common.js'

const duration = arg('duration', 5, 0.25)
const connections = arg('connections', 50, 2)
const streams = arg('streams', 100, 3)
const packets = arg('packets', 100, 5)
const rounds = arg('rounds', 5, 1)
const ECHO = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01'
const ECHO_STREAM = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02'
const TICK = 100
const HEADERS = { 'content-type': 'application/json', 'a2a-version': '1.0' }

/** CPU seconds the process has used (user + system), from /proc. */
function cpuSeconds (pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) / TICK
}

const rpc = (method, message) => JSON.stringify({ jsonrpc: '2.0', id: randomUUID(), method, params: { message } })
const text = 'hello benchmark '.repeat(8)
const words = 'w '.repeat(packets)

/** SendMessage: autocannon, a fresh messageId per request; requests/s and the server's CPU per request. */
async function sendMessage (server, path, extra) {
  const before = cpuSeconds(server.pid)
  const result = await autocannon({
    url: `${server.url}${path}`,
    method: 'POST',
    connections,
    duration,
    headers: HEADERS,
    requests: [{ setupRequest: (req) => ({ ...req, body: rpc('SendMessage', { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...extra }) }) }]
  })
  const cpu = cpuSeconds(server.pid) - before
  const failed = result.non2xx + result.errors + result.timeouts
  if (failed > 0 || result.requests.total === 0) throw new Error(`${server.url}${path}: ${failed} failed of ${result.requests.total}`)
  return { rps: result.requests.average, p99_ms: result.latency.p99, cpu_us_per_request: cpu / result.requests.total * 1e6 }
}

/** One SendStreamingMessage: resolves once the stream ends, with the artifact updates it counted. */
function stream (url, path, message, agent) {
  return new Promise((resolve, reject) => {
    let body = ''
    const req = request(`${url}${path}`, { method: 'POST', agent, headers: { ...HEADERS, accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => {
        const got = (body.match(/"artifactUpdate"/g) ?? []).length
        if (res.statusCode !== 200 || got !== packets || !body.includes('TASK_STATE_COMPLETED')) reject(new Error(`${url}${path}: status ${res.statusCode}, ${got} of ${packets} chunks`))
        else resolve(got)
      })
    })
    req.on('error', reject)
    req.end(rpc('SendStreamingMessage', message()))
  })
}

/** Every stream at once: packets per second over the burst, and the server's CPU per packet. */
async function burst (server, path, message) {
  const agent = new Agent({ keepAlive: true, maxSockets: streams })
  const before = cpuSeconds(server.pid)
  const started = performance.now()
  const counts = await Promise.all(Array.from({ length: streams }, async () => await stream(server.url, path, message, agent)))
  const seconds = (performance.now() - started) / 1000
  agent.destroy()
  const total = counts.reduce((a, b) => a + b, 0)
  return { packets_per_second: total / seconds, cpu_us_per_packet: (cpuSeconds(server.pid) - before) / total * 1e6 }
}

const median = (values) => { const s = [...values].sort((a, b) => a - b); return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }

const servers = []
try {
  const host = await startServer('./assist-server.js', ['--target=assist', ...(smoke ? ['--smoke'] : [])])
  servers.push(host)
  const sdk = await startServer('./a2a-server.js', [])
  servers.push(sdk)
  const targets = {
    'host SendMessage': async () => await sendMessage(host, `/a2a/${ECHO}`, {}),
    'sdk SendMessage': async () => await sendMessage(sdk, '/', {}),
    'host SendStreamingMessage': async () => await burst(host, `/a2a/${ECHO_STREAM}`, () => ({ messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: words }, { data: { delay_ms: 0 } }] })),
    'sdk SendStreamingMessage': async () => await burst(sdk, '/', () => ({ messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: words }], metadata: { stream: true } }))
  }
  const results = Object.fromEntries(Object.keys(targets).map((name) => [name, []]))
  for (let round = 0; round < rounds; round++) {
    for (const [name, run] of Object.entries(targets)) results[name].push(await run())
  }
  const summary = Object.fromEntries(Object.entries(results).map(([name, rs]) => [name, Object.fromEntries(Object.keys(rs[0]).map((k) => [k, median(rs.map((r) => r[k]))]))]))
  console.log(`\nA2A over JSON-RPC, medians of ${rounds} rounds (SendMessage: ${connections} connections for ${duration} s; streams: ${streams} at once × ${packets} packets)`)
  for (const [name, s] of Object.entries(summary)) console.log(`${name.padEnd(28)} ${Object.entries(s).map(([k, v]) => `${k} ${v.toFixed(1)}`).join('   ')}`)
  const ratios = {
    'SendMessage requests/s host / sdk': summary['host SendMessage'].rps / summary['sdk SendMessage'].rps,
    'SendMessage CPU per request host / sdk': summary['host SendMessage'].cpu_us_per_request / summary['sdk SendMessage'].cpu_us_per_request,
    'SendStreamingMessage packets/s host / sdk': summary['host SendStreamingMessage'].packets_per_second / summary['sdk SendStreamingMessage'].packets_per_second,
    'SendStreamingMessage CPU per packet host / sdk': summary['host SendStreamingMessage'].cpu_us_per_packet / summary['sdk SendStreamingMessage'].cpu_us_per_packet
  }
  console.log('')
  for (const [name, value] of Object.entries(ratios)) console.log(`${name.padEnd(48)} ${value.toFixed(3)}`)
  saveResult('a2a', { settings: { duration, connections, streams, packets, rounds }, rounds: results, median: summary, ratios })
} finally {
  await Promise.all(servers.map(async (s) => await s.stop()))
}
