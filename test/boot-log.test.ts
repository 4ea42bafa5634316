import t from 'tap'
import { buildApp } from '../src/app.js'
import { BootLog } from '../src/boot-log.js'
import { loadConfig } from '../src/config.js'
import { FIXTURE_AGENTS_DIR, TEST_ENV, tempDataDir, type Teardown } from './helper.js'

// Issue 31: under `npm run dev` every save restarts the process, and each restart printed every
// warning and the whole agent list again. With LOG_BOOT=changes the first start logs everything, a
// restart by the same parent on the same DATA_DIR only what changed, and one line about the rest.

type Line = Record<string, unknown> & { level: number, msg: string }

/** Boot an app as server.ts does with LOG_BOOT=changes (parent `parent`), then end the boot; its lines and the restart line. */
async function boot (t: Teardown, dataDir: string, parent: number, env: Record<string, string> = {}): Promise<{ lines: Line[], restarted: string | undefined }> {
  const lines: Line[] = []
  const bootLog = new BootLog(dataDir, parent)
  const app = await buildApp(loadConfig({ ...TEST_ENV, DATA_DIR: dataDir, LOG_LEVEL: 'info', WORKERS_PER_TYPE: '0', ...env }), { bootLog, logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Line) } } })
  await app.ready()
  const restarted = bootLog.finish(`${app.agents.list().length} agents`)
  await app.close()
  return { lines, restarted }
}

t.test('a restart by the same parent logs only the start-up lines that changed, and says what it left out', async (t) => {
  const dataDir = tempDataDir(t)
  const first = await boot(t, dataDir, 4242)
  t.equal(first.restarted, undefined, 'a first start has no restart line')
  t.ok(first.lines.some((l) => l.msg === 'agents loaded'), 'the first start lists the agents')
  const warnings = first.lines.filter((l) => l.level === 40 && l.time !== undefined)
  t.ok(warnings.some((l) => /AUTH_MODE is off/.test(l.msg)), 'and its warnings')

  const again = await boot(t, dataDir, 4242)
  t.same(again.lines.filter((l) => l.msg !== 'draining runs'), [], 'a restart repeats none of them')
  t.match(again.restarted, new RegExp(`^restarted: \\d+ agents; ${warnings.length} warnings? and \\d+ other lines? of the start-up log as before, not repeated$`))

  const changed = await boot(t, dataDir, 4242, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  t.same(changed.lines.filter((l) => l.msg !== 'draining runs').map((l) => l.msg), ['agents loaded'], 'a restart with other agents lists them again, and nothing else')
  t.match(changed.restarted, /^restarted: /)

  const other = await boot(t, dataDir, 4343, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  t.equal(other.restarted, undefined, 'another parent (a new npm run dev) is a first start')
  t.ok(other.lines.some((l) => l.msg === 'agents loaded') && other.lines.some((l) => /AUTH_MODE is off/.test(l.msg)), 'which logs everything')
})

t.test('lines logged after the boot always pass', async (t) => {
  const dataDir = tempDataDir(t)
  await boot(t, dataDir, 1)
  const lines: Line[] = []
  const bootLog = new BootLog(dataDir, 1)
  t.ok(bootLog.restart)
  const app = await buildApp(loadConfig({ ...TEST_ENV, DATA_DIR: dataDir, LOG_LEVEL: 'info', WORKERS_PER_TYPE: '0' }), { bootLog, logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Line) } } })
  t.teardown(() => app.close())
  await app.ready()
  bootLog.finish('x')
  app.log.warn('AUTH_MODE is off: every caller may do anything. Set AUTH_MODE=apikey before exposing this server')
  t.equal(lines.filter((l) => /AUTH_MODE is off/.test(l.msg)).length, 1)
})
