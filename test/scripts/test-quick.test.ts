import t from 'tap'
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import picomatch from 'picomatch'
import { ALONE, HEAVY, deal, quickFiles, weight } from '../../scripts/test-quick.js'
import { tempDataDir } from '../helper.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

function put (root: string, path: string, text: string): void {
  mkdirSync(dirname(join(root, path)), { recursive: true })
  writeFileSync(join(root, path), text)
}

t.test('the inner loop runs the in-process files: none that starts processes, builds, browsers or benchmarks', async (t) => {
  const files = quickFiles(ROOT)
  t.ok(files.length >= 60, `${files.length} files`)
  t.ok(files.includes('test/envelope.test.ts'))
  t.ok(files.includes('test/scripts/test-quick.test.ts'), 'this one too')
  for (const heavy of ['test/bench/smoke.test.ts', 'test/deploy/dockerfile.test.ts', 'test/runtime/crash.test.ts', 'test/storage/postgres/audit.test.ts', 'test/measure/preload.test.ts']) {
    t.notOk(files.includes(heavy), `not ${heavy}`)
  }
  t.same(files.filter((f) => !existsSync(join(ROOT, f))), [])
  t.same(ALONE.filter((f) => !files.includes(f)), [], 'a file run alone is still one of them')
  // every pattern still names a file: a renamed heavy file would otherwise slip into the loop
  const all = readdirSync(join(ROOT, 'test'), { recursive: true }).map((f) => `test/${String(f)}`).filter((f) => f.endsWith('.test.ts'))
  for (const pattern of HEAVY) t.ok(all.some((f) => picomatch(pattern)(f)), pattern)
  t.equal(files.length + all.filter((f) => picomatch(HEAVY)(f)).length, all.length, 'every test file is in the loop or left to npm test')
})

t.test('files are dealt into groups of about the same expected time, the longest first', async (t) => {
  const w: Record<string, number> = { a: 5, b: 4, c: 3, d: 3, e: 1 }
  const groups = deal(Object.keys(w), 2, (f) => w[f] ?? 0)
  t.same(groups.map((g) => g.reduce((s, f) => s + (w[f] ?? 0), 0)).sort(), [8, 8])
  t.same(groups.flat().sort(), ['a', 'b', 'c', 'd', 'e'], 'each file once')
  t.same(deal(['x'], 3, () => 1), [['x']], 'never an empty group')
})

t.test('a file\'s expected time: its last time in npm test, else a second per top-level test', async (t) => {
  const root = tempDataDir(t)
  put(root, 'test/timed.test.ts', "t.test('a', f)\n")
  put(root, '.tap/test-results/test/timed.test.ts.tap', '    # time=3ms\n1..1\n# time=4500ms\n')
  put(root, 'test/new.test.ts', "import t from 'tap'\nt.test('a', f)\n  t.test('nested', f)\nt.test('b', f)\n")
  t.equal(weight(root, 'test/timed.test.ts'), 4.5)
  t.equal(weight(root, 'test/new.test.ts'), 2)
})
