import t from 'tap'
import { spawnSync } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import picomatch from 'picomatch'
import { ALONE, HEAVY, deal, groupSource, groupedFiles, launchers, tapBuilt, testFileOf, testFiles, warmTestLoader, weight } from '../../scripts/test.js'
import { tempDataDir } from '../helper.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

function put (root: string, path: string, text: string): void {
  mkdirSync(dirname(join(root, path)), { recursive: true })
  writeFileSync(join(root, path), text)
}

t.test('the in-process files share processes; none that starts processes, builds, browsers or benchmarks does', async (t) => {
  const files = groupedFiles(ROOT)
  t.ok(files.length >= 60, `${files.length} files`)
  t.ok(files.includes('test/protocol/envelope.test.ts'))
  t.ok(files.includes('test/scripts/test.test.ts'), 'this one too')
  for (const heavy of ['test/bench/smoke.test.ts', 'test/deploy/dockerfile.test.ts', 'test/runtime/crash.test.ts', 'test/storage/postgres/audit.test.ts', 'test/measure/preload.test.ts', 'test/plugins/swagger-ui.test.ts', ...ALONE]) {
    t.notOk(files.includes(heavy), `not ${heavy}`)
  }
  const all = testFiles(ROOT)
  t.same(all.filter((f) => !existsSync(join(ROOT, f))), [])
  t.same(ALONE.filter((f) => !all.includes(f)), [], 'a file kept alone exists')
  // every pattern still names a file: a renamed heavy file would otherwise slip into a group
  for (const pattern of HEAVY) t.ok(all.some((f) => picomatch(pattern)(f)), pattern)
  t.equal(files.length + all.filter((f) => picomatch(HEAVY)(f) || ALONE.includes(f)).length, all.length, 'every test file runs, grouped or alone')
})

/** A pattern's brace alternatives, each a pattern of its own (`a/{b,c}.ts` → `a/b.ts`, `a/c.ts`). */
function alternatives (pattern: string): string[] {
  const match = /\{([^{}]*)\}/.exec(pattern)
  if (match === null) return [pattern]
  return (match[1] as string).split(',').flatMap((choice) => alternatives(pattern.slice(0, match.index) + choice + pattern.slice(match.index + match[0].length)))
}

t.test('every HEAVY and ALONE pattern, each alternative of its braces, names a test file that exists: a moved file keeps its process', async (t) => {
  const all = testFiles(ROOT)
  for (const pattern of [...HEAVY, ...ALONE].flatMap(alternatives)) {
    const matches = picomatch(pattern)
    t.ok(all.some((file) => matches(file)), `${pattern} matches a test file`)
  }
})

t.test('a group file imports its files in order, and adds each file\'s time to times.json when it ends', async (t) => {
  const root = tempDataDir(t)
  put(root, 'test/a.test.ts', "import t from 'tap'\nt.test('a1', async (t) => { t.pass('') })\nt.test('a2', async (t) => { t.pass('') })\n")
  put(root, 'test/b.test.ts', "import t from 'tap'\nt.test('b1', async (t) => { t.pass('') })\n")
  put(root, '.tap/groups/times.json', JSON.stringify({ 'test/gone.test.ts': 9 }))
  symlinkSync(join(ROOT, 'node_modules'), join(root, 'node_modules'), 'dir')
  const source = groupSource(root, ['test/a.test.ts', 'test/b.test.ts'])
  t.ok(source.indexOf('a.test.ts') < source.indexOf('b.test.ts'), 'in order')
  put(root, '.tap/groups/group-1.test.mjs', source)
  const run = spawnSync(process.execPath, [...process.execArgv, join(root, '.tap/groups/group-1.test.mjs')], { cwd: root, encoding: 'utf8', env: { ...process.env, TAP: '1' } })
  t.equal(run.status, 0, run.stdout + run.stderr)
  t.match(run.stdout, /ok 1 - a1[\s\S]*ok 2 - a2[\s\S]*ok 3 - b1/)
  const times = JSON.parse(readFileSync(join(root, '.tap/groups/times.json'), 'utf8')) as Record<string, number>
  t.same(Object.keys(times).sort(), ['test/a.test.ts', 'test/b.test.ts', 'test/gone.test.ts'])
  t.ok((times['test/a.test.ts'] ?? -1) >= 0)
  t.equal(weight(root, 'test/gone.test.ts'), 9, 'the group\'s time comes first')
  put(root, 'scripts/test-times.json', JSON.stringify({ 'test/gone.test.ts': 1, 'test/shipped.test.ts': 7 }))
  put(root, 'test/shipped.test.ts', "t.test('a', f)\n")
  t.equal(weight(root, 'test/gone.test.ts'), 9, 'before the times kept in the repository')
  t.equal(weight(root, 'test/shipped.test.ts'), 7, 'which a fresh clone goes by')
})

t.test('a group whose tests have all ended exits, with tap\'s code, though a test left a handle open that holds its event loop', async (t) => {
  const root = tempDataDir(t)
  // as in the clean-clone runs that sat: the tests have ended (tap wrote its last line), then something holds the loop
  put(root, 'test/leaky.test.ts', "import t from 'tap'\nt.test('passes', async (t) => { t.pass('') })\nprocess.once('beforeExit', () => { setInterval(() => {}, 1000) })\n")
  put(root, 'test/failing.test.ts', "import t from 'tap'\nt.test('fails', async (t) => { t.fail('on purpose') })\n")
  symlinkSync(join(ROOT, 'node_modules'), join(root, 'node_modules'), 'dir')
  for (const [files, status] of [[['test/leaky.test.ts'], 0], [['test/leaky.test.ts', 'test/failing.test.ts'], 1]] as const) {
    put(root, '.tap/groups/group-1.test.mjs', groupSource(root, [...files]))
    const run = spawnSync(process.execPath, [...process.execArgv, join(root, '.tap/groups/group-1.test.mjs')], { cwd: root, encoding: 'utf8', timeout: 20_000, env: { ...process.env, TAP: '1', AGENT_HOST_GROUP_EXIT_MS: '200' } })
    t.equal(run.signal, null, 'it exits by itself')
    t.equal(run.status, status, `${files.join(', ')}: tap's exit code`)
  }
})

t.test('files are dealt into groups of about the same expected time, the longest first', async (t) => {
  const w: Record<string, number> = { a: 5, b: 4, c: 3, d: 3, e: 1 }
  const groups = deal(Object.keys(w), 2, (f) => w[f] ?? 0)
  t.same(groups.map((g) => g.reduce((s, f) => s + (w[f] ?? 0), 0)).sort(), [8, 8])
  t.same(groups.flat().sort(), ['a', 'b', 'c', 'd', 'e'], 'each file once')
  t.same(deal(['x'], 3, () => 1), [['x']], 'never an empty group')
})

// regression (issue 28): tap sorts the files it is given by name, so the longest-first order the
// runner passed was lost and a 50 s file started as the others ended; the order is now in the names
t.test('the processes start the longest expected first, groups and files alone alike: tap, which sorts by name, keeps that order', async (t) => {
  const w: Record<string, number> = { 'test/a.test.ts': 2, 'test/bench/b.test.ts': 90, 'test/c.test.ts': 2, 'test/d.test.ts': 30, 'test/g1.test.ts': 20, 'test/g2.test.ts': 25, 'test/g3.test.ts': 1 }
  const made = launchers([['test/g1.test.ts', 'test/g2.test.ts'], ['test/g3.test.ts']], ['test/a.test.ts', 'test/bench/b.test.ts', 'test/c.test.ts', 'test/d.test.ts'], (f) => w[f] ?? 0)
  t.same(made.map((l) => l.path), [
    '.tap/groups/0/test/bench/b.test.mjs',
    '.tap/groups/1/group-1.test.mjs',
    '.tap/groups/2/test/d.test.mjs',
    '.tap/groups/3/test/a.test.mjs',
    '.tap/groups/4/test/c.test.mjs',
    '.tap/groups/5/group-2.test.mjs'
  ])
  t.same(made[1]?.files, ['test/g1.test.ts', 'test/g2.test.ts'])
  t.same(made.map((l) => l.path).sort((a, b) => a.localeCompare(b, 'en')), made.map((l) => l.path), 'as tap sorts them (its list.js)')
  const many = launchers([], Array.from({ length: 12 }, (_, i) => `test/f${i}.test.ts`), (f) => Number(/\d+/.exec(f)?.[0]))
  t.equal(many[0]?.path, '.tap/groups/00/test/f11.test.mjs', 'numbers of one width: 10 sorts after 09')
  t.same(many.map((l) => l.path).sort((a, b) => a.localeCompare(b, 'en')), many.map((l) => l.path))
  t.equal(testFileOf('.tap/groups/03/test/bench/smoke.test.mjs'), 'test/bench/smoke.test.ts', 'the report names the file')
  t.equal(testFileOf('.tap/groups/1/group-1.test.mjs'), 'group-1')
  t.equal(testFileOf('test/x.test.ts'), 'test/x.test.ts', 'a file tap ran itself')
})

t.test('a file alone in its launcher keeps its own per-file limit; a group gets its files\' time together', async (t) => {
  t.notMatch(groupSource(ROOT, ['test/a.test.ts']), /t\.setTimeout/)
  t.match(groupSource(ROOT, ['test/a.test.ts', 'test/b.test.ts']), /t\.setTimeout\(120000\)/)
})

t.test('a file\'s expected time: its last time in npm test, else a second per top-level test', async (t) => {
  const root = tempDataDir(t)
  put(root, 'test/timed.test.ts', "t.test('a', f)\n")
  put(root, '.tap/test-results/test/timed.test.ts.tap', '    # time=3ms\n1..1\n# time=4500ms\n')
  put(root, 'test/new.test.ts', "import t from 'tap'\nt.test('a', f)\n  t.test('nested', f)\nt.test('b', f)\n")
  t.equal(weight(root, 'test/timed.test.ts'), 4.5)
  t.equal(weight(root, 'test/new.test.ts'), 2)
})

t.test('before tap starts, one process fills the test loader\'s cache: every TypeScript file\'s output, and the packages\' build', async (t) => {
  const root = tempDataDir(t)
  const repo = fileURLToPath(new URL('../../', import.meta.url))
  put(root, 'src/a.ts', 'export const a: number = 1\n')
  put(root, 'agents/b/index.ts', 'export default { b: true as boolean }\n')
  put(root, 'test/c.test.ts', 'const c: string = "c"\nconsole.log(c)\n')
  put(root, 'test/types.d.ts', 'declare const d: number\n')
  mkdirSync(join(root, 'test', 'measure'), { recursive: true })
  copyFileSync(join(repo, 'test/measure/typescript-hooks.mjs'), join(root, 'test/measure/typescript-hooks.mjs'))
  mkdirSync(join(root, 'scripts'), { recursive: true })
  copyFileSync(join(repo, 'scripts/vendor-bundle.mjs'), join(root, 'scripts/vendor-bundle.mjs'))
  copyFileSync(join(repo, 'tsconfig.json'), join(root, 'tsconfig.json'))
  copyFileSync(join(repo, 'package-lock.json'), join(root, 'package-lock.json'))
  symlinkSync(join(repo, 'node_modules'), join(root, 'node_modules'))
  const cache = join(root, 'cache')
  const before = process.env.AGENT_HOST_TS_CACHE
  process.env.AGENT_HOST_TS_CACHE = cache
  t.teardown(() => { if (before === undefined) delete process.env.AGENT_HOST_TS_CACHE; else process.env.AGENT_HOST_TS_CACHE = before })
  t.equal(await warmTestLoader(root), 3, 'three TypeScript files, not the declarations')
  const outputs = readdirSync(cache, { recursive: true }).map(String).filter((f) => f.endsWith('.js'))
  t.equal(outputs.length, 3)
  const [build, ...more] = readdirSync(join(cache, 'vendor'))
  t.same(more, [], 'one build, no partial one left')
  const entries = JSON.parse(readFileSync(join(cache, 'vendor', build ?? '', 'entries.json'), 'utf8')) as string[]
  t.ok(entries.includes('fastify') && entries.includes('typebox') && entries.includes('@a2a-js/sdk/server'), entries.join(', '))
})

t.test('tap is built again only when it is not built with .taprc\'s plugins', async (t) => {
  const repo = fileURLToPath(new URL('../../', import.meta.url))
  // this run's own tap: were it not built as .taprc asks, each of these processes would load ts-node
  t.equal(await tapBuilt(repo), true, 'the checkout\'s tap, as npm test leaves it')
  const root = tempDataDir(t)
  t.equal(await tapBuilt(root), false, 'none built: build it')
  put(root, 'node_modules/@tapjs/test/test-built/dist/esm/index.js', 'export const signature = `@tapjs/after\n@tapjs/typescript`\n')
  t.equal(await tapBuilt(root), false, 'built with tap\'s defaults, as npm ci installs it: build it')
})
