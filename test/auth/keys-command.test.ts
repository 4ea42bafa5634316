import t from 'tap'
import { main } from '../../src/commands.js'
import { openPostgres } from '../../src/storage/postgres/database.js'
import { PgKeyStore } from '../../src/storage/postgres/keys.js'
import { tempDataDir } from '../helper.js'
import { pgDatabase } from '../pg.js'

t.test('agent-host keys create / list / revoke against PostgreSQL when DATABASE_URL is set, each change audited in its transaction', async (t) => {
  const url = await pgDatabase(t, { empty: true })
  if (url === undefined) return
  const lines: string[] = []
  const steps: string[] = []
  const io = {
    out: (l: string) => { lines.push(l) },
    err: (l: string) => { lines.push(`ERR ${l}`) },
    progress: { update: (_done: number, _total: number, what: string) => { steps.push(what) }, end: () => {} }
  }
  const env = { DATA_DIR: tempDataDir(t), DATABASE_URL: url, AUDIT_KEY: 'k'.repeat(32) }
  t.equal(await main(['keys', 'create', '--name', 'ops', '--scopes', 'assist:invoke,agents:read', '--expires', '30d'], env, io), 0)
  t.match(steps, [/migrating the database \(1: /], 'the first command migrates the database, and shows it')
  const key = lines.find((l) => l.startsWith('ahk_')) as string
  t.match(key, /^ahk_[0-9a-f]{16}_/)

  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const server = new PgKeyStore(pool)
  t.match(await server.verify(key), { name: 'ops' }, 'an instance on the same database accepts it')

  lines.length = 0
  t.equal(await main(['keys', 'list', '--json'], env, io), 0)
  t.match(JSON.parse(lines[0] as string), [{ name: 'ops', scopes: ['assist:invoke', 'agents:read'], revoked_at: null }])
  t.notOk(lines.join('\n').includes(key.slice(21)), 'list never prints a key')

  t.equal(await main(['keys', 'create', '--name', 'ops', '--scopes', 'admin'], env, io), 1, 'a name taken is refused')
  t.match(lines.at(-1), /^ERR A key named "ops" already exists and is not revoked/)
  t.equal(await main(['keys', 'revoke', 'ops'], env, io), 0)
  t.match(lines.at(-1), /revoked 1 key/)
  t.match(await server.verify(key, new Date(Date.now() + 1000)), { refused: 'revoked' }, 'and the instance refuses it (within 1 s: its cached row is read again)')
  t.equal(await main(['keys', 'revoke', 'ops'], env, io), 1, 'nothing left to revoke')

  const audit = await pool.query<{ action: string, actor: string, resource: string, key_id: string | null }>('SELECT action, actor, resource, key_id FROM audit_log ORDER BY audit_id')
  t.match(audit.rows, [{ action: 'key.create', actor: /^cli:/, resource: key.slice(4, 20), key_id: /./ }, { action: 'key.revoke', resource: 'ops' }], 'audited (and signed), the refused creation and the empty revocation not')

  lines.length = 0
  await t.rejects(main(['keys', 'create', '--name', 'unsigned', '--scopes', 'admin'], { ...env, AUDIT_KEY: '' }, io), { code: 'AH_ERR_AUDIT_KEY_MISSING' }, 'the log is signed: a process without the key may not write to it')
  t.same((await new PgKeyStore(pool).list()).map((k) => k.name), ['ops'], 'and makes no key')
})

t.test('agent-host keys with DATABASE_URL on a server that is not there fails with the connection\'s error', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const away = new URL(url)
  away.pathname = '/no_such_database'
  await t.rejects(main(['keys', 'list'], { DATA_DIR: tempDataDir(t), DATABASE_URL: away.toString() }, { out: () => {}, err: () => {} }), /no_such_database/)
})

t.test('agent-host keys on a fresh PostgreSQL database without a terminal: its output is the command\'s own, no migration log lines', async (t) => {
  const url = await pgDatabase(t, { empty: true })
  if (url === undefined) return
  const lines: string[] = []
  const io = { out: (l: string) => { lines.push(`OUT ${l}`) }, err: (l: string) => { lines.push(`ERR ${l}`) } }
  t.equal(await main(['keys', 'list', '--json'], { DATA_DIR: tempDataDir(t), DATABASE_URL: url }, io), 0)
  t.same(lines, ['OUT []'], 'the empty list, and nothing on stderr')
})
