// One agent-host instance of bench/model-budgets.js, in its own process: the bench's looper agent
// (model-budgets-agents/) on the OpenAI-compatible provider at --provider, with the model budgets of
// --budgets (a BUDGETS_FILE; none when not given), on SQLite under a throwaway DATA_DIR or with
// --database=<url> on that PostgreSQL database. Prints one JSON line, {"url": ...}, once listening;
// SIGTERM closes the app and exits.
//   node bench/model-budgets-server.js --provider=<url> [--budgets=<file>] [--database=<url>] [--smoke]
// --smoke: import src/*.ts instead of dist/ (needs a TypeScript loader in execArgv, as under tap).
import { fileURLToPath } from 'node:url'
import { load, tempDir } from './common.js'

const option = (name) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
const { buildApp } = await load('app')
const { loadConfig } = await load('config')

const data = tempDir()
// the benchmark is the only caller: no rate limits, no load shedding, no task workers; the provider
// reports 100 tokens a call (60 in, 40 out) of a model LLM_PRICES prices, so every call costs something
const app = await buildApp(loadConfig({
  AGENTS_DIR: fileURLToPath(new URL('./model-budgets-agents/', import.meta.url)),
  DATA_DIR: data.dir,
  DATABASE_URL: option('database') ?? '',
  BUDGETS_FILE: option('budgets') ?? '',
  LLM_PROVIDER: 'openai',
  OPENAI_BASE_URL: `${option('provider')}/v1`,
  OPENAI_MODEL: 'bench-model',
  LLM_MAX_RETRIES: '0',
  LLM_PRICES: JSON.stringify({ 'bench-model': { input: 1, output: 2 } }),
  LOG_LEVEL: 'silent',
  RATE_LIMIT_MAX: '0',
  RATE_LIMIT_AGENT_MAX: '0',
  MAX_EVENT_LOOP_DELAY_MS: '0',
  MAX_STREAMS: '0',
  MAX_STREAMS_PER_CALLER: '0',
  WORKERS_PER_TYPE: '0'
}))
await app.listen({ host: '127.0.0.1', port: 0 })
process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${app.server.address().port}` }) + '\n')
const stop = async () => { await app.close(); data.remove(); process.exit(0) }
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
