import t from 'tap'
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tempDataDir } from '../helper.js'

// A real child process: the preload is loaded by the command line (.taprc's node-arg), before the
// test file, and writes when that process exits.
t.test('the preload counts what a test file waits on and writes it at exit, under .tap/measure', async (t) => {
  const dir = tempDataDir(t)
  t.ok(process.execArgv.some((arg) => /^--import=file:.*\/test\/measure\/preload\.mjs$/.test(arg)), 'this process loaded it, named absolutely for children in other folders')
  writeFileSync(join(dir, 'package.json'), '{"type": "module"}')
  writeFileSync(join(dir, 'child.js'), '')
  writeFileSync(join(dir, 'waits.test.ts'), `
    import { execFile, execFileSync, spawnSync } from 'node:child_process'
    import { createServer } from 'node:net'
    import { setTimeout as sleep } from 'node:timers/promises'
    import { promisify } from 'node:util'
    spawnSync('true')
    const { stdout } = await promisify(execFile)('echo', ['as before'])
    if (stdout !== 'as before\\n') throw new Error('promisify(execFile) must still answer { stdout, stderr }: ' + JSON.stringify(stdout))
    await promisify(setTimeout)(100)
    execFileSync(process.execPath, [${JSON.stringify(join(dir, 'child.js'))}])
    const server = createServer()
    await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)))
    server.close()
    await new Promise((resolve) => setTimeout(resolve, 100))
    await new Promise((resolve) => setTimeout(resolve, 5))
    await sleep(150)
    clearTimeout(setTimeout(() => {}, 10_000))
  `)
  const run = spawnSync(process.execPath, [...process.execArgv, 'waits.test.ts'], { cwd: dir, encoding: 'utf8' })
  t.equal(run.status, 0, run.stderr)
  const written = readdirSync(join(dir, '.tap', 'measure'))
  t.equal(written.length, 1, 'one file, named by the process')
  const measured = JSON.parse(readFileSync(join(dir, '.tap', 'measure', written[0] as string), 'utf8')) as { cpuS: number }
  t.ok(measured.cpuS > 0, `its CPU seconds, its children's included (${measured.cpuS})`)
  t.match(measured, {
    file: 'waits.test.ts',
    ms: Number,
    processes: { true: 1, echo: 1, 'child.js': 1 },
    servers: 1,
    pgDatabases: 0,
    timers: 3,
    timerMs: 350
  }, 'processes by command (promisified ones too), a node script by its name, the server, the timers of 100 ms or more that fired (not the one cleared, nor the short one)')

  const quiet = spawnSync(process.execPath, [...process.execArgv, 'waits.test.ts'], { cwd: dir, encoding: 'utf8', env: { ...process.env, AGENT_HOST_MEASURE: '0' } })
  t.equal(quiet.status, 0, quiet.stderr)
  t.equal(readdirSync(join(dir, '.tap', 'measure')).length, 1, 'AGENT_HOST_MEASURE=0 turns it off')
})
