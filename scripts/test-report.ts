/**
 * The durations report of the last `npm test` (`.ci/run` prints it after each test run): every test
 * file's own time (tap's `# time=` in `.tap/test-results`) with the CPU it used and what it waited
 * on (what `test/measure/preload.mjs` wrote to `.tap/measure`: CPU seconds of the file's process and
 * the children it waited for, processes started, servers listened with, PostgreSQL databases made,
 * timers of 100 ms or more that fired), the slowest files first. On two cores with three files at a
 * time, the CPU is what the suite's wall time is made of.
 *
 *     npx tsx scripts/test-report.ts            # the 15 slowest files
 *     npx tsx scripts/test-report.ts --all      # every file
 *     npx tsx scripts/test-report.ts --json     # every file, as JSON (to compare two runs)
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { pathToFileURL } from 'node:url'
import { testFileOf } from './test.js'

/** One test file's time and what it waited on. */
export interface FileDuration {
  file: string
  /** The file's own time, as tap measured it. */
  seconds: number
  /** CPU seconds of the file's process and the children it waited for (undefined where not measured). */
  cpuSeconds: number | undefined
  /** Processes it started, by command (a node script by its name). */
  processes: Record<string, number>
  servers: number
  pgDatabases: number
  /** Timers of 100 ms or more that fired, and their delays added up. */
  timers: number
  timerSeconds: number
}

interface Measured { file: string, cpuS?: number, processes: Record<string, number>, servers: number, pgDatabases: number, timers: number, timerMs: number }

function filesUnder (dir: string): string[] {
  if (!existsSync(dir)) return []
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
}

/** Every test file of the last run under `root`, with its measurements, slowest first. */
export function durations (root: string): FileDuration[] {
  const results = join(root, '.tap', 'test-results')
  const measured = new Map<string, Measured>()
  for (const path of filesUnder(join(root, '.tap', 'measure'))) {
    try {
      const m = JSON.parse(readFileSync(path, 'utf8')) as Measured
      measured.set(testFileOf(m.file), m)
    } catch {
      // a process killed while writing: its counts are lost, its time is still tap's
    }
  }
  const out: FileDuration[] = []
  for (const path of filesUnder(results)) {
    if (!path.endsWith('.tap')) continue
    const file = testFileOf(relative(results, path).replace(/\.tap$/, ''))
    const times = [...readFileSync(path, 'utf8').matchAll(/^# time=([\d.]+)ms$/gm)]
    const seconds = times.length === 0 ? 0 : Number(times[times.length - 1]?.[1]) / 1000
    const m = measured.get(file)
    out.push({
      file,
      seconds,
      cpuSeconds: m?.cpuS,
      processes: m?.processes ?? {},
      servers: m?.servers ?? 0,
      pgDatabases: m?.pgDatabases ?? 0,
      timers: m?.timers ?? 0,
      timerSeconds: (m?.timerMs ?? 0) / 1000
    })
  }
  return out.sort((a, b) => b.seconds - a.seconds)
}

/** `rows` as a Markdown table, with the files' total. */
export function table (rows: readonly FileDuration[], all: readonly FileDuration[] = rows): string {
  const total = all.reduce((sum, r) => sum + r.seconds, 0)
  const cpu = all.reduce((sum, r) => sum + (r.cpuSeconds ?? 0), 0)
  const processes = (p: Record<string, number>): string => Object.entries(p).sort((a, b) => b[1] - a[1]).map(([name, n]) => `${name}×${n}`).join(' ') || '—'
  return [
    '| file | s | CPU s | processes started | servers | pg dbs | timers ≥100 ms (Σ s) |',
    '|---|---:|---:|---|---:|---:|---:|',
    ...rows.map((r) => `| ${r.file} | ${r.seconds.toFixed(1)} | ${r.cpuSeconds?.toFixed(1) ?? '—'} | ${processes(r.processes)} | ${r.servers} | ${r.pgDatabases} | ${r.timers} (${r.timerSeconds.toFixed(1)}) |`),
    '',
    `${all.length} files, ${total.toFixed(0)} s of their own time and ${cpu.toFixed(0)} s of CPU in all`
  ].join('\n')
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const all = durations(process.cwd())
  if (process.argv.includes('--json')) console.log(JSON.stringify(all, null, 2))
  else console.log(table(process.argv.includes('--all') ? all : all.slice(0, 15), all))
}
