import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { copyFileSync, existsSync, mkdirSync, readFileSync, symlinkSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { harnessFreeEnv } from '../child-env.js'
import { tempDataDir } from '../helper.js'
import { until } from '../socket.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

// A SIGTERM to npm test's runner ended it inside its wait for tap: tap and its tests went on, and the
// scratch folder it makes for the tests' files (in /dev/shm when there is room) stayed behind. Why a
// process of its own: it runs the runner, which runs tap, which runs a test file (some 4 s of CPU).

/**
 * A project of its own for the runner and its tap: tap keeps its state (coverage, results) in the
 * project's `.tap/`, which the outer run is writing. The runner and the files it reads are copied (it
 * finds the project from its own path), the rest linked.
 */
function project (dir: string): string {
  for (const file of ['package.json', 'tsconfig.json', '.taprc', 'scripts/test.ts', 'scripts/scratch.ts', 'test/fixtures/scripts/scratch-sleeper.ts']) {
    mkdirSync(join(dir, file, '..'), { recursive: true })
    copyFileSync(join(ROOT, file), join(dir, file))
  }
  for (const link of ['node_modules', 'scripts/vendor-bundle.mjs', 'test/measure']) symlinkSync(join(ROOT, link), join(dir, link))
  for (const empty of ['src', 'agents']) mkdirSync(join(dir, empty))
  return dir
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  t.test(`${signal} during npm test: the tests stop and the scratch folder is removed`, { timeout: 60_000 }, async (t) => {
    const report = join(tempDataDir(t), 'scratch')
    const cwd = project(tempDataDir(t))
    const runner = spawn(process.execPath, ['--import', 'tsx', 'scripts/test.ts', '--disable-coverage', 'test/fixtures/scripts/scratch-sleeper.ts'], {
      cwd,
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
