import t from 'tap'
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { defaultMetricFamilies, docs, hostMetrics, REFERENCE_DIR, referencePages, stalePages } from '../../scripts/docs.js'
import { USAGE } from '../../src/commands.js'
import { ConfigSchema } from '../../src/config.js'
import { ERROR_CATALOGUE, STREAM_ERROR_CODES } from '../../src/errors.js'
import { OTEL_SETTINGS } from '../../src/telemetry.js'
import { build, tempDataDir } from '../helper.js'

// docs/reference/ is written from the code by `npm run docs` (scripts/docs.ts). A committed page that
// is not what the generator makes now is stale; a generator that leaves out what a page is about
// fails here too, whatever is committed.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const pages = referencePages()
const CONFIGURATION = `${REFERENCE_DIR}/configuration.md`
const ERRORS = `${REFERENCE_DIR}/errors.md`
const METRICS = `${REFERENCE_DIR}/metrics.md`
const CLI = `${REFERENCE_DIR}/cli.md`

function generated (path: string): string {
  const text = pages[path]
  if (text === undefined) throw new Error(`the generator makes no ${path}`)
  return text
}

/** Where `found` first departs from `expected`, as the line number and both lines. */
function firstDifference (found: string, expected: string): { line: number, found: string | undefined, expected: string | undefined } {
  const a = found.split('\n')
  const b = expected.split('\n')
  const i = b.findIndex((line, n) => a[n] !== line)
  const at = i < 0 ? b.length : i
  return { line: at + 1, found: a[at], expected: b[at] }
}

t.test('every page of docs/reference/ is what npm run docs makes from the code now', async (t) => {
  for (const [path, text] of Object.entries(pages)) {
    const file = join(ROOT, path)
    const committed = existsSync(file) ? readFileSync(file, 'utf8') : undefined
    if (committed === text) t.pass(`${path} is up to date`)
    else t.fail(`${path} is stale: run npm run docs`, committed === undefined ? { missing: path } : firstDifference(committed, text))
  }
  const present = readdirSync(join(ROOT, REFERENCE_DIR)).map((name) => `${REFERENCE_DIR}/${name}`)
  t.same(present.filter((path) => !(path in pages)), [], `${REFERENCE_DIR}/ holds only generated pages`)
})

t.test('npm run docs -- --check fails on a page edited by hand, a missing page and a page nobody generates; npm run docs writes them', async (t) => {
  const root = tempDataDir(t)
  mkdirSync(join(root, REFERENCE_DIR), { recursive: true })
  for (const [path, text] of Object.entries(pages)) writeFileSync(join(root, path), text)
  const said: string[] = []
  const io = { out: (line: string) => { said.push(line) }, err: (line: string) => { said.push(line) } }
  t.equal(docs(root, ['--check'], io, pages), 0, 'the pages as generated are up to date')
  t.same(said.splice(0), [`${REFERENCE_DIR}/ is up to date`])

  writeFileSync(join(root, ERRORS), generated(ERRORS).replace('| 429 / 503 |', '| 429 |'))
  rmSync(join(root, CLI))
  writeFileSync(join(root, REFERENCE_DIR, 'notes.md'), '# Notes\n')
  const stale = [ERRORS, CLI, `${REFERENCE_DIR}/notes.md (not generated: remove it)`]
  t.same(stalePages(root, pages), stale)
  t.equal(docs(root, ['--check'], io, pages), 1, '--check: exit 1')
  t.same(said.splice(0), [`stale, run npm run docs:\n${stale.map((path) => `  ${path}`).join('\n')}`], 'naming each stale page')
  t.equal(readFileSync(join(root, ERRORS), 'utf8').includes('| 429 / 503 |'), false, '--check writes nothing')

  t.equal(docs(root, [], io, pages), 1, 'a file that is no page: exit 1, and it stays')
  t.same(said.splice(0), [`wrote ${ERRORS}`, `wrote ${CLI}`, stale[2]])
  t.equal(readFileSync(join(root, ERRORS), 'utf8'), generated(ERRORS), 'the edited page is written again')
  t.equal(readFileSync(join(root, CLI), 'utf8'), generated(CLI), 'the missing page is written')
  rmSync(join(root, REFERENCE_DIR, 'notes.md'))
  t.equal(docs(root, ['--check'], io, pages), 0, 'then up to date')
})

t.test('the configuration page has every setting and every OpenTelemetry variable the server reads', async (t) => {
  const page = generated(CONFIGURATION)
  const keys = Object.keys(ConfigSchema.properties)
  for (const key of keys) t.ok(page.includes(`\n| \`${key}\` |`), `${key} has a row`)
  t.equal(page.split('\n').filter((line) => /^\| `[A-Z0-9_]+` \|/.test(line)).length, keys.length + OTEL_SETTINGS.length, 'one row per setting and per OTEL variable')
  for (const { name } of OTEL_SETTINGS) t.ok(page.includes(`\n| \`${name}\` |`), `${name} has a row`)
  const telemetry = readFileSync(join(ROOT, 'src/telemetry.ts'), 'utf8')
  const read = [...telemetry.matchAll(/read\(env, '(OTEL_[A-Z_]+)'\)/g)].map((m) => m[1] as string)
  t.ok(read.length >= 4, 'the variables src/telemetry.ts reads are found')
  for (const name of read) t.ok(page.includes(`\`${name}\``), `${name}, read by src/telemetry.ts, is on the page`)
})

t.test('the errors page has every catalogue code and every stream error code', async (t) => {
  const page = generated(ERRORS)
  for (const { code } of ERROR_CATALOGUE) t.ok(page.includes(`\n| \`${code}\` |`), `${code} has a row`)
  for (const code of Object.keys(STREAM_ERROR_CODES)) t.ok(page.includes(`\n| \`${code}\` |`), `${code} has a row`)
})

t.test('the metrics page has every metric GET /metrics serves: ours by name, the process\'s by family', async (t) => {
  const page = generated(METRICS)
  const { metrics, defaults } = hostMetrics()
  for (const { name } of metrics.filter((m) => !defaults.has(m.name))) t.ok(page.includes(`\n| \`${name}\` |`), `${name} has a row`)
  const families = defaultMetricFamilies(defaults)
  for (const family of families) t.ok(page.includes(`\`${family}\``), `${family} is named`)

  const app = await build(t)
  const res = await app.inject({ method: 'GET', url: '/metrics' })
  t.equal(res.statusCode, 200)
  const served = [...res.body.matchAll(/^# TYPE (\S+) \S+$/gm)].map((m) => m[1] as string)
  t.ok(served.length > metrics.length / 2, 'the served metrics are found')
  for (const name of served) {
    const listed = page.includes(`\n| \`${name}\` |`) || families.some((family) => name.startsWith(family.slice(0, -1)))
    t.ok(listed, `${name} is on the page`)
  }
})

t.test('the command-line page has the usage text, whole', async (t) => {
  t.ok(generated(CLI).includes(`\`\`\`text\n${USAGE}\n\`\`\``))
})
