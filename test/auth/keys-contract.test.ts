import t, { type Test } from 'tap'
import pg from 'pg'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { openPostgres, inTransaction } from '../../src/storage/postgres/database.js'
import { SqliteKeyStore } from '../../src/storage/sqlite/keys.js'
import { PgKeyStore } from '../../src/storage/postgres/keys.js'
import { BOOTSTRAP_KEY_NAME, type ConfigKey, type Identity, type KeyRefusal, type KeyStore } from '../../src/storage/api-keys.js'
import { SqliteAuditLog } from '../../src/storage/sqlite/audit.js'
import { PgAuditLog } from '../../src/storage/postgres/audit.js'
import type { AuditStore } from '../../src/storage/audit.js'
import { AH_ERR_KEY_NAME_TAKEN } from '../../src/errors.js'
import { tempDataDir } from '../helper.js'
import { pgDatabase, withDatabase } from '../pg.js'

const CONFIG_KEY = 'config-key-0123456789abcdefghij'
const CONFIG: ConfigKey[] = [{ name: 'from-config', key: CONFIG_KEY, scopes: ['agents:read'], agents: ['echo'] }]
const CHOSEN = 'operator-chosen-bootstrap-key-0123456789'

type Maker = (t: Test, configKeys?: ConfigKey[]) => Promise<KeyStore | undefined>

/** Each store's way to rename a key behind its back: the duplicate names a database made before names were unique holds. */
const renameInDatabase = new WeakMap<KeyStore, (id: string, name: string) => Promise<void>>()
/** The audit log each store audits the changes made `by` someone in. */
const auditOf = new WeakMap<KeyStore, AuditStore>()

const stores: Record<string, Maker> = {
  sqlite: async (t, configKeys) => {
    const db = openDatabase(tempDataDir(t))
    t.teardown(() => db.close())
    const audit = new SqliteAuditLog(db)
    const store = new SqliteKeyStore(db, configKeys, audit)
    auditOf.set(store, audit)
    renameInDatabase.set(store, async (id, name) => { db.prepare('UPDATE api_keys SET name = ? WHERE id = ?').run(name, id) })
    return store
  },
  postgres: async (t, configKeys) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const pool = await openPostgres(url)
    t.teardown(async () => { await pool.end() })
    const audit = await PgAuditLog.open(pool)
    const store = new PgKeyStore(pool, { ...(configKeys !== undefined ? { configKeys } : {}), audit })
    auditOf.set(store, audit)
    renameInDatabase.set(store, async (id, name) => { await pool.query('UPDATE api_keys SET name = $1 WHERE id = $2', [name, id]) })
    return store
  }
}

function refused (verified: Identity | KeyRefusal): string | undefined {
  return 'refused' in verified ? verified.refused : undefined
}

for (const [kind, make] of Object.entries(stores)) {
  t.test(`${kind} store: the KeyStore contract`, async (t) => {
    t.test('a key is made, listed without its secret, and verified to its identity; API_KEYS keys beside it', async (t) => {
      const store = await make(t, CONFIG)
      if (store === undefined) return
      const { key, record } = await store.create({ name: 'ci', scopes: ['agents:read', 'assist:invoke'] })
      t.match(key, /^ahk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/)
      t.match(record, { id: key.slice(4, 20), name: 'ci', scopes: ['agents:read', 'assist:invoke'], agents: null, expires_at: null, revoked_at: null, source: 'db' })
      t.ok(Date.parse(record.created_at) > 0)
      // the secret is everything after `ahk_<id>_`; it may itself contain '_' (base64url)
      const listed = await store.list()
      t.notOk(JSON.stringify(listed).includes(key.slice(`ahk_${record.id}_`.length)), 'the secret is never listed')
      t.same(listed.map((k) => [k.name, k.source]), [['ci', 'db'], ['from-config', 'config']], 'stored keys, then those of API_KEYS')
      t.same(listed[0], record)
      t.match(listed[1], { id: 'config:from-config', name: 'from-config', scopes: ['agents:read'], agents: ['echo'], created_at: new Date(0).toISOString(), expires_at: null, revoked_at: null })
      const identity = await store.verify(key) as Identity
      t.same({ ...identity, scopes: [...identity.scopes] }, { id: record.id, name: 'ci', tenant: 'default', scopes: ['agents:read', 'assist:invoke'], agents: null, anonymous: false })
      const { key: acmeKey, record: acmeRecord } = await store.create({ name: 'acme-ci', scopes: ['assist:invoke'], tenant: 'acme' })
      t.match(acmeRecord, { tenant: 'acme' })
      t.match(await store.verify(acmeKey), { id: `tenant:acme/${acmeRecord.id}`, tenant: 'acme' }, 'a key of another tenant: its principal names the tenant')
      t.match((await store.list()).find((k) => k.name === 'acme-ci'), { id: acmeRecord.id, tenant: 'acme' })
      const configured = await store.verify(CONFIG_KEY) as Identity
      t.match(configured, { id: 'config:from-config', name: 'from-config', anonymous: false })
      t.same([...configured.agents ?? []], ['echo'])
    })

    t.test('bad keys are unknown: a changed secret, another secret for a known id, nonsense, an unknown id', async (t) => {
      const store = await make(t, CONFIG)
      if (store === undefined) return
      const { key, record } = await store.create({ name: 'ci', scopes: ['agents:read'] })
      for (const bad of [key.slice(0, -1) + (key.endsWith('A') ? 'B' : 'A'), `ahk_${record.id}_${'x'.repeat(43)}`, 'nonsense', `ahk_ffffffffffffffff_${'x'.repeat(43)}`, `${CONFIG_KEY}x`]) {
        t.equal(refused(await store.verify(bad)), 'unknown', bad.slice(0, 30))
      }
    })

    t.test('a key limited to some agents carries them', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const { key, record } = await store.create({ name: 'echo-only', scopes: ['assist:invoke'], agents: ['echo', 'f0000000-0000-4000-8000-000000000002'] })
      t.same(record.agents, ['echo', 'f0000000-0000-4000-8000-000000000002'])
      t.same([...(await store.verify(key) as Identity).agents ?? []], ['echo', 'f0000000-0000-4000-8000-000000000002'])
    })

    t.test('a key past its expiry is refused as expired, and no longer usable', async (t) => {
      const store = await make(t, CONFIG)
      if (store === undefined) return
      const expiresAt = new Date(Date.now() + 60_000)
      const { key, record } = await store.create({ name: 'short', scopes: ['agents:read'], expiresAt })
      t.equal(record.expires_at, expiresAt.toISOString())
      t.equal(refused(await store.verify(key)), undefined, 'works before')
      t.equal(refused(await store.verify(key, new Date(expiresAt.getTime() - 1))), undefined, 'works to the last millisecond')
      t.equal(refused(await store.verify(key, expiresAt)), 'expired')
      t.equal(await store.usable(), 2, 'usable now: it and the API_KEYS key')
      t.equal(await store.usable(expiresAt), 1, 'usable once it expired: the API_KEYS key')
    })

    t.test('revoked by name or id: refused as revoked, not usable, and revoking again changes nothing', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const a = await store.create({ name: 'a', scopes: ['agents:read'] })
      const b = await store.create({ name: 'b', scopes: ['agents:read'] })
      t.equal(await store.usable(), 2)
      t.equal(await store.revoke('a'), 1, 'by name')
      t.equal(refused(await store.verify(a.key)), 'revoked')
      t.equal(await store.revoke('a'), 0, 'already revoked')
      t.equal(await store.revoke(b.record.id), 1, 'by id')
      t.equal(refused(await store.verify(b.key)), 'revoked')
      t.equal(await store.revoke('nobody'), 0)
      t.equal(await store.usable(), 0)
      const listed = await store.list()
      t.same(listed.map((k) => k.name).sort(), ['a', 'b'])
      t.ok(listed.every((k) => k.revoked_at !== null), 'listed with the time of revocation')
    })

    // regression (issue 31): two keys could share a name, and revoking it revoked both (one was an admin key)
    t.test('a name belongs to one key that is not revoked: a second is refused; revoked, the name is free again', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const first = await store.create({ name: 'ci', scopes: ['agents:read'] })
      await t.rejects(async () => await store.create({ name: 'ci', scopes: ['admin'] }), { code: 'AH_ERR_KEY_NAME_TAKEN', message: new RegExp(`"ci" .*${first.record.id}.*revoke it first`) })
      t.same((await store.list()).map((k) => k.id), [first.record.id], 'nothing made')
      const expired = await store.create({ name: 'old', scopes: ['agents:read'], expiresAt: new Date(Date.now() + 50) })
      await t.rejects(async () => await store.create({ name: 'old', scopes: ['agents:read'] }), { code: 'AH_ERR_KEY_NAME_TAKEN' }, 'a key that is not revoked holds its name, expired or not')
      t.equal(await store.revoke('ci'), 1)
      const second = await store.create({ name: 'ci', scopes: ['admin'] })
      t.not(second.record.id, first.record.id, 'a revoked key\'s name can be used again')
      t.equal(await store.revoke(expired.record.id), 1)
    })

    t.test('a name two keys share (a database from before the rule) revokes nothing, naming their ids; each goes by its id', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const reader = await store.create({ name: 'twin', scopes: ['agents:read'] })
      const admin = await store.create({ name: 'twin-admin', scopes: ['admin'] })
      await renameInDatabase.get(store)?.(admin.record.id, 'twin')
      await t.rejects(async () => await store.revoke('twin'), { code: 'AH_ERR_KEY_NAME_AMBIGUOUS', message: new RegExp(`"twin" .*2 keys.*(${reader.record.id}.*${admin.record.id}|${admin.record.id}.*${reader.record.id}).*by its id`) })
      t.equal(refused(await store.verify(reader.key)), undefined, 'neither is revoked')
      t.equal(refused(await store.verify(admin.key)), undefined)
      t.equal(await store.revoke(admin.record.id), 1, 'by id')
      t.equal(refused(await store.verify(admin.key)), 'revoked')
      t.equal(await store.revoke('twin'), 1, 'the name is now one key\'s')
      t.equal(refused(await store.verify(reader.key)), 'revoked')
    })

    t.test('bootstrap: the chosen admin key is made once, and a revoked one is not made again', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const made = await store.bootstrap(CHOSEN)
      t.match(made, { name: BOOTSTRAP_KEY_NAME, scopes: ['admin'], source: 'db' })
      t.match(await store.verify(CHOSEN), { id: made?.id, name: BOOTSTRAP_KEY_NAME })
      t.equal(refused(await store.verify(`${CHOSEN}x`)), 'unknown', 'and only it')
      t.equal(await store.bootstrap(CHOSEN), undefined, 'not made twice')
      t.equal((await store.list()).length, 1)
      t.equal(await store.revoke(BOOTSTRAP_KEY_NAME), 1)
      t.equal(await store.bootstrap(CHOSEN), undefined, 'revoked is final')
      t.equal(refused(await store.verify(CHOSEN)), 'revoked')
    })

    t.test('list: oldest first, then by id', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const made = []
      for (const name of ['k1', 'k2', 'k3', 'k4']) made.push((await store.create({ name, scopes: ['agents:read'] })).record)
      const expected = [...made].sort((a, b) => a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : a.id < b.id ? -1 : 1)
      t.same((await store.list()).map((k) => k.id), expected.map((k) => k.id))
    })

    t.test('a change made by someone commits with its audit row; a refused one leaves neither, an unaudited one no row', async (t) => {
      const store = await make(t)
      if (store === undefined) return
      const audit = auditOf.get(store) as AuditStore
      const rows = async (): Promise<Array<{ actor: string, action: string, resource: string, details: unknown }>> =>
        (await audit.list()).map((r) => ({ actor: r.actor, action: r.action, resource: r.resource, details: r.details }))
      const { record } = await store.create({ name: 'ci', scopes: ['agents:read'], agents: ['echo'] }, 'cli:ops')
      t.same(await rows(), [{ actor: 'cli:ops', action: 'key.create', resource: record.id, details: { name: 'ci', tenant: 'default', scopes: ['agents:read'], agents: ['echo'], expires_at: null } }])
      await t.rejects(Promise.resolve().then(async () => await store.create({ name: 'ci', scopes: ['agents:read'] }, 'cli:ops')), AH_ERR_KEY_NAME_TAKEN)
      t.equal((await rows()).length, 1, 'the refused create wrote no row')
      t.equal(await store.revoke('nobody', 'cli:ops'), 0)
      t.equal((await rows()).length, 1, 'nothing revoked, nothing audited')
      t.equal(await store.revoke('ci', 'cli:ops'), 1)
      t.same((await rows())[1], { actor: 'cli:ops', action: 'key.revoke', resource: 'ci', details: { keys: 1 } })
      await store.create({ name: 'quiet', scopes: ['agents:read'] })
      t.equal((await rows()).length, 2, 'a change made without `by` is not audited here (the server audits its own)')
    })
  })
}

t.test('a key store made without an audit log refuses to audit a change, and changes nothing', async (t) => {
  const db = openDatabase(tempDataDir(t))
  t.teardown(() => db.close())
  const store = new SqliteKeyStore(db)
  t.throws(() => store.create({ name: 'ci', scopes: ['agents:read'] }, 'cli:ops'), /without an audit log/)
  t.same(store.list(), [], 'the key was rolled back')
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const pgStore = new PgKeyStore(pool)
  await t.rejects(pgStore.create({ name: 'ci', scopes: ['agents:read'] }, 'cli:ops'), /without an audit log/)
  t.same(await pgStore.list(), [], 'the key was rolled back')
})

/** Two instances: two pools on one database, each with its own store. */
async function twoInstances (t: Test, options: ConstructorParameters<typeof PgKeyStore>[1] = {}): Promise<{ a: PgKeyStore, b: PgKeyStore, url: string } | undefined> {
  const url = await pgDatabase(t)
  if (url === undefined) return undefined
  const pools = [await openPostgres(url), await openPostgres(url)]
  t.teardown(async () => { for (const pool of pools) await pool.end() })
  return { a: new PgKeyStore(pools[0] as pg.Pool, options), b: new PgKeyStore(pools[1] as pg.Pool, options), url }
}

t.test('postgres: a key revoked on one instance is refused on every other within 1 s', async (t) => {
  const found = await twoInstances(t)
  if (found === undefined) return
  const { a, b } = found
  const { key } = await b.create({ name: 'shared', scopes: ['agents:read'] })
  const verifiedAt = Date.now()
  t.equal(refused(await a.verify(key, new Date(verifiedAt))), undefined, 'instance A accepts it (and caches its row)')
  t.equal(await b.revoke('shared'), 1, 'instance B revokes it')
  t.equal(refused(await b.verify(key)), 'revoked', 'B refuses it at once')
  t.equal(refused(await a.verify(key, new Date(verifiedAt + 10))), undefined, 'A trusts its cached row a little longer (what the cache costs)')
  t.equal(refused(await a.verify(key, new Date(verifiedAt + 500))), 'revoked', 'A refuses it once its row is 500 ms old: within 1 s')
  // and by the clock, not only by the time the test hands in
  const other = await b.create({ name: 'other', scopes: ['agents:read'] })
  t.equal(refused(await a.verify(other.key)), undefined)
  await b.revoke('other')
  const deadline = Date.now() + 5000
  while (refused(await a.verify(other.key)) === undefined && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal(refused(await a.verify(other.key)), 'revoked', 'A refuses it without being told')
})

t.test('postgres: a key made on one instance works at once on another (a key not found is never cached)', async (t) => {
  const found = await twoInstances(t, { cacheMs: 60_000 })
  if (found === undefined) return
  const { a, b } = found
  t.equal(refused(await a.verify(CHOSEN)), 'unknown', 'not made yet')
  await b.create({ name: 'chosen', scopes: ['agents:read'], key: CHOSEN })
  t.match(await a.verify(CHOSEN), { name: 'chosen' }, 'made on B, accepted by A')
})

t.test('postgres: concurrent verifications of one key read its row once; the cache is capped and bounded to 1 s', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const other = await openPostgres(url)
  t.teardown(async () => { await other.end() })
  const reads: string[] = []
  const counted = new Proxy(pool, {
    get (target, name, receiver) {
      if (name !== 'query') return Reflect.get(target, name, receiver) as unknown
      return async (...args: Parameters<pg.Pool['query']>) => {
        if (typeof args[0] === 'string' && args[0].startsWith('SELECT') && args[0].includes('WHERE id =')) reads.push(args[0])
        return await (target.query as (...a: unknown[]) => Promise<unknown>)(...args)
      }
    }
  })
  const store = new PgKeyStore(counted, { cacheSize: 1, cacheMs: 60_000 })
  const elsewhere = new PgKeyStore(other)
  const k1 = await store.create({ name: 'k1', scopes: ['agents:read'] })
  const k2 = await store.create({ name: 'k2', scopes: ['agents:read'] })
  const now = new Date()
  const verdicts = await Promise.all(Array.from({ length: 10 }, async () => await store.verify(k1.key, now)))
  t.ok(verdicts.every((v) => refused(v) === undefined))
  t.equal(reads.length, 1, 'ten at once: one read')
  await store.verify(k2.key, now)
  t.equal(reads.length, 2)
  await elsewhere.revoke('k1')
  t.equal(refused(await store.verify(k1.key, now)), 'revoked', 'k1 was dropped from a cache of one when k2 was read, so it is read again')
  t.equal(reads.length, 3)
  const k3 = await elsewhere.create({ name: 'k3', scopes: ['agents:read'] })
  const patient = new PgKeyStore(pool, { cacheMs: 60_000 })
  t.equal(refused(await patient.verify(k3.key, now)), undefined)
  await elsewhere.revoke('k3')
  t.equal(refused(await patient.verify(k3.key, new Date(now.getTime() + 999))), undefined, 'cached')
  t.equal(refused(await patient.verify(k3.key, new Date(now.getTime() + 1000))), 'revoked', 'cacheMs is capped at 1 s')
  const uncached = new PgKeyStore(counted, { cacheMs: 0 })
  const before = reads.length
  await uncached.verify(k1.key)
  await uncached.verify(k1.key)
  t.equal(reads.length, before + 2, 'cacheMs 0: read every time')
})

t.test('postgres: a failed read is not cached', async (t) => {
  const found = await twoInstances(t)
  if (found === undefined) return
  const broken = new pg.Pool({ connectionString: withDatabase(found.url, 'no_such_database') })
  t.teardown(async () => { await broken.end() })
  const store = new PgKeyStore(broken)
  await t.rejects(store.verify(`ahk_0123456789abcdef_${'x'.repeat(43)}`), /no_such_database/)
  await t.rejects(store.verify(`ahk_0123456789abcdef_${'x'.repeat(43)}`), /no_such_database/, 'read again, failing again')
})

t.test('postgres: instances booting together with BOOTSTRAP_ADMIN_KEY make the admin key once', async (t) => {
  const found = await twoInstances(t)
  if (found === undefined) return
  const made = await Promise.all([found.a.bootstrap(CHOSEN), found.b.bootstrap(CHOSEN), found.a.bootstrap(CHOSEN), found.b.bootstrap(CHOSEN)])
  t.equal(made.filter((m) => m !== undefined).length, 1, 'one of four made it')
  t.equal((await found.a.list()).length, 1)
})

t.test('postgres: instances making keys of one name at once make one; the others are refused as taken', async (t) => {
  const found = await twoInstances(t)
  if (found === undefined) return
  for (const name of ['n1', 'n2', 'n3']) {
    const outcomes = await Promise.allSettled([found.a, found.b, found.a, found.b].map(async (store) => await store.create({ name, scopes: ['agents:read'] })))
    t.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1, `${name}: one of four made it`)
    t.same(outcomes.filter((o) => o.status === 'rejected').map((o) => (o.reason as { code: string }).code), ['AH_ERR_KEY_NAME_TAKEN', 'AH_ERR_KEY_NAME_TAKEN', 'AH_ERR_KEY_NAME_TAKEN'])
  }
  t.equal((await found.a.list()).length, 3)
})

t.test('postgres: createIn and revokeIn commit or roll back with the caller\'s transaction', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const store = new PgKeyStore(pool)
  await t.rejects(inTransaction(pool, async (client) => {
    await store.createIn(client, { name: 'undone', scopes: ['admin'] })
    throw new Error('the audit row failed')
  }), /the audit row failed/)
  t.same(await store.list(), [], 'rolled back with it')
  const { key } = await inTransaction(pool, async (client) => await store.createIn(client, { name: 'done', scopes: ['admin'] }))
  t.equal(refused(await store.verify(key)), undefined)
  await t.rejects(inTransaction(pool, async (client) => {
    t.equal(await store.revokeIn(client, 'done'), 1)
    throw new Error('changed my mind')
  }))
  t.equal(refused(await store.verify(key)), undefined, 'the revocation rolled back')
  t.equal(await inTransaction(pool, async (client) => await store.bootstrapIn(client, CHOSEN)) !== undefined, true)
})
