import t from 'tap'
import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { needsPrograms } from '../host-programs.js'
import { startServer } from '../server-child.js'
import { until } from '../socket.js'
import { docBlocks } from './doc-blocks.js'

// The contract-agent walkthrough of docs/task-graph-and-bus.md, run as written (only the port changes) against a server
// in its own process whose working directory is a scratch folder, so the agent the walkthrough
// writes and edits lands there and not in this repository's agents/.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const skip = needsPrograms(['jq'])

/** The shell blocks of the walkthrough: the bus follower, then the steps. */
function walkthrough (): { follow: string, steps: string } {
  const blocks = docBlocks('docs/task-graph-and-bus.md', '### Walkthrough: review a new agent')
  t.equal(blocks.length, 2, 'the walkthrough is two shell blocks')
  return { follow: blocks[0] as string, steps: blocks[1] as string }
}

t.test('the walkthrough works as written: research, plan, tasks, evaluation, and the four events on the feed', { skip, timeout: 240_000 }, async (t) => {
  const scratch = mkdtempSync(join(tmpdir(), 'agent-host-walkthrough-'))
  t.teardown(() => { rmSync(scratch, { recursive: true, force: true }) })
  mkdirSync(join(scratch, 'agents'))
  const server = await startServer(t, {
    DATA_DIR: join(scratch, 'data'),
    AGENTS_DIR: join(ROOT, 'agents'),
    TASK_POLL_MS: '50',
    BUS_POLL_MS: '50'
  }, { cwd: scratch })
  const { follow, steps } = walkthrough()
  const local = (script: string): string => script.replaceAll('http://127.0.0.1:3000', server.url)

  const follower = spawn('bash', ['-c', local(follow)], { cwd: scratch, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { follower.kill('SIGKILL') })
  let feed = ''
  follower.stdout.on('data', (c: Buffer) => { feed += c.toString('utf8') })
  // the feed's first bytes (its retry: line) come after its cursor was taken
  await until('the follower connected', () => feed.includes('retry:'), 30_000, 20)

  const run = spawn('bash', ['-c', `set -euo pipefail\n${local(steps)}`], { cwd: scratch, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  run.stdout.on('data', (c: Buffer) => { out += c.toString('utf8') })
  run.stderr.on('data', (c: Buffer) => { err += c.toString('utf8') })
  const code = await new Promise<number | null>((resolve) => run.on('exit', resolve))
  t.equal(code, 0, `the steps ran to the end: ${err}`)

  t.match(out, /medium\tdocstring\tagents\/greeter\/index\.ts:3\texported function greeting has no JSDoc/, 'research found the undocumented export')
  t.match(out, /"critical_path": \[\s*"document-1",\s*"evaluate"\s*\]/, 'the plan: document, then evaluate')
  t.match(out, /\/\*\*\n \* Greeting\.\n \* @param name\n \* @param excited\n \* @returns\n \*\/\nexport function greeting/, 'the JSDoc is in the file')
  t.match(out, /\+\+\+ b\/agents\/greeter\/index\.ts\n@@ -1,5 \+1,11 @@/, 'the diff')
  t.match(out, /"passed": true,\n {2}"score": 100/, 'the evaluation passed')
  t.match(out, /"undocumented_exports": \{\n\s*"previous_value": 1,\n\s*"value": 0/)
  t.match(out, /1\tresearch\.complete\tagent:research\n2\tplan\.ready\tagent:planner\n3\tcode\.changed\tagent:refactor\n4\tevaluation\.complete\tagent:evaluator\n/, 'the bus, in order')
  t.notOk(existsSync(join(scratch, 'agents', 'greeter')), 'tidied up')

  await until('the follower saw the four events', () => (feed.match(/^event: bus\.event$/gm) ?? []).length === 4, 10_000, 20)
  const frames = feed.split('\n\n').filter((f) => f.startsWith('event: bus.event')).map((f) => JSON.parse(/^data: (.*)$/m.exec(f)?.[1] as string) as { type: string })
  t.same(frames.map((e) => e.type), ['research.complete', 'plan.ready', 'code.changed', 'evaluation.complete'])
})
