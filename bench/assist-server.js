// One server under test, in its own process (so the load generator does not share its event loop).
// Prints one JSON line, {"url": ...}, once listening. Killed by the benchmark when it is done.
//   node bench/assist-server.js --build=<dir> --target=assist|bare [--smoke]
// --build: a checkout holding dist/ (default: this repository); --smoke: import src/*.ts instead of
// dist/ (needs a TypeScript loader in execArgv, as under tap).
import { resolve } from 'node:path'
import Fastify from 'fastify'
import { load as loadFrom, tempDir } from './common.js'

const option = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback
const build = resolve(option('build', new URL('..', import.meta.url).pathname))
const target = option('target', 'assist')
const load = async (path) => await loadFrom(path, build)

const data = tempDir()
let app
if (target === 'bare') {
  // the fairest floor: Fastify with the same envelope schema, answering a small JSON object
  const { ServiceRequest } = await load('protocol/envelope')
  app = Fastify({ logger: false })
  app.post('/v1/assist', { schema: { body: ServiceRequest } }, async (request) => ({ request_id: request.body.request_id, output: { echo: request.body.payload.payload.query } }))
} else {
  const { buildApp } = await load('app')
  const { loadConfig } = await load('config')
  // the benchmark is the only caller: no rate limits, no load shedding
  // DB_*, SSE_*, SESSION_SEARCH and AUDIT_RUNS from the environment pass through, to measure settings against each other
  const settings = Object.fromEntries(Object.entries(process.env).filter(([key]) => key.startsWith('DB_') || key.startsWith('SSE_') || key === 'SESSION_SEARCH' || key === 'AUDIT_RUNS'))
  app = await buildApp(loadConfig({ ...settings, DATA_DIR: data.dir, LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '0', RATE_LIMIT_AGENT_MAX: '0', MAX_EVENT_LOOP_DELAY_MS: '0', MAX_STREAMS: '0', MAX_STREAMS_PER_CALLER: '0', WORKERS_PER_TYPE: '0' }))
}
await app.listen({ host: '127.0.0.1', port: 0 })
process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${app.server.address().port}` }) + '\n')
const stop = async () => { await app.close(); data.remove(); process.exit(0) }
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
