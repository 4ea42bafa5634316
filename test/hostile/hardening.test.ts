import t from 'tap'
import { existsSync, mkdirSync, readFileSync, symlinkSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { main } from '../../src/commands.js'
import { userInfo } from 'node:os'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteAuditLog } from '../../src/storage/sqlite/audit.js'
import { LocalAgentProtocol } from '../../src/backends/local/local-agent-protocol.js'
import { CHECKPOINT_FILE } from '../../src/storage/audit-checkpoints.js'
import { AGENTS, build, envelope, listen, tempDataDir } from '../helper.js'

// Issue 16: who acted is the caller, and the small faults an attacker or a careless operator found.

const TOY = fileURLToPath(new URL('../fixtures/cli/toy-agent.mjs', import.meta.url))
const quiet = { out: () => {}, err: () => {} }

/** Send raw bytes to the server and read the whole answer. */
async function raw (port: number, text: string): Promise<string> {
  return await new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => { socket.end(text) })
    let answer = ''
    socket.on('data', (c: Buffer) => { answer += c.toString('utf8') })
    socket.on('end', () => { resolve(answer) })
    socket.on('error', reject)
  })
}

t.test('audit rows name the authenticated caller; the envelope\'s user is a separate, bounded claim', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '0', BODY_LIMIT: '2000000' })
  const made = await app.keys.create({ name: 'frontend', scopes: ['assist:invoke', 'sessions:delete', 'tasks:write', 'tasks:read'] })
  const auth = { authorization: `Bearer ${made.key}` }
  const body = envelope(AGENTS.echo, { query: 'hi' })
  ;(body.context.user as { user_id: string }).user_id = 'root-admin'
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: { ...auth, accept: 'application/json' }, payload: body })).statusCode, 200)
  t.match((await app.audit.list({ action: 'assist' })).at(-1), { actor: made.record.id, claimed_user: 'root-admin', request_id: body.request_id })

  const huge = envelope(AGENTS.echo, { query: 'hi' })
  ;(huge.context.user as { user_id: string }).user_id = 'u'.repeat(900_000)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { ...auth, accept: 'application/json' }, payload: huge })
  if (res.statusCode === 200) {
    const row = (await app.audit.list({ action: 'assist' })).at(-1)
    t.equal(row?.actor, made.record.id)
    t.equal(row?.claimed_user?.length, 256, 'a claimed user is cut to 256 characters in the log')
  } else {
    t.equal(res.statusCode, 400, 'or refused outright')
  }

  t.equal((await app.inject({ method: 'DELETE', url: `/v1/sessions/${body.context.session_id}`, headers: auth })).statusCode, 204)
  t.match((await app.audit.list({ action: 'session.erase' })).at(-1), { actor: made.record.id, resource: body.context.session_id })
  await app.inject({ method: 'POST', url: '/v1/tasks', headers: auth, payload: { tasks: [{ id: 'job-1', type: 'nobody' }] } })
  t.match((await app.audit.list({ action: 'task.create' })).at(-1), { actor: made.record.id, resource: 'job-1' })
  t.equal((await app.inject({ method: 'POST', url: '/v1/tasks/job-1/cancel', headers: auth })).statusCode, 200)
  t.match((await app.audit.list({ action: 'task.cancel' })).at(-1), { actor: made.record.id, resource: 'job-1' })
  t.notOk((await app.audit.list({ limit: 1000 })).some((r) => r.actor === 'anonymous'), 'nobody is anonymous when auth is on')
})

t.test('two Authorization headers are a 400, whichever comes first', async (t) => {
  const { app, port } = await listen(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '0' })
  const good = (await app.keys.create({ name: 'reader', scopes: ['agents:read'] })).key
  for (const [first, second] of [[good, 'ahk_bogus'], ['ahk_bogus', good], [good, good]]) {
    const answer = await raw(port, `GET /v1/agents HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${first as string}\r\nAuthorization: Bearer ${second as string}\r\nConnection: close\r\n\r\n`)
    t.match(answer, /^HTTP\/1\.1 400 /)
    t.match(answer, /AH_ERR_REQUEST_INVALID/)
    t.match(answer, /one Authorization header/)
  }
  t.match(await raw(port, `GET /v1/agents HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${good}\r\nConnection: close\r\n\r\n`), /^HTTP\/1\.1 200 /, 'one is fine')
})

t.test('keys create refuses an expiry in the past and agents that do not exist', async (t) => {
  const dir = tempDataDir(t)
  const errors: string[] = []
  const io = { out: () => {}, err: (l: string) => errors.push(l) }
  t.equal(await main(['keys', 'create', '--name', 'old', '--scopes', 'agents:read', '--expires', '2020-01-01'], { DATA_DIR: dir }, io), 2)
  t.match(errors.at(-1), /--expires 2020-01-01 is in the past/)
  t.equal(await main(['keys', 'create', '--name', 'typo', '--scopes', 'assist:invoke', '--agents', 'echo,nosuchagent'], { DATA_DIR: dir }, io), 2)
  t.match(errors.at(-1), /no agent "nosuchagent" in .*\(known: .*echo/)
  const keys: string[] = []
  t.equal(await main(['keys', 'create', '--name', 'ok', '--scopes', 'assist:invoke', '--agents', 'echo', '--expires', '30d'], { DATA_DIR: dir }, { out: (l) => keys.push(l), err: () => {} }), 0)
  t.match(keys[0], /^ahk_/)
  t.equal(await main(['keys', 'revoke', 'ok'], { DATA_DIR: dir }, quiet), 0)
  const db = openDatabase(dir)
  t.teardown(() => db.close())
  t.match(new SqliteAuditLog(db).list({ limit: 100 }).filter((r) => r.action.startsWith('key.')), [
    { action: 'key.create', actor: `cli:${userInfo().username}`, details: { name: 'ok', scopes: ['assist:invoke'], agents: ['echo'] } },
    { action: 'key.revoke', actor: `cli:${userInfo().username}`, resource: 'ok' }
  ], 'the CLI\'s key changes are audited, by the operating-system user')
})

t.test('audit verify on a folder with no database says so, exits 2, and creates nothing', async (t) => {
  const dir = join(tempDataDir(t), 'mistyped')
  const errors: string[] = []
  t.equal(await main(['audit', 'verify', '--data-dir', dir], {}, { out: () => {}, err: (l) => errors.push(l) }), 2)
  t.match(errors[0], /no audit database at .*mistyped/)
  t.notOk(existsSync(dir), 'no folder, no database made')
  t.equal(await main(['audit', 'verify', '--data-dir', tempDataDir(t), '--checkpoint', 'nonsense'], {}, quiet), 2, 'nor an empty folder')
})

t.test('audit verify holds the log against checkpoints kept elsewhere, and needs the key for a keyed log', async (t) => {
  const key = 'k'.repeat(40)
  const app = await build(t, { AUDIT_KEY: key, WORKERS_PER_TYPE: '0' })
  const dir = app.config.DATA_DIR
  await app.audit.append({ actor: 'x', action: 'y', resource: 'z', success: true })
  const kept = (await app.inject({ url: '/v1/audit/checkpoint' })).body
  t.match(JSON.parse(kept), { rows: 2, key_id: /^[0-9a-f]{16}$/, signature: /^[0-9a-f]{64}$/ })
  await app.close()
  const lines: string[] = []
  const io = { out: (l: string) => lines.push(l), err: () => {} }
  t.equal(await main(['audit', 'verify', '--data-dir', dir, '--checkpoint', kept], { AUDIT_KEY: key }, io), 0)
  t.match(JSON.parse(lines.at(-1) as string), { ok: true, rows: 3, keyed_rows: 3, checkpoints_checked: 3 }, 'boot, the row, shutdown; the file\'s two checkpoints and the one given')
  t.equal(await main(['audit', 'verify', '--data-dir', dir], {}, io), 1, 'without the key a keyed log cannot be verified')
  t.match(JSON.parse(lines.at(-1) as string), { ok: false, reason: /which this verifier does not hold/ })
  const forged = JSON.stringify({ ...JSON.parse(kept), rows: 9 })
  t.equal(await main(['audit', 'verify', '--data-dir', dir, '--checkpoint', forged], { AUDIT_KEY: key }, io), 1, 'a checkpoint whose signature does not match')
  t.match(JSON.parse(lines.at(-1) as string), { reason: /bad signature/ })
  t.equal(await main(['audit', 'verify', '--data-dir', dir, '--checkpoint', '{"rows": 9, "head": "' + '0'.repeat(64) + '"}'], { AUDIT_KEY: key }, io), 1, 'an unsigned checkpoint given by hand still counts rows')
  t.match(JSON.parse(lines.at(-1) as string), { missing: { from: 4, to: 9 } })
  t.ok(readFileSync(join(dir, CHECKPOINT_FILE), 'utf8').trim().split('\n').length >= 2, 'boot and shutdown wrote checkpoints')
})

t.test('a server whose audit log is keyed does not start without the key', async (t) => {
  const app = await build(t, { AUDIT_KEY: 'k'.repeat(40), WORKERS_PER_TYPE: '0' })
  const dir = app.config.DATA_DIR
  await app.close()
  await t.rejects(build(t, { DATA_DIR: dir, WORKERS_PER_TYPE: '0' }), { code: 'AH_ERR_AUDIT_KEY_MISSING' })
  const rotated = await build(t, { DATA_DIR: dir, AUDIT_KEY: 'n'.repeat(40), AUDIT_KEYS_RETIRED: 'k'.repeat(40), WORKERS_PER_TYPE: '0' })
  t.match((await rotated.inject({ url: '/v1/audit/verify' })).json(), { ok: true, keyed_rows: 3 }, 'a rotated key goes on, the retired one verifies the old rows')
})

t.test('a CLI agent workspace that is a symbolic link out of DATA_DIR is refused', async (t) => {
  const dataDir = tempDataDir(t)
  const outside = tempDataDir(t)
  mkdirSync(join(dataDir, 'workspaces'), { recursive: true })
  symlinkSync(outside, join(dataDir, 'workspaces', 'escape'))
  const protocol = new LocalAgentProtocol({ command: [process.execPath, TOY], dataDir, workspace: 'escape', inactivityTimeoutMs: 5000 })
  t.teardown(() => protocol.close())
  await t.rejects(protocol.start({ sessionId: 's1' }, {}), { code: 'AH_ERR_BACKEND_CONFIG', message: /leads out of/ })
  t.notOk(existsSync(join(outside, 's1', 'history.json')), 'nothing ran there')
})
