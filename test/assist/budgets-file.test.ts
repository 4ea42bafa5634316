// BUDGETS_FILE read and checked at boot: every problem on a line of its own, naming the file and the place.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { loadBudgets } from '../../src/assist/budgets-file.js'
import { buildApp } from '../../src/app.js'
import { tempDataDir, testConfig } from '../helper.js'

function file (t: Parameters<typeof tempDataDir>[0], text: string): string {
  const path = join(tempDataDir(t), 'budgets.json')
  writeFileSync(path, text)
  return path
}

t.test('no file: no budgets', async (t) => {
  t.same(loadBudgets(''), {})
})

t.test('a good file is taken as it is', async (t) => {
  const budgets = { default: { day: { tokens: 100 } }, tenants: { acme: { month: { tokens: 5, cost_usd: 1.5 } } }, keys: { 'tenant:acme/k1': { day: { cost_usd: 0.25 } } } }
  t.same(loadBudgets(file(t, JSON.stringify(budgets))), budgets)
})

t.test('a file that cannot be read, or is not JSON, is refused naming it', async (t) => {
  const missing = join(tempDataDir(t), 'nowhere.json')
  t.throws(() => loadBudgets(missing), { code: 'AH_ERR_CONFIG_INVALID', message: new RegExp(`env/BUDGETS_FILE ${missing}:\\n  - cannot be read as JSON: ENOENT`) })
  t.throws(() => loadBudgets(file(t, '{"default":')), { message: /cannot be read as JSON/ })
})

t.test('each problem of the file is a line naming its place', async (t) => {
  const path = file(t, JSON.stringify({
    tenants: { Acme: { day: { tokens: 1 } }, ok: {}, neg: { day: { tokens: -1 } }, empty: { month: {} } },
    keys: { k: { week: { tokens: 1 } } },
    owners: {}
  }))
  const err = t.throws(() => loadBudgets(path)) as Error
  t.match(err.message, `env/BUDGETS_FILE ${path}:`)
  t.match(err.message, '/owners: must NOT have additional properties')
  t.match(err.message, '/tenants/Acme: a tenant\'s name is 1 to 63 of a-z, 0-9 and "-", starting with a letter or digit')
  t.match(err.message, '/tenants/ok: give at least one of day and month')
  t.match(err.message, '/tenants/neg/day/tokens: must be >= 0')
  t.match(err.message, '/tenants/empty/month: give at least one of tokens and cost_usd')
  t.match(err.message, '/keys/k/week: must NOT have additional properties')
})

t.test('the server does not start with a bad file', async (t) => {
  await t.rejects(buildApp(testConfig(t, { BUDGETS_FILE: file(t, '{"default": {"day": {"tokens": "many"}}}') })), { code: 'AH_ERR_CONFIG_INVALID', message: /\/default\/day\/tokens: must be integer/ })
})
