import t from 'tap'
import { readFileSync } from 'node:fs'
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
