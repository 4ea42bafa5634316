import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as errors from '../src/errors.js'
import { ERROR_CATALOGUE, STREAM_ERROR_CODES } from '../src/errors.js'

const reference = readFileSync(new URL('../docs/reference/errors.md', import.meta.url), 'utf8')

/** The rows of the reference's table under `heading`, as trimmed cells. */
function rows (heading: string): string[][] {
  const section = reference.split(/^## /m).find((s) => s.startsWith(`${heading}\n`)) ?? ''
  return section.split('\n').filter((line) => line.startsWith('| `')).map((line) => line.slice(1, -1).split(' | ').map((c) => c.trim()))
}

t.test('error codes are unique and prefixed AH_ERR_', async (t) => {
  const codes = ERROR_CATALOGUE.map((e) => e.code)
  t.equal(new Set(codes).size, codes.length, 'unique')
  for (const code of codes) t.match(code, /^AH_ERR_[A-Z]+(_[A-Z]+)*$/)
  for (const e of ERROR_CATALOGUE) {
    t.ok(e.statusCode >= 400 && e.statusCode < 600, `${e.code} has an error status`)
    t.ok(e.description.length > 10, `${e.code} is described`)
  }
})

t.test('a second status is an HTTP code\'s, another error status than its first', async (t) => {
  const two = ERROR_CATALOGUE.filter((e) => e.otherStatusCode !== undefined)
  t.same(two.map((e) => e.code), ['AH_ERR_TOO_MANY_STREAMS'], 'the codes answered with two statuses')
  for (const e of two) {
    t.ok(e.http, `${e.code} is an HTTP answer`)
    t.ok(e.otherStatusCode !== e.statusCode && (e.otherStatusCode ?? 0) >= 400 && (e.otherStatusCode ?? 0) < 600, `${e.code}: ${e.statusCode} and ${String(e.otherStatusCode)}`)
  }
})

t.test('every HTTP error code is in the error reference with its status, both where it has two; every other code in the table of those raised at boot or to agent code', async (t) => {
  const http = new Map(rows('HTTP errors').map(([code, status]) => [code, status]))
  const internal = new Set(rows('Raised at boot or to agent code').map(([code]) => code))
  for (const e of ERROR_CATALOGUE) {
    const code = `\`${e.code}\``
    if (!e.http) { t.ok(internal.has(code) && !http.has(code), `${e.code} is among those raised at boot or to agent code`); continue }
    t.equal(http.get(code), e.otherStatusCode === undefined ? String(e.statusCode) : `${e.statusCode} / ${e.otherStatusCode}`, `${e.code} status`)
  }
  t.equal(http.size + internal.size, ERROR_CATALOGUE.length, 'no other row')
})

t.test('every stream error code is snake_case and in the error reference', async (t) => {
  const documented = new Set(rows('Stream errors').map(([code]) => code))
  for (const code of Object.keys(STREAM_ERROR_CODES)) {
    t.match(code, /^[a-z][a-z0-9_]*$/)
    t.ok(documented.has(`\`${code}\``), `${code} documented`)
  }
})

t.test('the error reference documents no code the catalogue lacks', async (t) => {
  const known = new Set<string>([...ERROR_CATALOGUE.map((e) => e.code), ...Object.keys(STREAM_ERROR_CODES)])
  const documented = [...reference.matchAll(/^\| `([A-Za-z_]+)` \|/gm)].map((m) => m[1] as string)
  t.ok(documented.length >= known.size, 'the rows are found')
  for (const code of documented) t.ok(known.has(code), `${code} exists`)
})

t.test('the catalogue is pinned: every entry is an export named by its code, and every such export is an entry', async (t) => {
  t.equal(ERROR_CATALOGUE.length, 70, 'the number of errors (change it with the catalogue, on purpose)')
  const exported = Object.keys(errors).filter((name) => name.startsWith('AH_ERR_')).sort()
  t.same(exported, ERROR_CATALOGUE.map((e) => e.code).sort(), 'export names are exactly the codes')
})

t.test('each error has its code, status and base class', async (t) => {
  const args: Record<string, unknown[]> = {
    AH_ERR_RUN_ABORTED: ['cancelled'],
    AH_ERR_BACKEND_FAILED: ['backend_failed', 'it broke', 'FATAL'],
    AH_ERR_TASK_AGENT_FAILED: ['bad input', { retryable: true }],
    AH_ERR_TASK_APPROVAL_REQUIRED: ['t1', { id: 'q1', message: 'Allow it?', call: {} }, async () => ({})]
  }
  for (const entry of ERROR_CATALOGUE) {
    const Ctor = (errors as unknown as Record<string, new (...a: unknown[]) => Error & { code: string, statusCode: number }>)[entry.code]
    if (Ctor === undefined) { t.fail(`${entry.code} is not exported`); continue }
    const error = new Ctor(...(args[entry.code] ?? ['a', 'b', 'c']))
    t.ok(error instanceof Error, `${entry.code} is an Error`)
    t.equal(error.code, entry.code, `${entry.code} carries its code`)
    t.equal(error.statusCode, entry.statusCode, `${entry.code} carries its status`)
    t.equal(typeof error.message, 'string')
  }
  const cause = new Error('root')
  t.equal(new errors.AH_ERR_TASK_LOCK_COMPROMISED('/x', { cause }).cause, cause, 'cause is kept')
  t.equal(new errors.AH_ERR_TASK_AGENT_FAILED('x', { cause }).cause, cause, 'cause is kept by the task agent error')
  t.equal(new errors.AH_ERR_RUN_ABORTED('timeout').name, 'AbortError', 'an aborted run reads as an AbortError')
})

t.test('no error class is made outside src/errors.ts', async (t) => {
  const src = fileURLToPath(new URL('../src/', import.meta.url))
  const files = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [])
  for (const file of files(src)) {
    if (relative(src, file) === 'errors.ts') continue
    const text = readFileSync(file, 'utf8')
    t.notMatch(text, /class \w+ extends (Error|\w+Error)\b/, `${relative(src, file)} defines no error class`)
    t.notMatch(text, /@fastify\/error|createError\(/, `${relative(src, file)} makes no error constructor`)
  }
})
