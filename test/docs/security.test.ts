import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { listen, tempDataDir } from '../helper.js'
import { docBlocks, runShell } from './doc-blocks.js'

// docs/security.md's examples, run as a reader runs them against a server of their own (only the
// port changes): keys of two tenants made with the command line, then what each tenant's admin sees.

t.test('the tenants example works as written: her tenant\'s admin sees alice\'s task, another tenant\'s admin gets 404', async (t) => {
  const dataDir = tempDataDir(t)
  const { url } = await listen(t, { AUTH_MODE: 'apikey', DATA_DIR: dataDir, WORKERS_PER_TYPE: '0' })
  const [keys, calls] = docBlocks('docs/security.md', '## Tenants')
  t.ok(keys !== undefined && calls !== undefined, 'two blocks')
  const out = await runShell(`${keys as string}\n${(calls as string).replaceAll('http://127.0.0.1:3000', url)}`, { env: { DATA_DIR: dataDir } })
  t.equal(out, '200\n404\n')
})

t.test('the budgets example works as written: the file boots, and the curl shows acme\'s usage', async (t) => {
  const dataDir = tempDataDir(t)
  const file = join(dataDir, 'budgets.json')
  writeFileSync(file, docBlocks('docs/security.md', '## Budgets', 'json')[0] as string)
  const { app, url } = await listen(t, { AUTH_MODE: 'apikey', DATA_DIR: dataDir, WORKERS_PER_TYPE: '0', BUDGETS_FILE: file })
  const admin = (await app.keys.create({ name: 'root', scopes: ['admin'] })).key
  const [curl] = docBlocks('docs/security.md', '## Budgets')
  const usage = JSON.parse(await runShell((curl as string).replaceAll('http://127.0.0.1:3000', url), { env: { ADMIN_KEY: admin } }))
  t.match(usage.budgets.find((b: { period: string }) => b.period === 'month'), { tenant: 'acme', key: null, limit: { tokens: 50000000, cost_usd: 500 } }, 'acme\'s month, as the file sets it')
})
