import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

// the benchmarks are not timed here: each runs in its smoke mode so that it cannot rot
for (const bench of ['assist.js']) {
  t.test(`bench/${bench} --smoke runs end to end`, { timeout: 120_000 }, async (t) => {
    // benchmarks are proven by running, not covered: their processes report no coverage to tap
    const env = { ...process.env, _TAPJS_PROCESSINFO_COVERAGE_: '0' }
    const child = spawn(process.execPath, [...process.execArgv, `bench/${bench}`, '--smoke'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
    t.teardown(() => { child.kill('SIGKILL') })
    let out = ''
    child.stdout.on('data', (c: Buffer) => { out += c.toString() })
    child.stderr.on('data', (c: Buffer) => { out += c.toString() })
    const [code] = await once(child, 'exit') as [number | null]
    t.equal(code, 0, out)
    t.match(out, /smoke: every target answered 2xx/)
  })
}
