/**
 * The inner loop, `npm run test:quick`: the unit and in-process test files, without coverage, several
 * files to a process. A test process spends some 3 s of CPU loading tap and the app before its first
 * test; run one per file, the hundred in-process files paid that a hundred times. Here they are
 * dealt into a few groups, each one tap process that imports its files one after another (their
 * tests run in that order, each file's as it would alone), the groups side by side as tap runs files.
 * A failure names its test file (tap's `at:`). What starts processes, builds, browsers or benchmarks
 * is left to `npm test` ({@link HEAVY}), and so are the PostgreSQL halves of the contract tests unless
 * `PG_TEST_URL` names a server.
 *
 *     npm run test:quick                       # every in-process file
 *     npm run test:quick -- --reporter=tap     # more arguments go to tap
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import picomatch from 'picomatch'

const ROOT = fileURLToPath(new URL('../', import.meta.url))

/** Files that start processes, servers as processes, builds, browsers or benchmarks: `npm test` runs them. */
export const HEAVY = [
  'test/{bench,deploy,docs,layout,playground,storage/postgres}/**',
  'test/{scaffold,server-process,config,journal-first,resume,telemetry,cli-output}.test.ts',
  'test/runtime/{chaos,concurrency,crash,narrator}.test.ts',
  'test/storage/{bus-processes,audit,audit-tamper,events-contract,data-dir}.test.ts',
  'test/assist/{lease-recovery,orphan-follow,paused-owner,shutdown-stuck-agent,foreign-lock,join-race}.test.ts',
  'test/tools/{calls,readme,servers-file}.test.ts',
  'test/bus/bus-http.test.ts',
  'test/measure/preload.test.ts'
]

/**
 * In-process files that run as their own process all the same: observability re-imports the app with
 * a module mocked (tap's mockImport), and another file's imports beside it in one process stall.
 */
export const ALONE = ['test/observability.test.ts']

/** The groups (processes), as many as tap runs at once (`jobs` in .taprc). */
const GROUPS = 3

/** The in-process test files under `root`, by name. */
export function quickFiles (root: string): string[] {
  const heavy = picomatch(HEAVY)
  return readdirSync(join(root, 'test'), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.test.ts'))
    .map((entry) => relative(root, join(entry.parentPath, entry.name)).split('\\').join('/'))
    .filter((file) => !heavy(file))
    .sort()
}

/**
 * How long `file` is expected to take: its time in the last `npm test` (tap's `# time=` in
 * `.tap/test-results`), else a second for each of its top-level tests.
 */
export function weight (root: string, file: string): number {
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

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const dir = join(ROOT, '.tap', 'quick')
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  const files = quickFiles(ROOT)
  const groups = deal(files.filter((f) => !ALONE.includes(f)), GROUPS, (f) => weight(ROOT, f)).map((files, i) => {
    const path = join(dir, `group-${i + 1}.test.mjs`)
    writeFileSync(path, `// made by scripts/test-quick.ts: ${files.length} test files in one process\n${files.map((f) => `await import(${JSON.stringify(pathToFileURL(join(ROOT, f)).href)})`).join('\n')}\n`)
    return relative(ROOT, path)
  })
  // a group runs as long as its files together: tap's per-file limit is for one file
  // without a PostgreSQL server named, the PostgreSQL halves of the contract tests skip (saying so)
  // rather than each group starting a throwaway server
  const env = { ...process.env, PG_TEST_URL: process.env.PG_TEST_URL ?? 'none' }
  const tap = spawnSync('npx', ['tap', '--disable-coverage', '--timeout=900', ...process.argv.slice(2), ...groups, ...files.filter((f) => ALONE.includes(f))], { cwd: ROOT, env, stdio: 'inherit' })
  process.exitCode = tap.status ?? 1
}
