import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { harnessFreeEnv } from '../child-env.js'
import { tempDataDir } from '../helper.js'
import { until } from '../socket.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

// A Ctrl-C during npm test ended scripts/test.ts inside its wait for tap, and the scratch folder it
// makes for the tests' files (in /dev/shm when there is room) stayed behind. Why a process of its own:
// it runs npm test's runner, which runs tap, which runs a test file (some 4 s of CPU).
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  t.test(`${signal} during npm test: the tests stop and the scratch folder is removed`, { timeout: 60_000 }, async (t) => {
    const report = join(tempDataDir(t), 'scratch')
    const runner = spawn(process.execPath, ['--import', 'tsx', 'scripts/test.ts', '--disable-coverage', 'test/fixtures/scripts/scratch-sleeper.ts'], {
      cwd: ROOT,
      env: { ...harnessFreeEnv(), SCRATCH_REPORT: report },
      stdio: 'ignore',
      detached: true
    })
    const exited = once(runner, 'exit') as Promise<[number | null, string | null]>
    t.teardown(() => { try { process.kill(-(runner.pid as number), 'SIGKILL') } catch {} })
    await until('the test file to start', () => existsSync(report) && readFileSync(report, 'utf8') !== '', 45_000)
    const scratch = readFileSync(report, 'utf8')
    t.ok(existsSync(join(scratch, 'left-by-a-test')), `the test wrote into the scratch folder (${scratch})`)
    // a terminal's Ctrl-C reaches the whole group; a SIGTERM is sent to the runner alone
    if (signal === 'SIGINT') process.kill(-(runner.pid as number), 'SIGINT')
    else runner.kill('SIGTERM')
    const [code] = await exited
    t.not(code, 0, `the run failed (${String(code)})`)
    t.notOk(existsSync(scratch), 'the scratch folder is gone')
  })
}
