import { readFile, realpath } from 'node:fs/promises'
import { basename, relative, resolve, sep } from 'node:path'
import { defineContractAgent, type JsonObject } from '../../src/agents/index.js'
import { compileSchema } from '../../src/agents/json-schema.js'
import { ResearchAgentInput, ResearchAgentOutput, type Insight } from '../../src/protocol/contract.js'
import { inspect, isTest, sources } from '../_shared/code-scan.js'

const HOURS: Record<string, number> = { docstring: 0.25, todo: 0.5, complexity: 2, test: 1 }
const SCORE: Record<Insight['severity'], number> = { low: 0.25, medium: 0.5, high: 0.75, critical: 1 }
const validReport = compileSchema(ResearchAgentOutput)

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
