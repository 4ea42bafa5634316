// Secrets at rest, on both drivers: the push configs' tokens and credentials are nowhere in the
// database's bytes (SQLite's file and WAL, read raw; PostgreSQL's pg_dump), the boot stops on a
// missing or wrong key, and plain values an earlier version stored are sealed at boot.
// Heavy only with PostgreSQL: a database per test, and one pg_dump.
import t, { type Test } from 'tap'
import { execFileSync } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { existsSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { buildApp } from '../../src/app.js'
import { loadConfig, type Config } from '../../src/config.js'
import { openStores } from '../../src/plugins/storage.js'
import { isSealed, secretKeyId, sealedKeyId } from '../../src/storage/secret-keyring.js'
import { PLAIN_KID } from '../../src/storage/secrets.js'
import type { NewPushConfig } from '../../src/storage/a2a-push.js'
import type { Stores } from '../../src/storage/stores.js'
import type { SqliteStores } from '../../src/storage/sqlite/index.js'
import type { PgStores } from '../../src/storage/postgres/index.js'
import { DB_FILE } from '../../src/storage/sqlite/database.js'
import { MIGRATIONS } from '../../src/storage/sqlite/migrations.js'
import { serverBinaries } from '../../scripts/pg-cluster.js'
import { pgDatabase } from '../pg.js'
import { tempDataDir } from '../helper.js'

const KEY_A = randomBytes(32).toString('base64')
const KEY_B = randomBytes(32).toString('base64url')
const KID_A = secretKeyId(Buffer.from(KEY_A, 'base64'))
const KID_B = secretKeyId(Buffer.from(KEY_B, 'base64url'))
const quiet = { info: () => {}, warn: () => {}, error: () => {} }

const RUN = `INSERT INTO runs (request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, started_at)
  VALUES ($1, 'h', '{"request_id":"wire"}', 's', 'agent', 'm', 'running', 'i', 1, 0)`

/** A driver: the settings of one database (the same each call), and raw SQL on the stores' own connection. */
interface Driver {
  config: (env?: Record<string, string>) => Config
  sql: (stores: Stores, text: string, params?: unknown[]) => Promise<Array<Record<string, unknown>>>
}

const drivers: Record<string, (t: Test) => Promise<Driver | undefined>> = {
  sqlite: async (t) => {
    const dir = tempDataDir(t)
    return {
      config: (env = {}) => loadConfig({ DATA_DIR: dir, LOG_LEVEL: 'silent', ...env }),
      sql: async (stores, text, params = []) => {
        const statement = (stores as SqliteStores).db.prepare(text.replace(/\$\d/g, '?'))
        return statement.reader ? statement.all(...params) as Array<Record<string, unknown>> : (statement.run(...params), [])
      }
    }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const dir = tempDataDir(t)
    return {
      config: (env = {}) => loadConfig({ DATA_DIR: dir, DATABASE_URL: url, LOG_LEVEL: 'silent', ...env }),
      sql: async (stores, text, params = []) => (await (stores as PgStores).pool.query(text, params)).rows
    }
  }
}

async function open (t: Test, config: Config): Promise<Stores> {
  const stores = await openStores(config, { instanceId: randomUUID(), log: quiet, serving: false })
  t.teardown(async () => { await stores.close() })
  return stores
}

/** A push config of run `runKey` with secrets no other test value contains. */
function pushConfig (runKey: string, id: string): NewPushConfig {
  return { run_key: runKey, id, task_id: `task-${id}`, agent_id: 'agent', owner_key: 'k1', created_by: 'k1', url: `https://example.com/hook-${id}`, token: `token-${randomBytes(12).toString('hex')}`, auth_scheme: 'Bearer', auth_credentials: `creds-${randomBytes(12).toString('hex')}` }
}

/** Store `config` through the port (with its audit row), its run made first. */
async function save (driver: Driver, stores: Stores, config: NewPushConfig): Promise<void> {
  await driver.sql(stores, RUN, [config.run_key]).catch(() => {}) // the run may be there already
  await stores.push.changes.save(config.run_key, () => ({ config, audit: { actor: 'k1', action: 'a2a.push.create', resource: 'agent', success: true } }), 'start', Date.now())
}

for (const [kind, make] of Object.entries(drivers)) {
  t.test(`${kind}: a push config's token and credentials are stored sealed, bound to their config, and given back opened`, async (t) => {
    const driver = await make(t)
    if (driver === undefined) return
    const stores = await open(t, driver.config({ SECRETS_KEY: KEY_A }))
    const one = pushConfig('run-1', 'one')
    const two = pushConfig('run-1', 'two')
    await save(driver, stores, one)
    await save(driver, stores, two)
    t.match(await stores.push.store.get('run-1', 'one'), { token: one.token, auth_scheme: 'Bearer', auth_credentials: one.auth_credentials })
    t.same((await stores.push.store.list('run-1')).map((c) => c.token), [one.token, two.token])
    t.same((await stores.push.store.claim(Date.now() + 1000, 1000, 10)).map((c) => [c.token, c.auth_credentials]), [[one.token, one.auth_credentials], [two.token, two.auth_credentials]], 'the delivery loop gets them opened')
    const rows = await driver.sql(stores, 'SELECT id, token, auth_credentials FROM a2a_push_configs ORDER BY seq')
    t.ok(rows.every((r) => isSealed(r.token as string) && isSealed(r.auth_credentials as string) && sealedKeyId(r.token as string) === KID_A), 'sealed with the key set')
    t.same(await stores.secrets.recorded(), [KID_A], 'the key recorded as in use')

    // a value copied into another config's row does not open there
    await driver.sql(stores, 'UPDATE a2a_push_configs SET token = $1 WHERE id = $2', [rows[0]?.token, 'two'])
    await t.rejects(async () => await stores.push.store.get('run-1', 'two'), { code: 'AH_ERR_SECRET_UNREADABLE', message: new RegExp(`key ${KID_A}.*sealed for another place`) })
    await t.rejects(async () => await stores.push.changes.save('run-1', () => { throw new Error('never asked') }, 'start', Date.now()), { code: 'AH_ERR_SECRET_UNREADABLE' }, 'nor for a change of the task\'s configs')
  })

  t.test(`${kind}: a boot with another key stops, naming the key the secrets are sealed with and what to do`, async (t) => {
    const driver = await make(t)
    if (driver === undefined) return
    const first = await open(t, driver.config({ SECRETS_KEY: KEY_A }))
    await save(driver, first, pushConfig('run-1', 'one'))
    await first.close()
    await t.rejects(openStores(driver.config({ SECRETS_KEY: KEY_B }), { instanceId: 'x', log: quiet, serving: false }), {
      code: 'AH_ERR_SECRETS_KEY_UNKNOWN',
      message: new RegExp(`sealed with key ${KID_A}, which this server does not hold \\(it holds ${KID_B}\\): .*SECRETS_KEYS_RETIRED, run \`agent-host secrets rotate\``)
    })
    await t.rejects(buildApp(driver.config({ SECRETS_KEY: KEY_B })), { code: 'AH_ERR_SECRETS_KEY_UNKNOWN' }, 'the server does not boot')
    const again = await open(t, driver.config({ SECRETS_KEY: KEY_A }))
    t.equal((await again.push.store.get('run-1', 'one'))?.url, 'https://example.com/hook-one', 'with the right key it boots, and nothing was changed by the refused boots')
  })

  t.test(`${kind}: a key recorded that seals nothing still stored does not stop a boot`, async (t) => {
    const driver = await make(t)
    if (driver === undefined) return
    await (await open(t, driver.config({ SECRETS_KEY: KEY_A }))).close()
    const stores = await open(t, driver.config({ SECRETS_KEY: KEY_B }))
    t.same((await stores.secrets.recorded()).sort(), [KID_A, KID_B].sort())
  })

  t.test(`${kind}: values an earlier version stored in plain text are sealed at boot, once`, async (t) => {
    const driver = await make(t)
    if (driver === undefined) return
    const plain = pushConfig('run-old', 'old')
    if (kind === 'sqlite') {
      // a database as the version before sealing left it: the migration marks its push configs to be sealed
      const config = driver.config({ SECRETS_KEY: KEY_A })
      const raw = new Database(join(config.DATA_DIR, DB_FILE))
      raw.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)')
      const sealing = (MIGRATIONS.find((m) => m.sql.includes('secret_keys')) as { version: number }).version
      for (const step of MIGRATIONS.filter((m) => m.version < sealing)) {
        raw.exec(step.sql)
        raw.prepare('INSERT INTO schema_migrations VALUES (?, ?, ?)').run(step.version, step.description, 'then')
      }
      raw.prepare(RUN.replace(/\$\d/g, '?')).run(plain.run_key)
      raw.prepare('INSERT INTO a2a_push_configs (run_key, id, task_id, agent_id, owner_key, created_by, url, token, auth_scheme, auth_credentials, created_at, updated_at, cursor, next_attempt_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, 0)')
        .run(plain.run_key, plain.id, plain.task_id, plain.agent_id, plain.owner_key, plain.created_by, plain.url, plain.token, plain.auth_scheme, plain.auth_credentials)
      raw.close()
    } else {
      const setup = await open(t, driver.config({ SECRETS_KEY: KEY_A }))
      await driver.sql(setup, RUN, [plain.run_key])
      await driver.sql(setup, `INSERT INTO a2a_push_configs (run_key, id, task_id, agent_id, owner_key, created_by, url, token, auth_scheme, auth_credentials, created_at, updated_at, cursor, next_attempt_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, 0, 0, 0)`, [plain.run_key, plain.id, plain.task_id, plain.agent_id, plain.owner_key, plain.created_by, plain.url, plain.token, plain.auth_scheme, plain.auth_credentials])
      await driver.sql(setup, 'DELETE FROM secret_keys')
      await driver.sql(setup, `INSERT INTO secret_keys (kid, recorded_at) VALUES ('${PLAIN_KID}', 0)`)
      await setup.close()
      await t.rejects(openStores(driver.config(), { instanceId: 'x', log: quiet, serving: false }), { code: 'AH_ERR_SECRETS_KEY_UNSET', message: /SECRETS_KEY or SECRETS_KEY_FILE/ }, 'PostgreSQL without a key: the boot stops, the values stay as they were')
    }
    const told: object[] = []
    const stores = await openStores(driver.config({ SECRETS_KEY: KEY_A }), { instanceId: 'x', log: { ...quiet, info: (obj) => { told.push(obj) } }, serving: false })
    t.teardown(async () => { await stores.close() })
    t.same(told, [{ sealed: 2 }], 'the token and the credentials, said once')
    const [row] = await driver.sql(stores, 'SELECT token, auth_credentials FROM a2a_push_configs')
    t.ok(isSealed(row?.token as string) && isSealed(row?.auth_credentials as string), 'sealed in place')
    t.match(await stores.push.store.get(plain.run_key, plain.id), { token: plain.token, auth_credentials: plain.auth_credentials })
    t.same(await stores.secrets.recorded(), [KID_A], 'none left to seal')
    await stores.close()
    const later = await open(t, driver.config({ SECRETS_KEY: KEY_A }))
    t.same(await driver.sql(later, 'SELECT token FROM a2a_push_configs'), [{ token: row?.token }], 'the next boot changes nothing')
  })
}

t.test('sqlite: no stored secret is in the database file or its WAL, read raw', async (t) => {
  const driver = await drivers.sqlite?.(t) as Driver
  const config = driver.config()
  const stores = await open(t, config)
  const configs = [pushConfig('run-1', 'one'), pushConfig('run-1', 'two'), pushConfig('run-2', 'three')]
  for (const c of configs) await save(driver, stores, c)
  const file = join(config.DATA_DIR, DB_FILE)
  t.ok(existsSync(`${file}-wal`), 'the WAL is there to be read')
  const bytes = Buffer.concat([readFileSync(file), readFileSync(`${file}-wal`)])
  t.ok(configs.every((c) => bytes.includes(c.url)), 'the search finds what is stored in plain (the URLs)')
  t.same(configs.flatMap((c) => [c.token, c.auth_credentials as string]).filter((secret) => bytes.includes(secret)), [], 'no token, no credentials')
  t.ok(existsSync(join(config.DATA_DIR, 'secrets.key')), 'sealed with the key made in DATA_DIR')
})

t.test('sqlite: DATA_DIR\'s key file is made only when a secret is stored, recorded by the next boot, and its loss stops a boot', async (t) => {
  const driver = await drivers.sqlite?.(t) as Driver
  const config = driver.config()
  const key = join(config.DATA_DIR, 'secrets.key')
  const first = await open(t, config)
  t.notOk(existsSync(key), 'no secret, no key file')
  await save(driver, first, pushConfig('run-1', 'one'))
  const kid = sealedKeyId((await driver.sql(first, 'SELECT token FROM a2a_push_configs'))[0]?.token as string) as string
  await first.close()
  const second = await open(t, config)
  t.same(await second.secrets.recorded(), [kid], 'the key made is recorded by the next boot')
  await second.close()
  rmSync(key)
  await t.rejects(openStores(config, { instanceId: 'x', log: quiet, serving: false }), { code: 'AH_ERR_SECRETS_KEY_UNKNOWN', message: new RegExp(`sealed with key ${kid}, which this server does not hold \\(it holds no key\\)`) })
  t.notOk(existsSync(key), 'and no new key made in its place')
})

t.test('postgres: no stored secret is in a pg_dump of the database', async (t) => {
  const driver = await drivers.postgres?.(t)
  if (driver === undefined) return
  const config = driver.config({ SECRETS_KEY: KEY_A })
  const stores = await open(t, config)
  const configs = [pushConfig('run-1', 'one'), pushConfig('run-2', 'two')]
  for (const c of configs) await save(driver, stores, c)
  const bin = serverBinaries()
  const pgDump = bin !== undefined && existsSync(join(bin, 'pg_dump')) ? join(bin, 'pg_dump') : 'pg_dump'
  const dump = execFileSync(pgDump, ['--no-owner', config.DATABASE_URL], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
  t.ok(configs.every((c) => dump.includes(c.url)), 'the dump holds the configs (their URLs)')
  t.same(configs.flatMap((c) => [c.token, c.auth_credentials as string]).filter((secret) => dump.includes(secret)), [], 'no token, no credentials')
})

t.test('postgres: without a key the server boots and refuses to store a secret; a boot that finds sealed data stops', async (t) => {
  const driver = await drivers.postgres?.(t)
  if (driver === undefined) return
  const keyless = await open(t, driver.config())
  t.same(await keyless.secrets.recorded(), [], 'no key recorded')
  await t.rejects(save(driver, keyless, pushConfig('run-1', 'one')), { code: 'AH_ERR_SECRETS_KEY_UNSET', statusCode: 503, message: /a2a_push_configs\.token cannot be stored sealed: set SECRETS_KEY or SECRETS_KEY_FILE \(the same key on every instance/ })
  t.same(await driver.sql(keyless, 'SELECT id FROM a2a_push_configs'), [], 'nothing stored')
  await keyless.close()
  const keyed = await open(t, driver.config({ SECRETS_KEY: KEY_A }))
  await save(driver, keyed, pushConfig('run-1', 'one'))
  await keyed.close()
  await t.rejects(buildApp(driver.config()), { code: 'AH_ERR_SECRETS_KEY_UNKNOWN', message: new RegExp(`sealed with key ${KID_A}, which this server does not hold \\(it holds no key\\)`) })
})
