// The cost table (issue 33): where the server's CPU goes per request, by phase, and what it writes to
// disk, for a JSON request, an SSE request, an A2A SendMessage and an MCP tools/call of the echo
// agents. Each target gets a server of its own (bench/assist-server.js) under `node --cpu-prof`,
// loaded for `--duration` seconds (autocannon; the MCP SDK's client for MCP). Every CPU sample is
// given to the phase of the innermost frame on its stack that names one (a SQLite call made by the
// audit log is the audit chain's, one made by the group writer the journal's); the bytes written are
// the process's `write_bytes` (/proc/<pid>/io: what reached the disk, WAL and checkpoints included).
//   npm run build && node bench/cost.js [--duration=10] [--connections=50] [--targets=json,sse,a2a,mcp] [--verbose] [--smoke]
// --verbose: each phase's five heaviest functions (self time) under it (the result file has them always).
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { arg, childExecArgv, saveResult, smoke } from './common.js'

const duration = arg('duration', 10, 0.5)
const connections = arg('connections', 50, 2)
const targets = (process.argv.find((a) => a.startsWith('--targets='))?.slice(10) ?? 'json,sse,a2a,mcp').split(',')
const ECHO = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01'
const ECHO_STREAM = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02'
const TICK = 100
const verbose = process.argv.includes('--verbose')

/**
 * The phases, in the order a request meets them; a frame belongs to the first rule its script URL
 * matches. A frame no rule names (a native call such as SQLite's or JSON.stringify, a library no rule
 * names) takes the phase of its caller: SQLite's time is the journal's under the group writer, the
 * session's under the session store. What is left, `native and node internals`, ran with no host or
 * named library code on its stack (timers, the microtask queue, the module loader).
 */
const PHASES = [
  ['parse and validate', /ajv|secure-json-parse|content-type-parser|\/plugins\/validation|\/protocol\//],
  ['auth and limits', /\/auth\/|rate-limit|\/plugins\/(auth|limits|load|dns-rebinding)/],
  ['audit chain', /\/storage\/(sqlite|postgres)\/audit|\/storage\/audit/],
  ['session interaction and search index', /\/storage\/(sqlite|postgres)\/sessions|\/storage\/sessions/],
  ['journal and run records (group commit)', /group-writer|run-ledger|\/storage\/sqlite\/runs|\/storage\/postgres\/runs|\/storage\/sqlite\/checkpointer/],
  ['answer serialization', /\/http\/serializers|fast-json-stringify/],
  ['SSE writing', /\/http\/sse-writer|\/routes\/sse|\/assist\/frame-queue/],
  ['A2A binding (ours and the SDK)', /\/a2a\/|@a2a-js/],
  ['MCP binding (ours and the SDK)', /\/mcp\/|@modelcontextprotocol/],
  ['the agent', /\/agents\/(echo|echo-stream)\/|\/src\/agents\//],
  ['run engine (start, deliver, finish)', /\/assist\//],
  ['logging (pino)', /pino|sonic-boom/],
  ['fastify (routing, hooks, reply)', /fastify|find-my-way|avvio|light-my-request/],
  ['socket and HTTP (node)', /node:_http|node:http|node:net|node:stream|node:internal\/streams|node:internal\/http/],
  ['routes', /\/src\/routes\//],
  ['plugins (request hooks: trace, identity, metrics)', /\/src\/plugins\//],
  ['other host code', /\/dist\/src\/|\/src\//]
]
const SPECIAL = new Set(['(idle)', '(program)', '(garbage collector)'])

/** CPU seconds of a process (user + system), from /proc. */
function cpuSeconds (pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) / TICK
}
/** Bytes the process caused to be written to storage (/proc/<pid>/io). */
const writeBytes = (pid) => Number(/write_bytes: (\d+)/.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))[1])

const session = randomUUID()
const envelope = (agent, payload) => JSON.stringify({
  request_id: randomUUID(),
  context: { session_id: session, agent_id: agent, user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
  payload: { session_id: session, payload }
})

/** Load `url` for `duration` s; the requests answered. */
async function cannon (url, headers, body) {
  const result = await autocannon({ url, method: 'POST', connections, duration, headers, requests: [{ setupRequest: (req) => ({ ...req, body: body() }) }] })
  const failed = result.non2xx + result.errors + result.timeouts
  if (failed > 0 || result.requests.total === 0) throw new Error(`${url}: ${failed} failed of ${result.requests.total}`)
  return result.requests.total
}

const LOADS = {
  json: async (url) => await cannon(`${url}/v1/assist`, { 'content-type': 'application/json', accept: 'application/json' }, () => envelope(ECHO, { query: 'hello benchmark '.repeat(36) })),
  sse: async (url) => await cannon(`${url}/v1/assist`, { 'content-type': 'application/json', accept: 'text/event-stream' }, () => envelope(ECHO_STREAM, { query: 'one two three four five six seven eight', delay_ms: 0 })),
  a2a: async (url) => await cannon(`${url}/a2a/${ECHO}`, { 'content-type': 'application/json', 'a2a-version': '1.0' }, () => JSON.stringify({ jsonrpc: '2.0', id: randomUUID(), method: 'SendMessage', params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'hello benchmark '.repeat(8) }] } } })),
  mcp: async (url) => {
    const clients = await Promise.all(Array.from({ length: Math.min(connections, 20) }, async () => {
      const client = new Client({ name: 'bench', version: '1.0.0' })
      await client.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`)))
      return client
    }))
    let calls = 0
    const end = performance.now() + duration * 1000
    await Promise.all(clients.map(async (client) => {
      while (performance.now() < end) {
        const result = await client.callTool({ name: 'echo', arguments: { query: 'hello benchmark' } })
        if (result.isError === true) throw new Error(JSON.stringify(result))
        calls++
      }
    }))
    await Promise.all(clients.map(async (client) => await client.close()))
    return calls
  }
}

/** One target: its server under the CPU profiler, loaded; the phases' CPU per request. */
async function measure (target) {
  const profiles = mkdtempSync(join(tmpdir(), 'agent-host-cost-'))
  const child = spawn(process.execPath, [...childExecArgv, '--cpu-prof', `--cpu-prof-dir=${profiles}`, fileURLToPath(new URL('./assist-server.js', import.meta.url)), '--target=assist', ...(smoke ? ['--smoke'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] })
  try {
    let out = ''
    child.stdout.on('data', (c) => { out += c })
    while (!out.includes('\n')) {
      if (child.exitCode !== null) throw new Error('the server exited')
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    const url = JSON.parse(out).url
    // one warm-up request of each kind is not counted: compiled validators, prepared statements
    await LOADS[target](url).catch(() => {})
    const cpuBefore = cpuSeconds(child.pid)
    const bytesBefore = writeBytes(child.pid)
    const startedAt = performance.now()
    const requests = await LOADS[target](url)
    const seconds = (performance.now() - startedAt) / 1000
    const cpu = cpuSeconds(child.pid) - cpuBefore
    const bytes = writeBytes(child.pid) - bytesBefore
    child.kill('SIGTERM')
    await once(child, 'exit')
    const file = readdirSync(profiles).find((f) => f.endsWith('.cpuprofile'))
    const { phases, top } = phasesOf(JSON.parse(readFileSync(join(profiles, file), 'utf8')))
    return { requests, rps: requests / seconds, cpu_us_per_request: cpu / requests * 1e6, disk_bytes_per_request: bytes / requests, phases, top }
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL')
    rmSync(profiles, { recursive: true, force: true })
  }
}

/** Self time per phase (µs, the whole profile: warm-up included, so the shares are what counts). */
function phasesOf (profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const parent = new Map()
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id)
  const phaseOfNode = new Map()
  const phaseOf = (id) => {
    if (phaseOfNode.has(id)) return phaseOfNode.get(id)
    const { url, functionName } = byId.get(id).callFrame
    let phase = SPECIAL.has(functionName) ? functionName : PHASES.find(([, re]) => re.test(url))?.[0]
    if (phase === undefined) {
      const up = parent.get(id)
      phase = up === undefined ? 'native and node internals' : phaseOf(up)
    }
    phaseOfNode.set(id, phase)
    return phase
  }
  const phases = {}
  const functions = new Map()
  for (let i = 0; i < profile.samples.length; i++) {
    const phase = phaseOf(profile.samples[i])
    const us = profile.timeDeltas[i] ?? 0
    phases[phase] = (phases[phase] ?? 0) + us
    const { url, functionName, lineNumber } = byId.get(profile.samples[i]).callFrame
    const key = `${phase}\u0000${functionName || '(anonymous)'} ${url.split('/').slice(-2).join('/')}:${lineNumber + 1}`
    functions.set(key, (functions.get(key) ?? 0) + us)
  }
  // each phase's heaviest functions (self time), where to look first
  const top = {}
  for (const [key, us] of [...functions].sort((a, b) => b[1] - a[1])) {
    const [phase, fn] = key.split('\u0000')
    top[phase] ??= []
    if (top[phase].length < 5) top[phase].push([fn, us])
  }
  return { phases, top }
}

const results = {}
for (const target of targets) results[target] = await measure(target)

for (const [target, r] of Object.entries(results)) {
  const busy = Object.entries(r.phases).filter(([phase]) => phase !== '(idle)').reduce((sum, [, us]) => sum + us, 0)
  console.log(`\n${target}: ${r.requests} requests, ${r.rps.toFixed(0)}/s; ${r.cpu_us_per_request.toFixed(0)} µs of CPU and ${(r.disk_bytes_per_request / 1024).toFixed(1)} KiB written per request`)
  for (const [phase, us] of Object.entries(r.phases).filter(([phase]) => phase !== '(idle)').sort((a, b) => b[1] - a[1])) {
    const share = us / busy
    console.log(`${(share * 100).toFixed(1).padStart(6)} %  ${(share * r.cpu_us_per_request).toFixed(1).padStart(7)} µs  ${phase}`)
    if (verbose) for (const [fn, self] of r.top[phase] ?? []) console.log(`${' '.repeat(22)}${(self / busy * r.cpu_us_per_request).toFixed(1).padStart(6)} µs  ${fn}`)
  }
}
saveResult('cost', { settings: { duration, connections, targets }, results })
