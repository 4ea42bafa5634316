// One agent-host instance of bench/cluster.js, in its own process: on SQLite under a throwaway
// DATA_DIR, or with --database=<url> on that PostgreSQL database (any number of instances may share
// it; the DATA_DIR then holds only this instance's audit checkpoints). Prints one JSON line,
// {"url": ...}, once listening; SIGTERM closes the app and exits.
//   node bench/cluster-server.js [--database=postgres://...] [--smoke]
// --smoke: import src/*.ts instead of dist/ (needs a TypeScript loader in execArgv, as under tap).
import { load, tempDir } from './common.js'

const database = process.argv.find((a) => a.startsWith('--database='))?.slice('--database='.length) ?? ''
const { buildApp } = await load('app')
const { loadConfig } = await load('config')

const data = tempDir()
// the benchmark is the only caller: no rate limits, no load shedding, no task workers;
// DB_* settings from the environment pass through (DB_POOL_MAX, to measure pool sizes)
const settings = Object.fromEntries(Object.entries(process.env).filter(([key]) => key.startsWith('DB_')))
const app = await buildApp(loadConfig({ ...settings, DATABASE_URL: database, DATA_DIR: data.dir, LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '0', RATE_LIMIT_AGENT_MAX: '0', MAX_EVENT_LOOP_DELAY_MS: '0', MAX_STREAMS: '0', MAX_STREAMS_PER_CALLER: '0', WORKERS_PER_TYPE: '0' }))
await app.listen({ host: '127.0.0.1', port: 0 })
process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${app.server.address().port}` }) + '\n')
const stop = async () => { await app.close(); data.remove(); process.exit(0) }
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
