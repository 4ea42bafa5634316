import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** Every benchmark `npm run bench` runs (package.json), so that a new one cannot be left out here. */
const benches = [...JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.bench.matchAll(/node (bench\/[\w-]+\.js)/g)].map((m) => m[1] as string)

// a dozen benchmarks one after the other, each starting servers (some a PostgreSQL server): more than
// tap's per-file limit on a loaded 2-core machine; each still has its own limit below
t.setTimeout(1_200_000)

t.test('npm run bench names the benchmarks', async (t) => {
  t.ok(benches.length >= 5, benches.join(', '))
  const scripts = readdirSync(join(ROOT, 'bench')).filter((f) => f.endsWith('.js') && !['common.js', 'assist-server.js', 'raw-server.js', 'a2a-server.js', 'mcp-server.js', 'cluster-server.js', 'model-budgets-server.js', 'drain-worker.js', 'profile.js'].includes(f))
  t.same(scripts.map((f) => `bench/${f}`).sort(), [...benches].sort(), 'every bench script is in npm run bench')
})

// the benchmarks are not timed here: each runs in its smoke mode (tiny sizes, the TypeScript
// sources) so that it cannot rot, and must end well and write its result
for (const bench of benches) {
  t.test(`${bench} --smoke runs end to end and writes its result`, { timeout: 120_000 }, async (t) => {
    const results = mkdtempSync(join(tmpdir(), 'agent-host-bench-smoke-'))
    t.teardown(() => { rmSync(results, { recursive: true, force: true }) })
    // benchmarks are proven by running, not covered: their processes report no coverage to tap, and
    // V8 keeps none for them (it was some 10 % of their CPU, and megabytes for tap's report to read)
    const { NODE_V8_COVERAGE: _coverage, ...rest } = process.env
    const env = { ...rest, _TAPJS_PROCESSINFO_COVERAGE_: '0', BENCH_RESULTS_DIR: results }
    const child = spawn(process.execPath, [...process.execArgv, bench, '--smoke'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
    t.teardown(() => { child.kill('SIGKILL') })
    let out = ''
    child.stdout.on('data', (c: Buffer) => { out += c.toString() })
    child.stderr.on('data', (c: Buffer) => { out += c.toString() })
    const [code] = await once(child, 'exit') as [number | null]
    t.equal(code, 0, out)
    t.match(out, /smoke: .* ran end to end and wrote its result/)
    const latest = readdirSync(results).find((f) => f.endsWith('-latest.json'))
    t.ok(latest, 'a result file')
    t.match(JSON.parse(readFileSync(join(results, latest as string), 'utf8')), { smoke: true, cpus: Number, node: process.version })
  })
}
