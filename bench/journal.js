// What the stream journal costs: SSE packets per second through a real socket, with the run's
// packets journaled to SQLite and without, alternating rounds in one process.
// Run: npm run build && node bench/journal.js   Options: --packets=<per run> --rounds=<n>
import { createServer, get } from 'node:http'
import { randomUUID } from 'node:crypto'
import { AssistRun } from '../dist/src/agents/assist-run.js'
import { hostAgent } from '../dist/src/agents/hosted-agent.js'
import { SseWriter } from '../dist/src/http/sse-writer.js'
import { openDatabase } from '../dist/src/storage/database.js'
import { RunStore } from '../dist/src/storage/runs.js'
import { arg, mean, saveResult, tempDir } from './common.js'

const packets = arg('packets', 20000)
const rounds = arg('rounds', 4)
const data = tempDir()
const db = openDatabase(data.dir)
const store = new RunStore(db)
const silent = { trace () {}, debug () {}, info () {}, warn () {}, error () {}, fatal () {} }
const hosted = hostAgent({
  manifest: { metadata: { id: randomUUID(), name: 'flood', version: '1.0.0', author: 'bench', created_at: new Date().toISOString() } },
  async assist (request, session, response) {
    const stream = await response.create_stream('flood')
    const chunk = 'token '
    for (let i = 0; i < packets; i++) await stream.write(chunk)
    await stream.close()
  }
}, 'bench')

let journaled = true
const server = createServer((req, res) => {
  const requestId = randomUUID()
  const run = new AssistRun({
    requestId,
    capability: hosted.capabilities[0],
    log: silent,
    recorder: journaled ? { packet: (ord, streamId, seq, json) => store.append(requestId, { ord, stream_id: streamId, seq, frame: json }), flush: () => store.flush(), event () {}, audit () {} } : undefined
  })
  if (journaled) {
    store.start({ request_id: requestId, envelope_hash: '', envelope: '{}', session_id: 's', agent_id: 'a', main_stream_id: run.mainStreamId, owner_instance: 'bench', owner_pid: process.pid })
  }
  run.attach(new SseWriter(res, { heartbeatMs: 15000, retryMs: 0, maxBufferBytes: 64 * 2 ** 20, onGone: () => {} }))
  run.execute(hosted.agent, { payload: {} }, {}).then(() => { if (journaled) store.finish(requestId, 'done', 200, {}) })
})
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
const url = `http://127.0.0.1:${server.address().port}/`

async function once (withJournal) {
  journaled = withJournal
  const started = performance.now()
  const bytes = await new Promise((resolve, reject) => {
    get(url, (res) => {
      let n = 0
      res.on('data', (c) => { n += c.length })
      res.on('end', () => resolve(n))
    }).on('error', reject)
  })
  const seconds = (performance.now() - started) / 1000
  return { journal: withJournal, packets: packets + 3, seconds, packetsPerSecond: (packets + 3) / seconds, bytes }
}

await once(true)
await once(false)
const results = []
for (let i = 0; i < rounds; i++) results.push(await once(i % 2 === 0), await once(i % 2 !== 0))
server.close()
db.close()
data.remove()

console.log('round  journal  packets/s')
results.forEach((r, i) => console.log(`${String(Math.floor(i / 2) + 1).padEnd(6)} ${String(r.journal).padEnd(8)} ${r.packetsPerSecond.toFixed(0).padStart(9)}`))
const withJournal = mean(results.filter((r) => r.journal).map((r) => r.packetsPerSecond))
const without = mean(results.filter((r) => !r.journal).map((r) => r.packetsPerSecond))
console.log(`\nmean packets/s: with journal ${withJournal.toFixed(0)}, without ${without.toFixed(0)}; ratio with/without = ${(withJournal / without).toFixed(3)}`)
saveResult('journal', { settings: { packets, rounds }, rounds: results, mean: { withJournal, without }, ratio: withJournal / without })
