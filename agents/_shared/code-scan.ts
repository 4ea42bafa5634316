import { readdir, readFile, realpath } from 'node:fs/promises'
import { extname, join, relative, resolve, sep } from 'node:path'
import type { Insight } from '../../src/protocol/contract.js'

const SOURCE = new Set(['.ts', '.js', '.mts', '.mjs', '.cts', '.cjs'])
const SKIP = new Set(['node_modules', 'dist', 'coverage', '.git', '.tap', 'data'])
const MAX_FILES = 5000
const LONG_FUNCTION_LINES = 60
const ALL_AREAS: ReadonlySet<string> = new Set(['documentation', 'complexity'])

/** An insight as one file shows it, before research gives it an id, a priority and hours. */
export type Finding = Omit<Insight, 'id' | 'priority_score' | 'estimated_hours'>

/** What {@link measure} counts in one file; the names are the evaluator's and the planner's metric names. */
export interface FileMetrics {
  undocumented_exports: number
  todos: number
  long_functions: number
  lines: number
}

/** An exported function or class without JSDoc above it: the `line` (0-based) it is declared on. */
export interface UndocumentedExport {
  line: number
  kind: 'function' | 'class'
  name: string
}

/** The source files under `dir` (no declaration files, no dependency or build folders), at most 5000. */
export async function sources (dir: string, out: string[] = []): Promise<string[]> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (out.length >= MAX_FILES) break
    if (entry.isDirectory() && !SKIP.has(entry.name) && !entry.name.startsWith('.')) await sources(join(dir, entry.name), out)
    else if (entry.isFile() && SOURCE.has(extname(entry.name)) && !entry.name.endsWith('.d.ts')) out.push(join(dir, entry.name))
  }
  return out
}

/** Whether `file` (a path relative to the folder scanned) is a test: `*.test.*`, `*.spec.*` or under a `test` folder. */
export const isTest = (file: string): boolean => /\.(test|spec)\.[cm]?[jt]s$/.test(file) || file.split(sep).includes('test')

/** The line where the function opening at `start` closes (counting braces), or undefined. */
export function closingLine (lines: readonly string[], start: number): number | undefined {
  let depth = 0
  let opened = false
  for (let i = start; i < lines.length; i++) {
    for (const ch of (lines[i] as string).replace(/(['"`])(?:\\.|(?!\1).)*\1/g, '').replace(/\/\/.*$/, '')) {
      if (ch === '{') { depth++; opened = true } else if (ch === '}') depth--
    }
    if (opened && depth <= 0) return i
  }
  return undefined
}

/** The export declared on line `i`, when it is a top-level exported function or class the line above does not document. */
export function undocumentedExport (lines: readonly string[], i: number): UndocumentedExport | undefined {
  const exported = /^export\s+(?:default\s+)?(?:async\s+)?(function|class)\s+(\w+)/.exec(lines[i] ?? '')
  if (exported === null || /\*\/\s*$/.test(lines[i - 1] ?? '')) return undefined
  return { line: i, kind: exported[1] as UndocumentedExport['kind'], name: exported[2] as string }
}

/** What one file offers: TODOs, exports without JSDoc (area `documentation`), long functions (area `complexity`). */
export function inspect (file: string, text: string, areas: ReadonlySet<string>): Finding[] {
  const found: Finding[] = []
  const lines = text.split('\n')
  lines.forEach((line, i) => {
    const at = `${file}:${i + 1}`
    const todo = /\/\/\s*(TODO|FIXME|XXX)\b:?\s*(.*)$/.exec(line)
    if (todo !== null) found.push({ type: 'todo', severity: todo[1] === 'FIXME' ? 'medium' : 'low', location: at, description: `${todo[1] as string}: ${(todo[2] ?? '').trim()}`, suggested_fix: 'Do it, or file it as an issue and remove the comment', tags: ['todo'] })
    const exported = areas.has('documentation') ? undocumentedExport(lines, i) : undefined
    if (exported !== undefined) {
      found.push({ type: 'docstring', severity: 'medium', location: at, description: `exported ${exported.kind} ${exported.name} has no JSDoc`, suggested_fix: `Add a /** ... */ comment saying what ${exported.name} does, its parameters and what it returns`, tags: ['documentation'] })
    }
    if (areas.has('complexity') && /^\s*(export\s+)?(async\s+)?function\s+\w+|^\s*(async\s+)?[#\w]+\s*\([^)]*\)\s*(:\s*[^={]+)?\{\s*$/.test(line) && !/^\s*(if|for|while|switch|catch)\b/.test(line)) {
      const end = closingLine(lines, i)
      const length = end === undefined ? 0 : end - i + 1
      if (length > LONG_FUNCTION_LINES) found.push({ type: 'complexity', severity: length > 2 * LONG_FUNCTION_LINES ? 'high' : 'medium', location: at, description: `a function of ${length} lines`, suggested_fix: 'Split it into functions that each do one thing', tags: ['complexity'] })
    }
  })
  return found
}

const within = (root: string, path: string): boolean => path === root || path.startsWith(root + sep)

/**
 * Where `path` (relative to `root`, a real path) really is: `outside` when it or its real path
 * (symbolic links followed) leaves `root`, `missing` when nothing is there.
 */
export async function locate (root: string, path: string): Promise<{ real: string } | 'missing' | 'outside'> {
  const lexical = resolve(root, path)
  if (!within(root, lexical)) return 'outside'
  const real = await realpath(lexical).catch(() => undefined)
  if (real === undefined) return 'missing'
  return within(root, real) ? { real } : 'outside'
}

/**
 * Whether a file may be changed by an agent: a source file (by its extension) none of whose folders
 * under `root` is a dependency, build, data or hidden folder. Nothing else (settings, keys, lock
 * files, `.env`) is ever rewritten.
 */
export function editable (root: string, real: string): boolean {
  const parts = relative(root, real).split(sep)
  return SOURCE.has(extname(real)) && !real.endsWith('.d.ts') && parts.slice(0, -1).every((p) => !SKIP.has(p) && !p.startsWith('.'))
}

/** The metrics of one file's text. */
export function metricsOf (text: string): FileMetrics {
  const found = inspect('', text, ALL_AREAS)
  const count = (type: string): number => found.filter((f) => f.type === type).length
  const lines = text === '' ? 0 : text.split('\n').length - (text.endsWith('\n') ? 1 : 0)
  return { undocumented_exports: count('docstring'), todos: count('todo'), long_functions: count('complexity'), lines }
}

/**
 * Per-file metrics of `files` (paths relative to `root`, by default the working directory): exports
 * without JSDoc, TODO/FIXME/XXX comments, functions over 60 lines and lines. A file that is missing,
 * or outside `root`, is `null` (it is not read).
 */
export async function measure (files: readonly string[], root = process.cwd()): Promise<Record<string, FileMetrics | null>> {
  const base = await realpath(root)
  const measured: Record<string, FileMetrics | null> = {}
  for (const file of files) {
    const where = await locate(base, file)
    const text = typeof where === 'string' ? undefined : await readFile(where.real, 'utf8').catch(() => undefined)
    measured[file] = text === undefined ? null : metricsOf(text)
  }
  return measured
}

/** The sum of per-file metrics (a missing file counts as 0). */
export function totals (measured: Record<string, FileMetrics | null>): Record<string, number> {
  const sum: FileMetrics = { undocumented_exports: 0, todos: 0, long_functions: 0, lines: 0 }
  for (const metrics of Object.values(measured)) {
    if (metrics === null) continue
    for (const name of Object.keys(sum) as Array<keyof FileMetrics>) sum[name] += metrics[name]
  }
  return { ...sum }
}
