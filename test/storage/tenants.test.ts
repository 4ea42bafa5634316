import t from 'tap'
import { DEFAULT_TENANT, isPrincipal, namedViewerSql, principalId, sees, seesActor, tenantOf, viewerSql } from '../../src/storage/tenants.js'
import { parseApiKeys } from '../../src/config.js'

// The one rule of tenants: a principal's id names its tenant (none for the default), so whose
// anything is, and which tenant's, is read from the owner alone, in every store.

t.test('a principal id names its tenant, except in the default tenant, where ids are as they always were', async (t) => {
  t.equal(principalId(DEFAULT_TENANT, '0123456789abcdef'), '0123456789abcdef')
  t.equal(principalId('acme', '0123456789abcdef'), 'tenant:acme/0123456789abcdef')
  t.equal(principalId('acme', 'jwt:https://idp.example/u/1'), 'tenant:acme/jwt:https://idp.example/u/1')
  for (const [owner, tenant] of [['tenant:acme/k1', 'acme'], ['tenant:acme/jwt:a/b', 'acme'], ['k1', 'default'], ['jwt:tenant:acme/x', 'default'], ['config:ops', 'default'], ['tenant:broken', 'default']] as const) {
    t.equal(tenantOf(owner), tenant, owner)
  }
})

t.test('who sees what: one owner, one tenant (never a tenant whose name starts the same), everyone', async (t) => {
  t.ok(sees({ all: true }, null), 'the host\'s own things: only everyone\'s viewer')
  t.notOk(sees({ tenant: 'default' }, null))
  t.notOk(sees({ owner: 'k1' }, undefined))
  t.ok(sees({ owner: 'k1' }, 'k1'))
  t.notOk(sees({ owner: 'k1' }, 'tenant:acme/k1'))
  t.ok(sees({ tenant: 'acme' }, 'tenant:acme/k1'))
  t.notOk(sees({ tenant: 'acm' }, 'tenant:acme/k1'))
  t.notOk(sees({ tenant: 'acme' }, 'k1'))
  t.ok(sees({ tenant: 'default' }, 'k1'))
  t.notOk(sees({ tenant: 'default' }, 'tenant:acme/k1'))
})

t.test('the same rule as SQL, with its values placed by the driver', async (t) => {
  const values: string[] = []
  const param = (value: string): string => `$${values.push(value)}`
  t.equal(viewerSql({ all: true }, 'owner_key', param), 'TRUE')
  t.equal(viewerSql({ owner: 'k1' }, 'owner_key', param), 'owner_key = $1')
  t.equal(viewerSql({ tenant: 'default' }, 'owner_key', param), 'substr(owner_key, 1, 7) <> $2')
  t.equal(viewerSql({ tenant: 'acme' }, 'owner_key', param), 'substr(owner_key, 1, 12) = $3')
  t.same(values, ['k1', 'tenant:', 'tenant:acme/'])
  t.same(namedViewerSql({ tenant: 'acme' }, 'actor'), { sql: 'substr(actor, 1, 12) = @viewer', params: { viewer: 'tenant:acme/' } }, 'SQLite\'s form: one named parameter')
  t.same(namedViewerSql({ all: true }, 'actor'), { sql: 'TRUE', params: {} })
})

t.test('audit actors: the host\'s own rows are seen by everyone\'s viewer only', async (t) => {
  for (const actor of ['0123456789abcdef', 'config:ops', 'jwt:alice', 'anonymous', 'tenant:acme/0123456789abcdef']) t.ok(isPrincipal(actor), actor)
  for (const actor of ['agent-host', 'cli:root', 'bootstrap', 'unauthenticated', 'wordcount', '0123456789ABCDEF']) t.notOk(isPrincipal(actor), actor)
  t.ok(seesActor({ all: true }, 'cli:root'))
  t.notOk(seesActor({ tenant: 'default' }, 'cli:root'))
  t.ok(seesActor({ tenant: 'default' }, 'config:ops'))
})

t.test('API_KEYS: a key may name its tenant; a bad name is refused at boot', async (t) => {
  t.match(parseApiKeys(JSON.stringify([{ name: 'ops', key: 'x'.repeat(24), scopes: ['admin'], tenant: 'acme' }])), [{ tenant: 'acme' }])
  t.throws(() => parseApiKeys(JSON.stringify([{ name: 'ops', key: 'x'.repeat(24), scopes: ['admin'], tenant: 'Acme' }])), { code: 'AH_ERR_CONFIG_INVALID', message: /"tenant"\?/ })
})
