import t from 'tap'
import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { build, envelope, type Teardown } from '../helper.js'
import { fakeProvider, openai, type FakeProvider } from '../fixtures/providers.js'

const REFACTOR = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a12'
const RESEARCH = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a10'
const PLANNER = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a11'
const FIXTURE = fileURLToPath(new URL('../fixtures/refactor-target/', import.meta.url))
const FAST = { TASK_POLL_MS: '20', TASK_HEARTBEAT_MS: '100', TASK_LEASE_MS: '1000', WORKERS_PER_TYPE: '1' }

/** A copy of the fixture folder inside the working directory (the agent edits only there), removed after the test. */
function copyFixture (t: Teardown): string {
  const dir = `data-test-${randomUUID().slice(0, 8)}`
  cpSync(FIXTURE, join(process.cwd(), dir), { recursive: true })
  t.teardown(() => rmSync(join(process.cwd(), dir), { recursive: true, force: true }))
  return dir
}

/** The files `patch` makes of `originals` when git applies it in a folder of their own, outside any repository. */
function applyWithGit (t: Teardown, originals: Record<string, string>, patch: string): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), 'refactor-apply-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  for (const [path, text] of Object.entries(originals)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true })
    writeFileSync(join(dir, path), text)
  }
  writeFileSync(join(dir, 'change.patch'), patch)
  const options = { cwd: dir, env: { ...process.env, GIT_CEILING_DIRECTORIES: dirname(dir) }, stdio: 'pipe' as const }
  execFileSync('git', ['apply', '--check', 'change.patch'], options)
  execFileSync('git', ['apply', 'change.patch'], options)
  return Object.fromEntries(Object.keys(originals).map((path) => [path, readFileSync(join(dir, path), 'utf8')]))
}

const planTask = (type: string, files: string[]): Record<string, unknown> => ({
  id: `${type}-1`, type, description: `${type} ${files.join(', ')}`, estimated_hours: 1, priority: 5, assigned_agent: 'refactor', input_artifacts: files, output_artifacts: files, success_criteria: {}
})

async function refactor (app: FastifyInstance, payload: Record<string, unknown>, capability?: string): Promise<Record<string, any>> {
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(REFACTOR, payload, capability === undefined ? {} : { agentRequest: { metadata: { capability } } }) })
  if (res.statusCode !== 200) throw new Error(res.body)
  return res.json().output
}

const DOCUMENTED_CONFIG = `// A fixture of the refactor agent's tests: exports with and without JSDoc.
/**
 * Parse config.
 * @param text
 * @param options
 * @returns
 */
export function parseConfig (text: string, { strict = false }: { strict?: boolean } = {}): Record<string, string> {
  const entries = text.split('\\n').filter((line) => line.includes('=')).map((line) => line.split('=', 2) as [string, string])
  if (strict && entries.length === 0) throw new Error('empty config')
  return Object.fromEntries(entries)
}

/** Already documented: left as it is. */
export function keep (): void {}

/**
 * A task store.
 */
export class TaskStore {
  tasks: string[] = []
}

/**
 * Load all.
 * @param paths
 * @param rest
 */
export async function loadAll (paths: string[], ...rest: Array<Map<string, number>>): Promise<void> {
  await Promise.resolve([paths, rest])
}

/**
 * Wrapped.
 */
export function wrapped (
  a: number
): number {
  return a
}
`

const DOCUMENTED_URL = `/**
 * Make URL parser.
 * @param base
 * @returns
 */
export default function makeURLParser (this: unknown, base: string): (path: string) => URL {
  return (path) => new URL(path, base)
}

/**
 * An app error.
 */
export class AppError extends Error {}
`

t.test('add_docstrings: JSDoc skeletons above the undocumented exports, real diffs git applies, and a second run changes nothing', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const dir = copyFixture(t)
  writeFileSync(join(dir, 'src/crlf.ts'), 'export function hello (): string {\r\n  return \'hi\'\r\n}\r\n')
  const files = ['config.ts', 'url.ts', 'done.ts', 'crlf.ts'].map((f) => `${dir}/src/${f}`)
  const originals = Object.fromEntries(files.map((f) => [f, readFileSync(f, 'utf8')]))
  const payload = { task: planTask('document', files), target_files: [...files, `./${files[0] as string}`], change_type: 'add_docstrings' }
  const output = await refactor(app, payload)
  t.equal(output.status, 'ok')
  const expected = {
    [files[0] as string]: DOCUMENTED_CONFIG,
    [files[1] as string]: DOCUMENTED_URL,
    [files[2] as string]: originals[files[2] as string],
    [files[3] as string]: '/**\r\n * Hello.\r\n * @returns\r\n */\r\nexport function hello (): string {\r\n  return \'hi\'\r\n}\r\n'
  }
  t.same(Object.fromEntries(files.map((f) => [f, readFileSync(f, 'utf8')])), expected, 'the files were written in place, CRLF kept')
  t.same(readdirSync(join(dir, 'src')).sort(), ['config.ts', 'crlf.ts', 'done.ts', 'url.ts'], 'no temporary file is left')

  const content = output.artifacts[0].content
  t.same(content.changed_files.map((f: { path: string, lines_added: number, lines_removed: number, change_summary: string }) => [f.path, f.lines_added, f.lines_removed, f.change_summary]), [
    [files[0], 17, 0, 'JSDoc added to parseConfig, TaskStore, loadAll, wrapped'],
    [files[1], 8, 0, 'JSDoc added to makeURLParser, AppError'],
    [files[3], 4, 0, 'JSDoc added to hello']
  ], 'done.ts had nothing to change')
  t.equal(content.changed_files[1].diff, [
    `--- a/${dir}/src/url.ts`, `+++ b/${dir}/src/url.ts`, '@@ -1,5 +1,13 @@',
    '+/**', '+ * Make URL parser.', '+ * @param base', '+ * @returns', '+ */',
    ' export default function makeURLParser (this: unknown, base: string): (path: string) => URL {', '   return (path) => new URL(path, base)', ' }', ' ',
    '+/**', '+ * An app error.', '+ */',
    ' export class AppError extends Error {}', ''
  ].join('\n'), 'a unified diff with 3 lines of context')
  const applied = applyWithGit(t, originals, content.changed_files.map((f: { diff: string }) => f.diff).join(''))
  t.same(applied, expected, 'git applies the diffs to the originals and gets the new files')
  t.same(content.diff_stats, { files_changed: 3, insertions: 29, deletions: 0, test_coverage_delta: 0, complexity_delta: 0 })
  t.match(content, { tests_added: [], docs_updated: [], pr_url: null })
  t.match(output.artifacts[0], { kind: 'diff', ref: `refactor/${output.task_id as string}.patch` })
  t.same(output.metrics, { files_changed: 3, insertions: 29, deletions: 0 })
  t.same(output.events, [{ type: 'code.changed', key: `code:${output.task_id as string}`, data: { files: [files[0], files[1], files[3]], pr_url: null }, visibility: 'a2a' }])

  const second = await refactor(app, payload)
  t.same(second.artifacts[0].content.changed_files, [], 'idempotent: the second run changes nothing')
  t.same(Object.fromEntries(files.map((f) => [f, readFileSync(f, 'utf8')])), expected)
})

t.test('refactor: a target outside the working directory, missing, or not a source file it may change fails; bad input is a 400', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  t.match(await refactor(app, { task: planTask('document', ['/etc/hostname']) }), { status: 'fail', error: `target file /etc/hostname is not inside ${process.cwd()}` })
  t.match(await refactor(app, { task: planTask('document', ['../elsewhere.ts']) }), { status: 'fail', error: /is not inside/ })
  t.match(await refactor(app, { task: planTask('document', ['test/fixtures/refactor-target/src/gone.ts']) }), { status: 'fail', error: 'target file test/fixtures/refactor-target/src/gone.ts is missing' })
  for (const file of ['package.json', 'node_modules/tap/package.json', 'node_modules/semver/index.js', '.gitignore', 'README.md']) {
    t.match(await refactor(app, { task: planTask('document', [file]) }), { status: 'fail', error: /is not a source file this agent may change/ }, `${file} is never rewritten`)
  }
  const bad = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(REFACTOR, { target_files: ['x.ts'] }) })
  t.equal(bad.statusCode, 400)
})

t.test('the LLM capabilities answer 503 AH_ERR_BACKEND_UNAVAILABLE when no LLM is configured', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  for (const capability of ['refactor', 'simplify', 'resolve_todo', 'add_tests']) {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(REFACTOR, { task: planTask('simplify', ['x.ts']) }, { agentRequest: { metadata: { capability } } }) })
    t.equal(res.statusCode, 503, capability)
    t.equal(res.json().code, 'AH_ERR_BACKEND_UNAVAILABLE')
  }
})

function openAiEnv (fake: FakeProvider): Record<string, string> {
  return { LLM_PROVIDER: 'openai', OPENAI_BASE_URL: `${fake.url}/v1`, OPENAI_MODEL: 'test-model', LLM_MAX_RETRIES: '0', WORKERS_PER_TYPE: '0' }
}

t.test('simplify with the LLM: a fresh session per file, the fenced block written, the diff right', async (t) => {
  const fake = await fakeProvider(t)
  const app = await build(t, openAiEnv(fake))
  const dir = copyFixture(t)
  const files = [`${dir}/src/config.ts`, `${dir}/src/url.ts`]
  const originals = Object.fromEntries(files.map((f) => [f, readFileSync(f, 'utf8')]))
  const rewritten = (originals[files[0] as string] as string).replace(/^\/\/ A fixture.*\n/, '').replace('export function keep (): void {}\n', 'export function keep (): void {\n  // nothing\n}\n')
  fake.script(
    { frames: openai.text(['Here it is:\n```ts\n', rewritten, '```\n']) },
    { frames: openai.text([`\`\`\`typescript\n${originals[files[1] as string] as string}\`\`\``]) }
  )
  const output = await refactor(app, { task: planTask('simplify', files) }, 'simplify')
  t.equal(output.status, 'ok', JSON.stringify(output))
  t.equal(readFileSync(files[0] as string, 'utf8'), rewritten, 'the file is the model\'s block')
  t.equal(readFileSync(files[1] as string, 'utf8'), originals[files[1] as string], 'unchanged by the model: untouched')
  const content = output.artifacts[0].content
  t.same(content.changed_files.map((f: { path: string, lines_added: number, lines_removed: number, change_summary: string }) => [f.path, f.lines_added, f.lines_removed, f.change_summary]), [[files[0], 3, 2, 'refactor by openai']])
  t.same(applyWithGit(t, originals, content.changed_files[0].diff)[files[0] as string], rewritten)
  t.equal(fake.received.length, 2, 'one model call per file')
  for (const [i, file] of files.entries()) {
    const messages = fake.received[i]?.body.messages as Array<{ role: string, content: string }>
    t.same(messages.map((m) => m.role), ['system', 'user'], 'a fresh session: no earlier file in it')
    t.match(messages[0]?.content, /complete new content of the file in one fenced code block/)
    t.match(messages[1]?.content, /^Simplify the code/)
    t.ok(messages[1]?.content.includes(`${originals[file] as string}\n\`\`\``), 'the file as it is now is in the prompt')
  }
})

t.test('the LLM path: an answer without a fenced block asks for a retry and writes nothing; the change type and style guide reach the prompt', async (t) => {
  const fake = await fakeProvider(t)
  const app = await build(t, openAiEnv(fake))
  const dir = copyFixture(t)
  const files = [`${dir}/src/done.ts`, `${dir}/src/url.ts`]
  const before = files.map((f) => readFileSync(f, 'utf8'))
  fake.script({ frames: openai.text(['```\nexport const changed = true\n```']) }, { frames: openai.text(['I would rather not.']) })
  const output = await refactor(app, { task: planTask('refactor', files), target_files: files, change_type: 'modernize', style_guide: 'Tabs, never spaces.' }, 'refactor')
  t.match(output, { status: 'retry', error: `the model gave no fenced code block for ${files[1] as string}` })
  t.same(files.map((f) => readFileSync(f, 'utf8')), before, 'the first file\'s edit is not written either')
  const prompt = (fake.received[0]?.body.messages as Array<{ content: string }>)[1]?.content
  t.match(prompt, /^Make this change: modernize\.\n\nThe task: refactor .*\n\nFollow this style guide:\nTabs, never spaces\./)
})

t.test('a plan\'s document task runs in the task graph: research → planner → POST /v1/plans → documented files, a passing evaluation', async (t) => {
  const app = await build(t, FAST)
  const dir = copyFixture(t)
  const call = async (agent: string, payload: Record<string, unknown>): Promise<Record<string, any>> =>
    (await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(agent, payload) })).json().output
  const insights = (await call(RESEARCH, { target_path: dir, focus_areas: ['documentation'] })).artifacts[0].content.insights
  const plan = (await call(PLANNER, { insights, constraints: { insight_types: ['docstring'] } })).artifacts[0].content.plan
  t.same(plan.tasks.map((x: { id: string, input_artifacts: string[] }) => [x.id, x.input_artifacts]), [['document-1', [`${dir}/src/config.ts`]], ['document-2', [`${dir}/src/url.ts`]], ['evaluate', [`${dir}/src/config.ts`, `${dir}/src/url.ts`]]])
  t.equal((await app.inject({ method: 'POST', url: '/v1/plans', payload: plan })).statusCode, 201)

  let progress: Record<string, any> = {}
  for (const deadline = Date.now() + 20_000; progress.tasks_by_status?.COMPLETED !== 3; await sleep(20)) {
    if (Date.now() > deadline || progress.tasks_by_status?.FAILED > 0) throw new Error(`the plan did not complete: ${JSON.stringify(progress.tasks_by_status)}`)
    progress = (await app.inject({ url: `/v1/plans/${plan.id as string}` })).json()
  }
  t.equal(readFileSync(`${dir}/src/config.ts`, 'utf8'), DOCUMENTED_CONFIG)
  t.equal(readFileSync(`${dir}/src/url.ts`, 'utf8'), DOCUMENTED_URL)
  const artifact = (task: string): Record<string, any> => progress.artifacts.find((a: { task_id: string }) => a.task_id === `${plan.id as string}.${task}`).artifact
  t.match(artifact('document-1'), { kind: 'diff', ref: `refactor/${plan.id as string}.document-1.patch`, content: { diff_stats: { files_changed: 1, insertions: 17 } } })
  t.match(artifact('evaluate'), {
    kind: 'report',
    content: { passed: true, metrics: { undocumented_exports: { previous_value: 6, value: 0, threshold: 0, passed: true } }, report: { improvements: ['undocumented_exports fell from 6 to 0 (-100%)'] } }
  })
})
