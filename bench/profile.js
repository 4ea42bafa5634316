// Where a server's time goes under load: runs bench/assist-server.js under `node --cpu-prof`, loads it
// with autocannon, and prints the CPU profile's self time by area (SQLite, the engine, Fastify, ...)
// and its top functions, per request.
//   npm run build && node bench/profile.js [--accept=json|sse] [--duration=10] [--connections=50] [--build=<dir>] [--top=25]
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { arg } from './common.js'

const option = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback
const accept = option('accept', 'json') === 'sse' ? 'text/event-stream' : 'application/json'
const build = option('build', fileURLToPath(new URL('..', import.meta.url)))
const duration = arg('duration', 10)
const connections = arg('connections', 50)
const profiles = mkdtempSync(join(tmpdir(), 'agent-host-prof-'))

const child = spawn(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${profiles}`, fileURLToPath(new URL('./assist-server.js', import.meta.url)), `--build=${build}`], { stdio: ['ignore', 'pipe', 'inherit'] })
let out = ''
child.stdout.on('data', (c) => { out += c })
while (!out.includes('\n')) await new Promise((resolve) => setTimeout(resolve, 20))
const url = JSON.parse(out).url
const session = randomUUID()
const envelope = () => JSON.stringify({
  request_id: randomUUID(),
  context: { session_id: session, agent_id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01', user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
  payload: { session_id: session, payload: { query: 'hello benchmark '.repeat(36) } }
})
const result = await autocannon({ url: `${url}/v1/assist`, method: 'POST', connections, duration, headers: { 'content-type': 'application/json', accept }, requests: [{ setupRequest: (req) => ({ ...req, body: envelope() }) }] })
child.kill('SIGTERM')
await once(child, 'exit')

const file = readdirSync(profiles).find((f) => f.endsWith('.cpuprofile'))
const profile = JSON.parse(readFileSync(join(profiles, file), 'utf8'))
rmSync(profiles, { recursive: true, force: true })
const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const self = new Map()
const deltas = profile.timeDeltas
for (let i = 0; i < profile.samples.length; i++) self.set(profile.samples[i], (self.get(profile.samples[i]) ?? 0) + (deltas[i] ?? 0))
const AREAS = [
  ['sqlite (better-sqlite3)', /better-sqlite3/], ['engine (src/assist)', /\/assist\//], ['storage (src/storage)', /\/storage\//],
  ['agents and the echo agent', /\/agents\//], ['fastify and its plugins', /fastify|avvio|light-my-request|find-my-way/],
  ['validation (ajv)', /ajv/], ['logging (pino)', /pino/], ['http (node)', /node:_http|node:http|node:net|node:stream/],
  ['other host code', /\/dist\/src\/|\/src\//]
]
const areas = new Map()
const functions = new Map()
let total = 0
for (const [id, us] of self) {
  const node = byId.get(id)
  const { url: where, functionName } = node.callFrame
  total += us
  if (functionName === '(idle)' || functionName === '(program)' || functionName === '(garbage collector)') {
    areas.set(functionName, (areas.get(functionName) ?? 0) + us)
    continue
  }
  const area = (AREAS.find(([, re]) => re.test(where)) ?? ['native and node internals'])[0]
  areas.set(area, (areas.get(area) ?? 0) + us)
  const key = `${functionName || '(anonymous)'} ${where.split('/').slice(-2).join('/')}:${node.callFrame.lineNumber + 1}`
  functions.set(key, (functions.get(key) ?? 0) + us)
}
const requests = result.requests.total
console.log(`${requests} requests (${accept}), ${(result.requests.average).toFixed(0)} req/s; profile ${(total / 1e6).toFixed(1)} s`)
console.log('\nself time by area, µs per request')
for (const [area, us] of [...areas].sort((a, b) => b[1] - a[1])) console.log(`${(us / requests).toFixed(1).padStart(8)}  ${area}`)
console.log('\ntop functions, µs per request')
for (const [fn, us] of [...functions].sort((a, b) => b[1] - a[1]).slice(0, Number(option('top', 25)))) console.log(`${(us / requests).toFixed(1).padStart(8)}  ${fn}`)
