import t from 'tap'
import { AGENTS, build, envelope } from '../helper.js'

const RESEARCH = AGENTS.research

t.test('research on a fixture folder finds its TODOs, undocumented exports, long functions and untested modules, with priorities', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(RESEARCH, { target_path: 'test/fixtures/research-target' }) })
  t.equal(res.statusCode, 200, res.body)
  const output = res.json().output
  t.match(output, { status: 'ok', metrics: { files_scanned: 4, insights: 6 } })
  const report = output.artifacts[0].content
  const found = report.insights.map((i: { type: string, severity: string, location: string }) => `${i.type} ${i.severity} ${i.location}`).sort()
  t.same(found, [
    'complexity medium test/fixtures/research-target/src/long.ts:2',
    'docstring medium test/fixtures/research-target/src/parser.ts:2',
    'docstring medium test/fixtures/research-target/src/report.ts:1',
    'test medium test/fixtures/research-target/src/report.ts:1',
    'todo low test/fixtures/research-target/src/parser.ts:1',
    'todo medium test/fixtures/research-target/src/report.ts:4'
  ])
  t.equal(report.total_opportunities, 6)
  t.equal(report.estimated_effort_hours, 2 + 0.25 * 2 + 1 + 0.5 * 2)
  t.same(report.priority_matrix, { medium: report.insights.filter((i: { severity: string }) => i.severity === 'medium').map((i: { id: string }) => i.id), low: [report.insights.find((i: { severity: string }) => i.severity === 'low').id] })
  t.match(output.events, [{ type: 'research.complete', visibility: 'a2a' }])
})

t.test('research refuses a folder outside the working directory, and bad input', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const outside = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(RESEARCH, { target_path: '/etc' }) })
  t.match(outside.json().output, { status: 'fail', error: /must be a folder inside/ })
  const bad = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(RESEARCH, { target_path: 'x', depth: 'bottomless' }) })
  t.equal(bad.statusCode, 400)
})
