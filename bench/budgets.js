// The speed budgets the issues set (33: the request path; 34: the front-end projections; 35: MCP on two instances) in one table: each with the figure the benchmark that
// measures it wrote last (its `<name>-latest.json` in bench/results/, or BENCH_RESULTS_DIR), the
// budget, whether it is met, and the commit and date of the figure. It starts no server: it runs
// last in `npm run bench` and reads what the others just wrote. A row whose result file or figure is
// missing (PostgreSQL was not available, the bench was not run) is `not measured`, and a figure from
// a smoke run or other sizes than the budget's is shown but not judged; neither is met nor missed.
//   npm run bench, or after some of its benches: node bench/budgets.js [--smoke]
// --smoke: the same (npm test runs it in a results directory of its own: every row not measured).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { resultsDir, saveResult } from './common.js'

// `path` leads to the figure in `<file>-latest.json` (an object in it picks the array element with
// those fields), `per` to its divisor; `settings` are the sizes the budget is for; budgets in `unit`
const BUDGETS = [
  { scenario: '/v1/assist JSON, echo, 50 connections', measure: 'req/s vs A2A SDK SendMessage', file: 'assist', path: ['ratios', 'after json / a2a SendMessage'], settings: { connections: 50 }, unit: '×', min: 1.5 },
  { scenario: '/v1/assist JSON, echo, 50 connections', measure: 'req/s vs bare Fastify route', file: 'assist', path: ['ratios', 'after json / bare'], settings: { connections: 50 }, unit: '×', min: 0.25 },
  { scenario: '200 SSE streams × 200 packets', measure: 'first packet p50 vs raw SSE', file: 'fanout', path: ['ratios', 'time to first packet p50 host / raw'], settings: { streams: 200, packets: 200 }, unit: '×', max: 1.5 },
  { scenario: '200 SSE streams × 200 packets', measure: 'first packet p99 vs raw SSE', file: 'fanout', path: ['ratios', 'time to first packet p99 host / raw'], settings: { streams: 200, packets: 200 }, unit: '×', max: 1.5 },
  { scenario: 'one stream of 20 000 DELTAs', measure: 'packets/s vs raw res.write', file: 'stream', path: ['ratios', 'host / raw'], settings: { packets: 20000 }, unit: '×', min: 0.70 },
  { scenario: '2 000 idle SSE streams', measure: 'RSS per stream', file: 'idle', path: ['median', 'after', 'rss_bytes_per_stream'], settings: { streams: 2000 }, unit: 'KiB', max: 24 },
  { scenario: '2 000 idle SSE streams', measure: 'server CPU (of a core)', file: 'idle', path: ['median', 'after', 'cpu_share'], settings: { streams: 2000 }, unit: '%', max: 8 },
  { scenario: '/v1/assist JSON, echo', measure: 'disk written per request', file: 'assist', path: ['median', 'after json', 'disk_bytes_per_request'], unit: 'KiB', max: 16 },
  { scenario: 'A2A SendMessage', measure: 'req/s vs the SDK\'s server', file: 'a2a', path: ['ratios', 'SendMessage requests/s host / sdk'], unit: '×', min: 1.5 },
  { scenario: 'MCP tools/call', measure: 'calls/s vs bare SDK server', file: 'mcp', path: ['ratios', 'tools/call calls/s host / bare'], unit: '×', min: 1.0 },
  { scenario: 'MCP tools/call, two instances', measure: 'calls/s vs bare SDK server', file: 'mcp', path: ['ratios', 'tools/call calls/s two instances / bare'], unit: '×', min: 1.0 },
  { scenario: 'PostgreSQL, one instance', measure: 'JSON req/s vs SQLite', file: 'cluster', path: ['median', 'postgres x1', 'json_rps'], per: ['median', 'sqlite', 'json_rps'], unit: '×', min: 0.5 },
  { scenario: 'PostgreSQL, 1 000 tasks × 4 workers', measure: 'claims/s', file: 'claims', path: ['rows', { tasks: 1000, processes: 4 }, 'claimsPerSecond', 'postgres'], unit: '/s', min: 2000 },
  { scenario: 'AI SDK UI message stream, one stream', measure: 'words/s vs the CAP stream', file: 'projections', path: ['ratios', 'words/s ai-sdk / cap'], settings: { packets: 5000 }, unit: '×', min: 0.8 },
  { scenario: 'AG-UI events, one stream', measure: 'words/s vs the CAP stream', file: 'projections', path: ['ratios', 'words/s ag-ui / cap'], settings: { packets: 5000 }, unit: '×', min: 0.8 }
]
/** What a figure in its result file is multiplied by to be in a budget's unit. */
const SCALE = { '×': 1, KiB: 1 / 1024, '%': 100, '/s': 1 }

const dir = resultsDir()
const files = new Map()
/** `<name>-latest.json` as { file, result } (result undefined, with why, when it cannot be read). */
function read (name) {
  const file = `${name}-latest.json`
  if (!files.has(name)) {
    try {
      files.set(name, { file, result: JSON.parse(readFileSync(join(dir, file), 'utf8')) })
    } catch (err) {
      files.set(name, { file, why: err.code === 'ENOENT' ? `no ${file}` : `${file} unreadable: ${err.message}` })
    }
  }
  return files.get(name)
}

const lookup = (result, path) => path.reduce((v, k) => typeof k === 'object' ? v?.find?.((e) => Object.entries(k).every(([f, x]) => e[f] === x)) : v?.[k], result)
const pathText = (path) => path.map((k, i) => typeof k === 'object' ? `[${Object.entries(k).map(([f, x]) => `${f}=${x}`).join(', ')}]` : /^\w+$/.test(k) ? `${i === 0 ? '' : '.'}${k}` : `['${k}']`).join('')
const number = (v) => typeof v === 'number' && Number.isFinite(v) ? v : undefined
const shown = (v, unit) => v === null ? '—' : unit === '×' ? `${v.toFixed(2)}×` : unit === '/s' ? `${v.toFixed(0)}/s` : `${v.toFixed(1)} ${unit}`
const source = ({ file, result }) => ({ file, commit: result?.commit ?? null, at: result?.at ?? null })

const rows = BUDGETS.map((b) => {
  const { file, result, why } = read(b.file)
  const budget = `${b.min !== undefined ? '≥' : '≤'} ${shown(b.min ?? b.max, b.unit)}`
  const row = { scenario: b.scenario, measure: b.measure, value: null, unit: b.unit, budget, met: null, source: source({ file, result }) }
  if (result === undefined) return { ...row, reason: why }
  const figure = number(lookup(result, b.path))
  const divisor = b.per === undefined ? 1 : number(lookup(result, b.per))
  if (figure === undefined || divisor === undefined) {
    const skipped = /^skipped/.test(result.settings?.postgres) ? ` (PostgreSQL ${result.settings.postgres})` : ''
    return { ...row, reason: `${file} has no ${pathText(figure === undefined ? b.path : b.per)}${skipped}` }
  }
  const value = figure / divisor * SCALE[b.unit]
  const other = Object.entries(b.settings ?? {}).filter(([k, v]) => result.settings?.[k] !== v).map(([k, v]) => `${k}=${result.settings?.[k]}, not ${v}`)
  if (result.smoke) return { ...row, value, reason: 'a smoke run' }
  if (other.length > 0) return { ...row, value, reason: `measured with ${other.join('; ')}` }
  return { ...row, value, met: b.min !== undefined ? value >= b.min : value <= b.max }
})

const from = (s) => s.commit === null ? '' : `${s.file.replace('-latest.json', '')} ${s.commit} ${s.at?.slice(0, 16).replace('T', ' ')}`
const verdict = (r) => r.met === true ? 'met' : r.met === false ? 'MISSED' : r.value === null ? `not measured: ${r.reason}` : `not judged: ${r.reason}`
console.log(`the issues' speed budgets, from the results in ${dir}\n`)
console.log(`${'scenario'.padEnd(38)} ${'measure'.padEnd(30)} ${'value'.padStart(9)} ${'budget'.padStart(11)}   ${'from'.padEnd(35)} verdict`)
for (const r of rows) console.log(`${r.scenario.padEnd(38)} ${r.measure.padEnd(30)} ${shown(r.value, r.unit).padStart(9)} ${r.budget.padStart(11)}   ${from(r.source).padEnd(35)} ${verdict(r)}`)

// for information (no budget): the cost table's CPU per request of each target
const cost = read('cost')
const cpu = Object.fromEntries(['json', 'sse', 'a2a', 'mcp'].map((t) => [t, number(cost.result?.results?.[t]?.cpu_us_per_request) ?? null]))
console.log(cost.result === undefined
  ? `\ncost table: not measured: ${cost.why}`
  : `\ncost table, server CPU per request: ${Object.entries(cpu).map(([t, us]) => `${t} ${us === null ? 'not measured' : `${us.toFixed(0)} µs`}`).join(', ')}   (${from(source(cost))})`)

const commits = [...new Set([...files.values()].map((f) => f.result?.commit).filter((c) => c !== undefined))]
if (commits.length > 1) console.log(`\nwarning: these figures come from ${commits.length} different commits (${commits.join(', ')}); npm run bench measures them all at one`)
const met = rows.filter((r) => r.met === true).length
const missed = rows.filter((r) => r.met === false).length
console.log(`\n${met} of ${rows.length} budgets met (${missed} missed, ${rows.length - met - missed} not measured or not judged)`)
saveResult('budgets', { settings: { dir }, rows, cost: cost.result === undefined ? null : { cpu_us_per_request: cpu, source: source(cost) } })
