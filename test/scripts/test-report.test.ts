import t from 'tap'
import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { durations, table } from '../../scripts/test-report.js'
import { tempDataDir } from '../helper.js'

function put (root: string, path: string, text: string): void {
  mkdirSync(dirname(join(root, path)), { recursive: true })
  writeFileSync(join(root, path), text)
}

t.test('the durations report: each file\'s own time from tap\'s results, what it waited on from the measurements, slowest first', async (t) => {
  const root = tempDataDir(t)
  put(root, '.tap/test-results/test/slow.test.ts.tap', 'TAP version 14\n    # time=12.5ms\nok 1 - inner # time=12.5ms\n1..1\n# time=4500.25ms\n')
  put(root, '.tap/test-results/test/deep/fast.test.ts.tap', '1..1\n# time=250ms\n')
  put(root, '.tap/test-results/test/unmeasured.test.ts.tap', '1..1\n# time=1000ms\n')
  put(root, '.tap/test-results/test/no-time.test.ts.tap', 'Bail out!\n')
  put(root, '.tap/test-results/notes.txt', 'not a result')
  put(root, '.tap/measure/101.json', JSON.stringify({ file: 'test/slow.test.ts', ms: 4400, cpuS: 7.25, processes: { 'server.ts': 3, tini: 1 }, servers: 4, pgDatabases: 2, timers: 5, timerMs: 2500 }))
  put(root, '.tap/measure/102.json', JSON.stringify({ file: 'test/deep/fast.test.ts', ms: 240, cpuS: 0.5, processes: {}, servers: 0, pgDatabases: 0, timers: 0, timerMs: 0 }))
  put(root, '.tap/measure/103.json', '{"file": "test/killed')

  const all = durations(root)
  t.same(all.map((d) => [d.file, d.seconds]), [['test/slow.test.ts', 4.50025], ['test/unmeasured.test.ts', 1], ['test/deep/fast.test.ts', 0.25], ['test/no-time.test.ts', 0]], 'the file\'s last time line, slowest first')
  t.same(all[0], { file: 'test/slow.test.ts', seconds: 4.50025, cpuSeconds: 7.25, processes: { 'server.ts': 3, tini: 1 }, servers: 4, pgDatabases: 2, timers: 5, timerSeconds: 2.5 })
  t.same(all[1], { file: 'test/unmeasured.test.ts', seconds: 1, cpuSeconds: undefined, processes: {}, servers: 0, pgDatabases: 0, timers: 0, timerSeconds: 0 }, 'a file without measurements (a half-written one is skipped) keeps its time')

  const text = table(all.slice(0, 2), all)
  t.match(text, /^\| file \| s \| CPU s \| processes started \| servers \| pg dbs \| timers ≥100 ms \(Σ s\) \|$/m)
  t.match(text, /^\| test\/slow\.test\.ts \| 4\.5 \| 7\.3 \| server\.ts×3 tini×1 \| 4 \| 2 \| 5 \(2\.5\) \|$/m)
  t.match(text, /^\| test\/unmeasured\.test\.ts \| 1\.0 \| — \| — \| 0 \| 0 \| 0 \(0\.0\) \|$/m)
  t.notMatch(text, /fast\.test\.ts/, 'only the rows asked for')
  t.match(text, /^4 files, 6 s of their own time and 8 s of CPU in all$/m, 'the total is every file\'s')
  t.same(durations(join(root, 'nothing-here')), [], 'no results yet: an empty report')
})

t.test('a file npm test ran from its launcher (.tap/groups/<NN>/…) is named as the test file, its measurements with it', async (t) => {
  const root = tempDataDir(t)
  put(root, '.tap/test-results/.tap/groups/0/test/bench/smoke.test.mjs.tap', '1..1\n# time=9000ms\n')
  put(root, '.tap/test-results/.tap/groups/1/group-2.test.mjs.tap', '1..1\n# time=8000ms\n')
  put(root, '.tap/measure/201.json', JSON.stringify({ file: '.tap/groups/0/test/bench/smoke.test.mjs', ms: 8900, cpuS: 4, processes: { 'assist.js': 1 }, servers: 0, pgDatabases: 0, timers: 0, timerMs: 0 }))
  t.same(durations(root).map((d) => [d.file, d.seconds, d.cpuSeconds]), [['test/bench/smoke.test.ts', 9, 4], ['group-2', 8, undefined]])
})
