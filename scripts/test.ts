/**
 * `npm test` and `npm run test:quick`: tap, with the in-process test files several to a process.
 *
 * A test process spends some 3 s of CPU loading tap and the app before its first test; one process
 * per file paid that a hundred times for the in-process files alone, on a suite whose time on two
 * cores is its CPU. So the in-process files are dealt into a few groups of about the same expected
 * time, each one tap process that imports its files one after another (their tests run in that
 * order, each file's as they would alone), and tap runs the groups beside the files that start
 * processes, builds, browsers or benchmarks ({@link HEAVY}), which keep a process each. A failure
 * names its test file (tap's `at:`).
 *
 * tap starts its files in order of name, whatever order they are given in: each process is started
 * from a small file under `.tap/groups/<NN>/` ({@link launchers}), numbered the longest expected
 * first, so that the files still running at the end are short ones.
 *
 *     npm test                                   # the whole suite, with the coverage gate
 *     npm run test:quick                         # the in-process files only, no coverage
 *     npm test -- --disable-coverage test/a.test.ts test/b.test.ts   # named files: tap as it is
 *
 * The quick run leaves the PostgreSQL halves of the contract tests out unless `PG_TEST_URL` names a
 * server (it sets `PG_TEST_URL=none`). More arguments go to tap; with test files among them, tap runs
 * those files alone, one process each, as it would without this script.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { constants } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import picomatch from 'picomatch'
import { scratchParent } from './scratch.js'

const ROOT = fileURLToPath(new URL('../', import.meta.url))

/**
 * Files that keep a process each: those that start many processes, their own PostgreSQL server, builds,
 * browsers or benchmarks, or wait long on timers. A file that starts a server or two, or runs a guide's
 * few commands, shares a group: a process of its own cost it some 0.8 s of CPU before its first test
 * (1.5 s with the app), which 26 such files paid in every run.
 */
export const HEAVY = [
  'test/{bench,deploy,playground}/**',
  'test/layout/{build,dev-mode}.test.ts',
  'test/docs/{walkthrough,a2a-mcp-example,runs,protocol-commands,readme-react}.test.ts',
  'test/storage/postgres/{cluster-chaos,database-restart,notifications,cross-instance,audit}.test.ts',
  'test/{scaffold,config,telemetry,backup-restore}.test.ts',
  'test/runtime/{chaos,concurrency,crash}.test.ts',
  'test/storage/{bus-processes,audit,audit-tamper,events-contract,data-dir,narrator}.test.ts',
  'test/assist/{lease-recovery,foreign-lock,join-race,resume,interrupts-restart}.test.ts',
  'test/scripts/test-signal.test.ts',
  'test/tools/calls.test.ts',
  'test/bus/bus-http.test.ts',
  'test/plugins/swagger-ui.test.ts',
  'test/measure/preload.test.ts'
]

/**
 * In-process files that keep a process of their own all the same: observability re-imports the app
 * with a module mocked (tap's mockImport), and another file's imports beside it in one process stall.
 */
export const ALONE = ['test/plugins/observability.test.ts']

/** The groups: as many as tap runs at once (`jobs` in .taprc). */
const GROUPS = 3

/**
 * The quick loop's groups, all four at once: it runs nothing else, and its files wait on sockets,
 * timers and disks more than they compute (three groups used 204 s of CPU in 123 s on two cores).
 */
const QUICK_GROUPS = 4

/** Where the group files are written, and each grouped file's last time (`times.json`). */
const GROUPS_DIR = join('.tap', 'groups')

/** Every test file under `root`, by name. */
export function testFiles (root: string): string[] {
  return readdirSync(join(root, 'test'), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.test.ts'))
    .map((entry) => relative(root, join(entry.parentPath, entry.name)).split('\\').join('/'))
    .sort()
}

/** The in-process test files under `root`: those that may share a process ({@link HEAVY} and {@link ALONE} left out). */
export function groupedFiles (root: string): string[] {
  const heavy = picomatch(HEAVY)
  return testFiles(root).filter((file) => !heavy(file) && !ALONE.includes(file))
}

/**
 * How long `file` is expected to take: its time in the last run (what its group wrote to
 * `.tap/groups/times.json`), else as measured when `scripts/test-times.json` was written (a fresh
 * clone's), else tap's `# time=` when it ran alone, else a second per top-level test. A count of
 * tests knows nothing of a test's waits: on a fresh clone it once dealt one group 480 s and another 86.
 */
export function weight (root: string, file: string): number {
  for (const times of [join(root, GROUPS_DIR, 'times.json'), join(root, 'scripts', 'test-times.json')]) {
    try {
      const last = (JSON.parse(readFileSync(times, 'utf8')) as Record<string, number>)[file]
      if (typeof last === 'number' && last > 0) return last
    } catch {}
  }
  try {
    const times = [...readFileSync(join(root, '.tap', 'test-results', `${file}.tap`), 'utf8').matchAll(/^# time=([\d.]+)ms$/gm)]
    const last = Number(times[times.length - 1]?.[1])
    if (last > 0) return last / 1000
  } catch {}
  return (readFileSync(join(root, file), 'utf8').match(/^t\.test\(/gm) ?? []).length
}

/** `files` in `count` groups of about the same expected time: the longest first, each into the group with the least so far. */
export function deal (files: string[], count: number, weigh: (file: string) => number): string[][] {
  const groups = Array.from({ length: Math.min(count, files.length) }, () => ({ files: [] as string[], total: 0 }))
  const weighed = files.map((file) => ({ file, w: weigh(file) })).sort((a, b) => b.w - a.w || a.file.localeCompare(b.file))
  for (const { file, w } of weighed) {
    const least = groups.reduce((a, b) => (b.total < a.total ? b : a))
    least.files.push(file)
    least.total += w
  }
  return groups.map((g) => g.files.sort())
}

/** One process tap starts: a group of in-process files, or one file kept alone. */
export interface Launcher {
  /** The file tap is given, relative to the root: `.tap/groups/<NN>/<label>.test.mjs`. */
  path: string
  /** The test files it imports, in order. */
  files: string[]
}

/**
 * The processes of a run, as files tap starts in the order of their names: the longest expected
 * first (tap sorts the files it is given, so the order is in the name's number). A group is
 * `.tap/groups/<NN>/group-<i>.test.mjs`; a file kept alone keeps its path below the number
 * (`.tap/groups/00/test/bench/smoke.test.mjs`), which {@link testFileOf} reads back.
 */
export function launchers (groups: string[][], alone: string[], weigh: (file: string) => number): Launcher[] {
  const all = [
    ...groups.map((files, i) => ({ label: `group-${i + 1}`, files })),
    ...alone.map((file) => ({ label: file.replace(/\.test\.ts$/, ''), files: [file] }))
  ].map((l) => ({ ...l, w: l.files.reduce((sum, f) => sum + weigh(f), 0) }))
  all.sort((a, b) => b.w - a.w || a.label.localeCompare(b.label))
  const width = String(Math.max(all.length - 1, 0)).length
  return all.map(({ label, files }, i) => ({ path: `${GROUPS_DIR}/${String(i).padStart(width, '0')}/${label}.test.mjs`, files }))
}

/**
 * The test file a launcher of {@link launchers} runs alone (`test/x.test.ts`), a group's name
 * (`group-2`), or `path` itself when it is no launcher: what the durations report names.
 */
export function testFileOf (path: string): string {
  const match = /^\.tap\/groups\/\d+\/(.+)\.test\.mjs$/.exec(path)
  if (match === null) return path
  const label = match[1] as string
  return label.startsWith('test/') ? `${label}.test.ts` : label
}

/**
 * A group's test file: it imports `files` in order, gives the group the time its files need
 * together (tap's per-file limit is for one file), at the end adds each file's time, from its
 * top-level tests, to `times.json`, and exits 10 s after its last test if a handle left open still
 * holds it (two clean-clone runs of `.ci/run` sat for many minutes on a group whose tests had all
 * ended, its event loop held by a pipe no test owned).
 */
export function groupSource (root: string, files: string[]): string {
  const urls = files.map((f) => JSON.stringify(pathToFileURL(join(root, f)).href))
  // a file alone keeps the per-file limit it has when tap runs it (.taprc's, or its own)
  return `// made by scripts/test.ts: ${files.length} test file${files.length === 1 ? '' : 's'} in one process
import t from 'tap'
import { readFileSync, writeFileSync } from 'node:fs'
${files.length > 1 ? `t.setTimeout(${files.length * 60_000})\n` : ''}const times = {}
t.on('subtestEnd', (sub) => {
  const file = sub.options?.at?.fileName
  if (typeof file === 'string') times[file] = (times[file] ?? 0) + (sub.options.time ?? 0) / 1000
})
// once every test has ended, something a test left open (a pipe, a socket) must not keep the group,
// and the whole run, waiting: it exits 10 s later if it is still there (with tap's exit code)
t.on('end', () => { setTimeout(() => { process.exit(t.passing() ? (process.exitCode ?? 0) : 1) }, Number(process.env.AGENT_HOST_GROUP_EXIT_MS ?? 10_000)).unref() })
process.once('exit', () => {
  const path = ${JSON.stringify(join(root, GROUPS_DIR, 'times.json'))}
  let all = {}
  try { all = JSON.parse(readFileSync(path, 'utf8')) } catch {}
  writeFileSync(path, JSON.stringify({ ...all, ...times }, null, 1))
})
${urls.map((u) => `await import(${u})`).join('\n')}
`
}

/** What `test/measure/typescript-hooks.mjs` exports (plain JavaScript, without types). */
interface TestLoader {
  transpile: (file: string, text: string) => string
}

/** What `scripts/vendor-bundle.mjs` exports (plain JavaScript, without types). */
interface VendorBundle {
  vendorEntries: () => Map<string, string>
}

/**
 * Fill the test loader's caches in this one process before tap starts its own: every TypeScript
 * file's output and the packages' build (scripts/vendor-bundle.mjs, made by a child process while
 * this one compiles). On a fresh clone the first processes (three groups and a file) otherwise each
 * load the compiler and compile every file at once, on two cores, and each make the build.
 */
export async function warmTestLoader (root: string): Promise<number> {
  const vendorUrl = pathToFileURL(join(root, 'scripts', 'vendor-bundle.mjs')).href
  const { NODE_OPTIONS: _options, ...env } = process.env
  const vendorBuild = spawn(process.execPath, ['--input-type=module', '-e', `(await import(${JSON.stringify(vendorUrl)})).vendorEntries()`], { cwd: root, env, stdio: 'ignore' })
  const vendorBuilt = once(vendorBuild, 'exit')
  const loader = await import(pathToFileURL(join(root, 'test', 'measure', 'typescript-hooks.mjs')).href) as TestLoader
  let files = 0
  for (const dir of ['src', 'agents', 'test']) {
    for (const entry of readdirSync(join(root, dir), { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || !/\.(ts|mts)$/.test(entry.name) || entry.name.endsWith('.d.ts')) continue
      const file = join(entry.parentPath, entry.name)
      loader.transpile(file, readFileSync(file, 'utf8'))
      files++
    }
  }
  await vendorBuilt
  // read here as the test processes will (and made here, should the child have failed)
  const vendor = await import(vendorUrl) as VendorBundle
  vendor.vendorEntries()
  return files
}

let wanted: Promise<string> | undefined

/** The plugins `.taprc` asks for, as tap signs them (read once: tap's config can be loaded once a process). */
async function pluginSignature (): Promise<string> {
  const { TapConfig } = await import('@tapjs/config')
  // tap's config reads this process's command line unless given one, and this one's (--quick) is not tap's
  return (await new TapConfig().loadPluginConfigFields().loadConfigFile()).parse([]).pluginSignature
}

/**
 * Whether tap's Test class in `node_modules` is built with the plugins `.taprc` asks for. `npm ci`
 * installs it with tap's defaults, its TypeScript plugin among them; tap's runner notices only
 * after it has computed its processes' arguments, so that run would still load ts-node into each.
 */
export async function tapBuilt (root: string): Promise<boolean> {
  const signature = await (wanted ??= pluginSignature())
  try {
    const built = readFileSync(join(root, 'node_modules', '@tapjs', 'test', 'test-built', 'dist', 'esm', 'index.js'), 'utf8')
    return /^export const signature = `([^`]*)`/m.exec(built)?.[1]?.trim() === signature
  } catch {
    return false
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const args = process.argv.slice(2)
  const quick = args.includes('--quick')
  const tapArgs = args.filter((a) => a !== '--quick')
  const named = tapArgs.some((a) => !a.startsWith('-'))
  let files: string[] = []
  if (!named) {
    const dir = join(ROOT, GROUPS_DIR)
    mkdirSync(dir, { recursive: true })
    for (const old of readdirSync(dir).filter((f) => f !== 'times.json')) rmSync(join(dir, old), { recursive: true, force: true })
    const weigh = (f: string): number => weight(ROOT, f)
    const heavy = picomatch(HEAVY)
    const groups = deal(groupedFiles(ROOT), quick ? QUICK_GROUPS : GROUPS, weigh)
    const alone = [...ALONE, ...testFiles(ROOT).filter((f) => !quick && heavy(f))]
    files = launchers(groups, alone, weigh).map((launcher) => {
      mkdirSync(dirname(join(ROOT, launcher.path)), { recursive: true })
      writeFileSync(join(ROOT, launcher.path), groupSource(ROOT, launcher.files))
      return launcher.path
    })
    // the durations report reads what this run writes, not a file's results from an older run
    for (const old of ['test-results', 'measure']) rmSync(join(ROOT, '.tap', old), { recursive: true, force: true })
  }
  // tap's own build, when .taprc's plugins are not what it is built with, beside the warm-up (some 6 s
  // of wall time each on a fresh clone), not before it as npm's pretest would
  const tapBuild = await tapBuilt(ROOT) ? undefined : spawn('npx', ['tap', 'build'], { cwd: ROOT, stdio: 'inherit' })
  const tapBuildDone = tapBuild === undefined ? undefined : once(tapBuild, 'exit') as Promise<[number | null]>
  await warmTestLoader(ROOT)
  if (tapBuildDone !== undefined) {
    const [code] = await tapBuildDone
    if (code !== 0) throw new Error(`npx tap build exited with ${String(code)}`)
  }
  // the tests' temporary files in memory when there is room (scripts/scratch.ts), removed after the run
  const scratch = mkdtempSync(join(scratchParent(), 'agent-host-test-'))
  // as /tmp is: the tests run servers and PostgreSQL as other users, who must reach their folders in it
  chmodSync(scratch, 0o1777)
  const env = { ...process.env, TMPDIR: scratch, ...(quick ? { PG_TEST_URL: process.env.PG_TEST_URL ?? 'none' } : {}) }
  // a Ctrl-C reaches the whole process group, tap included: this process outlives it, to remove the
  // scratch folder once tap has stopped its tests; a SIGTERM sent to this process alone is passed on
  const tap = spawn('npx', ['tap', ...(quick ? ['--disable-coverage', `--jobs=${QUICK_GROUPS}`] : []), ...tapArgs, ...files], { cwd: ROOT, env, stdio: 'inherit' })
  const ignore = (): void => {}
  const pass = (): void => { tap.kill('SIGTERM') }
  process.on('SIGINT', ignore)
  process.on('SIGTERM', pass)
  try {
    const [code, signal] = await once(tap, 'exit') as [number | null, NodeJS.Signals | null]
    process.exitCode = code ?? (signal !== null ? 128 + (constants.signals[signal] ?? 0) : 1)
  } finally {
    process.off('SIGINT', ignore)
    process.off('SIGTERM', pass)
    rmSync(scratch, { recursive: true, force: true })
  }
}
