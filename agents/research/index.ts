import { readdir, readFile, realpath } from 'node:fs/promises'
import { basename, extname, join, relative, resolve, sep } from 'node:path'
import { defineContractAgent, type JsonObject } from '../../src/agents/index.js'
import { compileSchema } from '../../src/agents/json-schema.js'
import { ResearchAgentInput, ResearchAgentOutput, type Insight } from '../../src/protocol/contract.js'

const SOURCE = new Set(['.ts', '.js', '.mts', '.mjs', '.cts', '.cjs'])
const SKIP = new Set(['node_modules', 'dist', 'coverage', '.git', '.tap', 'data'])
const MAX_FILES = 5000
const LONG_FUNCTION_LINES = 60
const HOURS: Record<string, number> = { docstring: 0.25, todo: 0.5, complexity: 2, test: 1 }
const SCORE: Record<Insight['severity'], number> = { low: 0.25, medium: 0.5, high: 0.75, critical: 1 }
const validReport = compileSchema(ResearchAgentOutput)

async function sources (dir: string, out: string[] = []): Promise<string[]> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (out.length >= MAX_FILES) break
    if (entry.isDirectory() && !SKIP.has(entry.name) && !entry.name.startsWith('.')) await sources(join(dir, entry.name), out)
    else if (entry.isFile() && SOURCE.has(extname(entry.name)) && !entry.name.endsWith('.d.ts')) out.push(join(dir, entry.name))
  }
  return out
}

const isTest = (file: string): boolean => /\.(test|spec)\.[cm]?[jt]s$/.test(file) || file.split(sep).includes('test')

/** The line where the function opening at `start` closes (counting braces), or undefined. */
function closingLine (lines: string[], start: number): number | undefined {
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

/** What one file offers: TODOs, exports without JSDoc, long functions. */
function inspect (file: string, text: string, areas: Set<string>): Array<Omit<Insight, 'id' | 'priority_score' | 'estimated_hours'>> {
  const found: Array<Omit<Insight, 'id' | 'priority_score' | 'estimated_hours'>> = []
  const lines = text.split('\n')
  lines.forEach((line, i) => {
    const at = `${file}:${i + 1}`
    const todo = /\/\/\s*(TODO|FIXME|XXX)\b:?\s*(.*)$/.exec(line)
    if (todo !== null) found.push({ type: 'todo', severity: todo[1] === 'FIXME' ? 'medium' : 'low', location: at, description: `${todo[1] as string}: ${(todo[2] ?? '').trim()}`, suggested_fix: 'Do it, or file it as an issue and remove the comment', tags: ['todo'] })
    const exported = /^export\s+(?:default\s+)?(?:async\s+)?(function|class)\s+(\w+)/.exec(line)
    if (exported !== null && areas.has('documentation') && !/\*\/\s*$/.test(lines[i - 1] ?? '')) {
      found.push({ type: 'docstring', severity: 'medium', location: at, description: `exported ${exported[1] as string} ${exported[2] as string} has no JSDoc`, suggested_fix: `Add a /** ... */ comment saying what ${exported[2] as string} does, its parameters and what it returns`, tags: ['documentation'] })
    }
    if (areas.has('complexity') && /^\s*(export\s+)?(async\s+)?function\s+\w+|^\s*(async\s+)?[#\w]+\s*\([^)]*\)\s*(:\s*[^={]+)?\{\s*$/.test(line) && !/^\s*(if|for|while|switch|catch)\b/.test(line)) {
      const end = closingLine(lines, i)
      const length = end === undefined ? 0 : end - i + 1
      if (length > LONG_FUNCTION_LINES) found.push({ type: 'complexity', severity: length > 2 * LONG_FUNCTION_LINES ? 'high' : 'medium', location: at, description: `a function of ${length} lines`, suggested_fix: 'Split it into functions that each do one thing', tags: ['complexity'] })
    }
  })
  return found
}

/**
 * Research (seed 003's research agent), deterministic and local: looks at the source files under
 * `target_path` (inside the server's working directory) for TODO/FIXME comments, exported functions
 * and classes without JSDoc, functions longer than 60 lines and modules no test mentions, and
 * returns them as Insights with priorities, in a report artifact and a `research.complete` event.
 */
export default defineContractAgent({
  metadata: { id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a10', name: 'research', version: '1.0.0', author: 'agent-host', created_at: '2026-11-25T00:00:00.000Z' },
  contractVersion: '2.0.0',
  capabilities: [{
    name: 'research',
    description: 'Find improvement opportunities in a folder of this server\'s working directory',
    intent: 'research',
    timeout_ms: 60_000,
    inputs: JSON.parse(JSON.stringify(ResearchAgentInput)) as JsonObject
  }],
  getCapabilities: () => ({ focus_areas: ['documentation', 'testing', 'complexity'], languages: ['typescript', 'javascript'] }),
  async execute (input, { signal, log }) {
    const root = await realpath(process.cwd())
    const target = await realpath(resolve(root, String(input.payload.target_path))).catch(() => undefined)
    if (target === undefined || (target !== root && !target.startsWith(root + sep))) {
      return { task_id: input.task_id, status: 'fail', error: `target_path must be a folder inside ${root}` }
    }
    const areas = new Set((input.payload.focus_areas as string[] | undefined) ?? ['documentation', 'testing', 'complexity', 'security'])
    const files = await sources(target)
    const texts = new Map<string, string>()
    for (const file of files) {
      signal.throwIfAborted()
      texts.set(file, await readFile(file, 'utf8'))
    }
    // test files are told apart by their place inside the target, not by where the target is
    const test = (f: string): boolean => isTest(relative(target, f))
    const raw = files.filter((f) => !test(f)).flatMap((f) => inspect(relative(root, f), texts.get(f) as string, areas))
    if (areas.has('testing')) {
      const tests = files.filter(test).map((f) => texts.get(f) as string).join('\n')
      for (const file of files.filter((f) => !test(f))) {
        const name = basename(file).replace(/\.[cm]?[jt]s$/, '')
        if (name !== 'index' && !tests.includes(`/${name}.`) && !tests.includes(`'./${name}`)) {
          raw.push({ type: 'test', severity: 'medium', location: `${relative(root, file)}:1`, description: `no test imports ${name}`, suggested_fix: `Add a test that exercises ${name}`, tags: ['testing'] })
        }
      }
    }
    const insights: Insight[] = raw.map((r, i) => ({ ...r, id: `${r.type}-${i + 1}`, estimated_hours: HOURS[r.type] ?? 1, priority_score: SCORE[r.severity] }))
      .sort((a, b) => b.priority_score - a.priority_score || a.location.localeCompare(b.location))
    const matrix: Record<string, string[]> = {}
    for (const insight of insights) (matrix[insight.severity] ??= []).push(insight.id)
    const hours = insights.reduce((sum, i) => sum + i.estimated_hours, 0)
    const report = { insights, summary: `${insights.length} opportunities in ${files.length} files (${hours} hours)`, total_opportunities: insights.length, estimated_effort_hours: hours, priority_matrix: matrix }
    await log('info', report.summary)
    return {
      task_id: input.task_id,
      status: 'ok',
      artifacts: [{ kind: 'report', ref: `research/${input.task_id}.json`, content: report }],
      metrics: { files_scanned: files.length, insights: insights.length, estimated_hours: hours },
      events: [{ type: 'research.complete', key: `research:${input.task_id}`, data: { insights }, visibility: 'a2a' }]
    }
  },
  validate: (output) => output.status !== 'ok' || validReport(output.artifacts?.[0]?.content)
})
