// `agent-host secrets rotate`, on both drivers (PostgreSQL's skips without one).
import t, { type Test } from 'tap'
import { randomBytes, randomUUID } from 'node:crypto'
import { main, type CommandIo } from '../../src/commands.js'
import { buildApp } from '../../src/app.js'
import { loadConfig, type Config } from '../../src/config.js'
import { openStores } from '../../src/plugins/storage.js'
import { sealedKeyId, secretKeyId } from '../../src/storage/secret-keyring.js'
import type { NewPushConfig } from '../../src/storage/a2a-push.js'
import type { Stores } from '../../src/storage/stores.js'
import type { SqliteStores } from '../../src/storage/sqlite/index.js'
import type { PgStores } from '../../src/storage/postgres/index.js'
import { pgDatabase } from '../pg.js'
import { tempDataDir } from '../helper.js'

const OLD = randomBytes(32).toString('base64')
const NEW = randomBytes(32).toString('hex')
const KID_OLD = secretKeyId(Buffer.from(OLD, 'base64'))
const KID_NEW = secretKeyId(Buffer.from(NEW, 'hex'))
const quiet = { info: () => {}, warn: () => {}, error: () => {} }
const RUN = `INSERT INTO runs (request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, started_at)
  VALUES ($1, 'h', '{"request_id":"wire"}', 's', 'agent', 'm', 'ended', 'i', 1, 0)`

function capture (): { io: CommandIo, out: string[], err: string[] } {
  const out: string[] = []
  const err: string[] = []
  return { io: { out: (line) => out.push(line), err: (line) => err.push(line) }, out, err }
}

/** One database's environment (SQLite's DATA_DIR, or a PostgreSQL database), and raw SQL on opened stores. */
interface Driver {
  env: Record<string, string>
  sql: (stores: Stores, text: string, params?: unknown[]) => Promise<Array<Record<string, unknown>>>
}

const drivers: Record<string, (t: Test) => Promise<Driver | undefined>> = {
  sqlite: async (t) => ({
    env: { DATA_DIR: tempDataDir(t) },
    sql: async (stores, text, params = []) => {
      const statement = (stores as SqliteStores).db.prepare(text.replace(/\$\d/g, '?'))
      return statement.reader ? statement.all(...params) as Array<Record<string, unknown>> : (statement.run(...params), [])
    }
  }),
  postgres: async (t) => {
    const url = await pgDatabase(t)
    return url === undefined ? undefined : { env: { DATA_DIR: tempDataDir(t), DATABASE_URL: url }, sql: async (stores, text, params = []) => (await (stores as PgStores).pool.query(text, params)).rows }
  }
}

const config = (driver: Driver, env: Record<string, string>): Config => loadConfig({ ...driver.env, LOG_LEVEL: 'silent', ...env })

async function open (t: Test, driver: Driver, env: Record<string, string>): Promise<Stores> {
  const stores = await openStores(config(driver, env), { instanceId: randomUUID(), log: quiet, serving: false })
  t.teardown(async () => { await stores.close() })
  return stores
}

function pushConfig (id: string): NewPushConfig {
  return { run_key: 'run-1', id, task_id: 'task-1', agent_id: 'agent', owner_key: 'k1', created_by: 'k1', url: `https://example.com/${id}`, token: `token-${id}`, auth_scheme: id === 'one' ? 'Bearer' : null, auth_credentials: id === 'one' ? `creds-${id}` : null }
}

/** Push configs `one` (token and credentials) and `two` (a token) stored under `key`. */
async function stored (t: Test, driver: Driver, key: string): Promise<void> {
  const stores = await open(t, driver, { SECRETS_KEY: key })
  await driver.sql(stores, RUN, ['run-1'])
  for (const id of ['one', 'two']) await stores.push.changes.save('run-1', () => ({ config: pushConfig(id), audit: { actor: 'k1', action: 'a2a.push.create', resource: 'agent', success: true } }), 'start', Date.now())
  await stores.close()
}

for (const [kind, make] of Object.entries(drivers)) {
  t.test(`${kind}: secrets rotate seals every secret again with the new key, audited; then the server boots with the new key alone`, async (t) => {
    const driver = await make(t)
    if (driver === undefined) return
    await stored(t, driver, OLD)
    const { io, out, err } = capture()
    t.equal(await main(['secrets', 'rotate'], { ...driver.env, SECRETS_KEY: NEW, SECRETS_KEYS_RETIRED: OLD }, io), 0, err.join('\n'))
    t.same(out, [`re-sealed 3 secrets with key ${KID_NEW}; it is now the only key in use: SECRETS_KEYS_RETIRED may be dropped`])

    const after = await open(t, driver, { SECRETS_KEY: NEW })
    t.same(await after.secrets.recorded(), [KID_NEW], 'the old key forgotten')
    t.ok((await driver.sql(after, 'SELECT token, auth_credentials FROM a2a_push_configs')).every((r) => sealedKeyId(r.token as string) === KID_NEW && (r.auth_credentials === null || sealedKeyId(r.auth_credentials as string) === KID_NEW)), 'every value under the new key')
    t.match(await after.push.store.get('run-1', 'one'), { token: 'token-one', auth_credentials: 'creds-one' }, 'read under the new key')
    t.match(await after.push.store.get('run-1', 'two'), { token: 'token-two', auth_credentials: null })
    const [row] = await after.audit.list({ action: 'secrets.rotate' } as Parameters<Stores['audit']['list']>[0])
    t.match(row, { action: 'secrets.rotate', actor: /^cli:/, resource: KID_NEW, success: true, details: { resealed: 3, retired: [KID_OLD] } })
    await after.close()

    const app = await buildApp(config(driver, { SECRETS_KEY: NEW }))
    t.teardown(async () => { await app.close() })
    t.pass('the server boots with the new key alone')
    await t.rejects(openStores(config(driver, { SECRETS_KEY: OLD }), { instanceId: 'x', log: quiet, serving: false }), { code: 'AH_ERR_SECRETS_KEY_UNKNOWN', message: new RegExp(KID_NEW) }, 'and no more with the old one')

    const again = capture()
    t.equal(await main(['secrets', 'rotate'], { ...driver.env, SECRETS_KEY: NEW }, again.io), 0)
    t.same(again.out, [`re-sealed 0 secrets with key ${KID_NEW}; it is now the only key in use: SECRETS_KEYS_RETIRED may be dropped`], 'a second rotation has nothing to do')
  })

  t.test(`${kind}: secrets rotate without the old key, or with a value that does not open, changes nothing and exits 1`, async (t) => {
    const driver = await make(t)
    if (driver === undefined) return
    await stored(t, driver, OLD)
    const missing = capture()
    t.equal(await main(['secrets', 'rotate'], { ...driver.env, SECRETS_KEY: NEW }, missing.io), 1)
    t.match(missing.err.join('\n'), new RegExp(`sealed with key ${KID_OLD}, which this server does not hold.*SECRETS_KEYS_RETIRED`))

    const stores = await open(t, driver, { SECRETS_KEY: OLD })
    const before = await driver.sql(stores, 'SELECT id, token, auth_credentials FROM a2a_push_configs ORDER BY id')
    // one config's token copied into the other: it no longer authenticates there
    await driver.sql(stores, 'UPDATE a2a_push_configs SET token = $1 WHERE id = $2', [before[0]?.token, 'two'])
    await stores.close()
    const tampered = capture()
    t.equal(await main(['secrets', 'rotate'], { ...driver.env, SECRETS_KEY: NEW, SECRETS_KEYS_RETIRED: OLD }, tampered.io), 1)
    t.match(tampered.err, [new RegExp(`^nothing changed: .*key ${KID_OLD} cannot be opened: .*sealed for another place`)])

    const after = await open(t, driver, { SECRETS_KEY: OLD })
    const rows = await driver.sql(after, 'SELECT id, token, auth_credentials FROM a2a_push_configs ORDER BY id')
    t.same(rows.map((r) => [r.id, r.auth_credentials]), before.map((r) => [r.id, r.auth_credentials]), 'nothing re-sealed')
    t.same((await after.secrets.recorded()).sort(), [KID_OLD, KID_NEW].sort(), 'the old key still recorded (the new one too: a boot with it recorded it)')

    // a value under a key recorded nowhere and not given
    await driver.sql(after, 'UPDATE a2a_push_configs SET token = $1 WHERE id = $2', [(before[1]?.token as string).replace(KID_OLD, '0123456789abcdef'), 'two'])
    await after.close()
    const unknown = capture()
    t.equal(await main(['secrets', 'rotate'], { ...driver.env, SECRETS_KEY: NEW, SECRETS_KEYS_RETIRED: OLD }, unknown.io), 1)
    t.match(unknown.err, [/^nothing changed: Stored secrets are sealed with key 0123456789abcdef, which this server does not hold/])
  })
}

t.test('secrets: a wrong sub-command, or rotate without SECRETS_KEY, is refused with exit 2', async (t) => {
  const dir = tempDataDir(t)
  const wrong = capture()
  t.equal(await main(['secrets'], { DATA_DIR: dir }, wrong.io), 2)
  t.match(wrong.err, [/^secrets needs rotate\n\nusage: agent-host/])
  const keyless = capture()
  t.equal(await main(['secrets', 'rotate'], { DATA_DIR: dir }, keyless.io), 2)
  t.match(keyless.err, [/seals the stored secrets with SECRETS_KEY .*SECRETS_KEYS_RETIRED to the old one \(make a key with openssl rand -base64 32\)/])
  const help = capture()
  t.equal(await main(['--help'], {}, help.io), 0)
  t.match(help.out.join('\n'), /secrets rotate +seal every stored secret/)
})
