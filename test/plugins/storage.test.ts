import t, { type Test } from 'tap'
import { driverOf, openAuditReader, openStores } from '../../src/plugins/storage.js'
import type { SqliteStores } from '../../src/storage/sqlite/index.js'
import type { Stores, StoresOptions } from '../../src/storage/stores.js'
import { build, tempDataDir, testConfig } from '../helper.js'
import { pgDatabase } from '../pg.js'

const quiet = { info: () => {}, warn: () => {}, error: () => {} }
const COMMAND: StoresOptions = { instanceId: 'test', log: quiet, serving: false }

/** What every driver's stores do outside a server: each store works, the run ledger is refused, close may be called twice. */
async function commandStores (t: Test, stores: Stores): Promise<void> {
  t.throws(() => stores.ledger, /the run ledger is a server's/, 'no run ledger without serving')
  t.equal(stores.connected, true)
  const { record } = await stores.keys.create({ name: 'ci', scopes: ['agents:read'] }, 'cli:test')
  t.same((await stores.audit.list()).map((r) => [r.action, r.resource]), [['key.create', record.id]], 'the change with its audit row')
  const [task] = await stores.tasks.create([{ id: 'one', type: 'echo', inputs: {} }])
  t.equal(task?.status, 'PENDING', 'a task made')
  t.equal(await stores.write(() => 42), 42, 'a write')
  t.equal(stores.keys, stores.keys, 'a store is made once')
  await stores.close()
  await stores.close()
}

t.test('the driver is PostgreSQL when DATABASE_URL is set, else SQLite', async (t) => {
  t.equal(driverOf({ DATABASE_URL: '' }), 'sqlite')
  t.equal(driverOf({ DATABASE_URL: 'postgres://127.0.0.1/x' }), 'postgres')
})

t.test('SQLite: a command\'s stores, and a server\'s', async (t) => {
  const config = testConfig(t, { TASK_STORE: 'sqlite' })
  const missing = await openAuditReader(config)
  t.match(missing, { problem: /^no audit database at .*: is --data-dir \(or DATA_DIR\) right\?$/ }, 'nothing to read before the database is made')
  const stores = await openStores(config, COMMAND)
  t.equal(stores.driver, 'sqlite')
  t.equal(stores.rateLimits, undefined, 'rate limits counted in the process')
  t.equal(stores.streams, undefined, 'stream slots counted in the process')
  await commandStores(t, stores)

  const reader = await openAuditReader(config)
  if (!('audit' in reader)) throw new Error(reader.problem)
  t.match(await reader.audit.verify([]), { ok: true, rows: 1 }, 'the audit log, read-only')
  await reader.close()

  const served = await openStores({ ...config, DB_BUSY_TIMEOUT_MS: 7 }, { ...COMMAND, serving: true }) as SqliteStores
  t.teardown(async () => { await served.close() })
  t.ok(served.ledger, 'a server has the run ledger')
  t.equal(served.db.pragma('busy_timeout', { simple: true }), 5000, 'booting may wait for another process\'s lock')
  await served.ready()
  t.equal(served.db.pragma('busy_timeout', { simple: true }), 7, 'serving waits DB_BUSY_TIMEOUT_MS at most')
})

t.test('the app decorates the stores it opened, and its shortcuts are the same stores', async (t) => {
  const app = await build(t, { DATA_DIR: tempDataDir(t) })
  t.equal(app.stores.driver, 'sqlite')
  t.equal(app.audit, app.stores.audit)
  t.equal(app.events, app.stores.events)
  t.equal(app.sessions, app.stores.sessions)
  t.equal(app.ledger, app.stores.ledger)
  t.equal(app.keys, app.stores.keys)
})

t.test('PostgreSQL: a command\'s stores; the audit reader of a database without a log says so', async (t) => {
  const empty = await pgDatabase(t, { empty: true })
  if (empty === undefined) return
  t.match(await openAuditReader(testConfig(t, { DATABASE_URL: empty })), { problem: /^no audit log in .*: is DATABASE_URL right\?$/ })
  const url = await pgDatabase(t) as string
  const config = testConfig(t, { DATABASE_URL: url })
  const stores = await openStores(config, COMMAND)
  t.equal(stores.driver, 'postgres')
  t.equal(stores.streams, undefined, 'no stream slots leased outside a server')
  t.ok(stores.rateLimits, 'rate limits shared by every instance')
  await commandStores(t, stores)
})
