import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as errors from '../src/errors.js'
import { ERROR_CATALOGUE, STREAM_ERROR_CODES } from '../src/errors.js'

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8')

t.test('error codes are unique and prefixed AH_ERR_', async (t) => {
  const codes = ERROR_CATALOGUE.map((e) => e.code)
  t.equal(new Set(codes).size, codes.length, 'unique')
  for (const code of codes) t.match(code, /^AH_ERR_[A-Z]+(_[A-Z]+)*$/)
  for (const e of ERROR_CATALOGUE) {
    t.ok(e.statusCode >= 400 && e.statusCode < 600, `${e.code} has an error status`)
    t.ok(e.description.length > 10, `${e.code} is described`)
  }
})

t.test('every HTTP error code is in the README table with its status', async (t) => {
  for (const e of ERROR_CATALOGUE) {
    const row = readme.split('\n').find((line) => line.startsWith(`| \`${e.code}\` |`))
    t.ok(row, `${e.code} has a row`)
    if (row === undefined) continue
    const cells = row.split('|').map((c) => c.trim())
    if (cells.length === 5) t.equal(cells[2]?.split(' / ')[0], String(e.statusCode), `${e.code} status`)
  }
})

t.test('every stream error code is snake_case and in the README', async (t) => {
  for (const code of Object.keys(STREAM_ERROR_CODES)) {
    t.match(code, /^[a-z][a-z0-9_]*$/)
    t.ok(readme.includes(`| \`${code}\` |`), `${code} documented`)
  }
})

t.test('the README documents no code the catalogue lacks', async (t) => {
  const known = new Set<string>([...ERROR_CATALOGUE.map((e) => e.code), ...Object.keys(STREAM_ERROR_CODES)])
  const documented = [...readme.matchAll(/^\| `([A-Za-z_]+)` \|/gm)].map((m) => m[1] as string)
    .filter((c) => c.startsWith('AH_ERR_') || (/^[a-z]+_[a-z_]+$/.test(c) && !c.startsWith('agent_host_')))
  for (const code of documented) t.ok(known.has(code), `${code} exists`)
})

t.test('the catalogue is pinned: every entry is an export named by its code, and every such export is an entry', async (t) => {
  t.equal(ERROR_CATALOGUE.length, 54, 'the number of errors (change it with the catalogue, on purpose)')
  const exported = Object.keys(errors).filter((name) => name.startsWith('AH_ERR_')).sort()
  t.same(exported, ERROR_CATALOGUE.map((e) => e.code).sort(), 'export names are exactly the codes')
})

t.test('each error has its code, status and base class', async (t) => {
  const args: Record<string, unknown[]> = {
    AH_ERR_RUN_ABORTED: ['cancelled'],
    AH_ERR_BACKEND_FAILED: ['backend_failed', 'it broke', 'FATAL'],
    AH_ERR_TASK_AGENT_FAILED: ['bad input', { retryable: true }]
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
