// GET /v1/usage: the model budgets and their usage, for the host's admin (every tenant's) and a
// tenant's admin (its own), with its schema in the OpenAPI document. What it lists is test/assist/budgets.test.ts's.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { build, tempDataDir } from '../helper.js'

const ADMIN = 'admin-key-0123456789abcdefghij'
const USER = 'user-key-0123456789abcdefghijk'
const ACME_ADMIN = 'acme-admin-key-0123456789abcdef'

t.test('GET /v1/usage answers an admin with the budgets, refuses anyone else, and checks its query', async (t) => {
  const path = join(tempDataDir(t), 'budgets.json')
  writeFileSync(path, JSON.stringify({ tenants: { acme: { month: { tokens: 1000 } }, globex: { day: { tokens: 5 } } } }))
  const app = await build(t, {
    BUDGETS_FILE: path,
    AUTH_MODE: 'apikey',
    API_KEYS: JSON.stringify([{ name: 'root', key: ADMIN, scopes: ['admin'] }, { name: 'user', key: USER, scopes: ['assist:invoke', 'agents:read'] }, { name: 'acme-admin', key: ACME_ADMIN, scopes: ['tenant-admin'], tenant: 'acme' }])
  })
  const get = async (url: string, key: string): Promise<{ statusCode: number, json: () => Record<string, unknown> }> => await app.inject({ url, headers: { authorization: `Bearer ${key}` } })

  const ok = await get('/v1/usage', ADMIN)
  t.equal(ok.statusCode, 200)
  t.match(ok.json(), { budgets: [{ tenant: 'acme', key: null, period: 'month', limit: { tokens: 1000 }, used: { tokens: 0, cost_usd: 0 }, reserved: { tokens: 0, cost_usd: 0, calls: 0 } }] })
  t.same((await get('/v1/usage?tenant=other', ADMIN)).json(), { budgets: [] }, 'narrowed to one tenant')
  t.match((await get('/v1/usage', USER)).json(), { code: 'AH_ERR_FORBIDDEN', message: /tenant-admin/ }, 'a key of neither admin is refused')
  t.same(((await get('/v1/usage', ACME_ADMIN)).json().budgets as Array<{ tenant: string }>).map((b: { tenant: string }) => b.tenant), ['acme'], 'a tenant\'s admin reads its own tenant\'s only')
  t.same((await get('/v1/usage?tenant=globex', ACME_ADMIN)).json(), { budgets: [] }, 'another tenant named: nothing')
  t.equal(((await get('/v1/usage', ADMIN)).json().budgets as unknown[]).length, 2, 'the host\'s admin every tenant\'s')
  t.match((await get('/v1/usage?tenant=Not_A_Tenant', ADMIN)).json(), { statusCode: 400, code: 'AH_ERR_VALIDATION' })

  const doc = (await app.inject({ url: '/openapi.json' })).json() as { paths: Record<string, { get: Record<string, unknown> }> }
  t.match(doc.paths['/v1/usage']?.get, { operationId: 'listBudgetUsage', tags: ['backends'], summary: 'Model budgets and their usage' })
})
