import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { main, type CommandIo } from '../../src/commands.js'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { MIGRATIONS } from '../../src/storage/sqlite/migrations.js'
import { SqliteAuditLog } from '../../src/storage/sqlite/audit.js'
import { AUDIT_PROGRESS_ROWS } from '../../src/storage/audit.js'
import { terminalProgress } from '../../src/terminal-progress.js'
import { SqliteKeyStore } from '../../src/storage/sqlite/keys.js'
import pkg from '../../package.json' with { type: 'json' }
import { tempDataDir, type Teardown } from '../helper.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const HEADER = ['ID', 'NAME', 'TENANT', 'SCOPES', 'AGENTS', 'CREATED', 'EXPIRES', 'STATE']

/**
 * What a command printed, in order: `out`, `err`, and, when `terminal`, what its progress line
 * drew (redrawn on every update: intervalMs 0) and the terminal-aligned tables.
 */
function capture (terminal: boolean): { io: CommandIo, out: string[], err: string[], drawn: string[], log: string[] } {
  const seen = { out: [] as string[], err: [] as string[], drawn: [] as string[], log: [] as string[] }
  const io: CommandIo = {
    out: (line) => { seen.out.push(line); seen.log.push(`out ${line}`) },
    err: (line) => { seen.err.push(line); seen.log.push(`err ${line}`) },
    ...(terminal ? { outIsTerminal: true, progress: terminalProgress((text) => { seen.drawn.push(text); seen.log.push(`tty ${JSON.stringify(text)}`) }, { intervalMs: 0, columns: 1000 }) } : {})
  }
  return { io, ...seen }
}

/** A DATA_DIR holding an audit log of `rows` rows. */
function auditLogOf (t: Teardown, rows: number): string {
  const dir = tempDataDir(t)
  const db = openDatabase(dir)
  const audit = new SqliteAuditLog(db)
  db.transaction(() => {
    for (let i = 1; i <= rows; i++) audit.append({ actor: `key-${i % 5}`, action: 'assist', resource: 'agent:echo', success: true, details: { i } })
  })()
  db.close()
  return dir
}

/** A verdict without its timings, which differ from run to run. */
function untimed (line: string | undefined): unknown {
  const { seconds, rows_per_second: rate, ...rest } = JSON.parse(line ?? '')
  return rest
}

async function makeKeys (t: Teardown): Promise<{ dir: string, keys: string[] }> {
  const dir = tempDataDir(t)
  const made = capture(false)
  for (const args of [['--name', 'web', '--scopes', 'assist:invoke,agents:read', '--agents', 'echo', '--expires', '30d'], ['--name', 'ops-admin', '--scopes', 'admin', '--tenant', 'acme']]) {
    if (await main(['keys', 'create', ...args], { DATA_DIR: dir }, made.io) !== 0) throw new Error(made.err.join('\n'))
  }
  if (await main(['keys', 'revoke', 'web'], { DATA_DIR: dir }, capture(false).io) !== 0) throw new Error('revoke failed')
  return { dir, keys: made.out.filter((l) => l.startsWith('ahk_')) }
}

t.test('keys list, piped: a header, then one tab-separated row per key', async (t) => {
  const { dir, keys } = await makeKeys(t)
  const { io, out, err } = capture(false)
  t.equal(await main(['keys', 'list'], { DATA_DIR: dir }, io), 0)
  t.same(err, [])
  t.equal(out.length, 3)
  const [header, web, ops] = out.map((l) => l.split('\t'))
  t.same(header, HEADER)
  t.match(web, [/^[0-9a-f]{16}$/, 'web', 'default', 'assist:invoke,agents:read', 'echo', /^\d{4}-\d\d-\d\dT/, /^\d{4}-\d\d-\d\dT/, /^revoked \d{4}-/])
  t.match(ops, [/^[0-9a-f]{16}$/, 'ops-admin', 'acme', 'admin', '*', /^\d{4}-\d\d-\d\dT/, 'never', 'active'])
  // ahk_<16 hex id>_<secret>
  for (const key of keys) t.notOk(out.join('\n').includes(key.slice(21)), 'never a key\'s secret')
  const acme = capture(false)
  t.equal(await main(['keys', 'list', '--tenant', 'acme'], { DATA_DIR: dir }, acme.io), 0)
  t.same(acme.out.slice(1).map((l) => l.split('\t')[1]), ['ops-admin'], '--tenant: that tenant\'s keys')
  const bad = capture(false)
  t.equal(await main(['keys', 'create', '--name', 'x', '--scopes', 'admin', '--tenant', 'Not A Tenant'], { DATA_DIR: dir }, bad.io), 2, 'a bad tenant name')
  t.match(bad.err, [/--tenant "Not A Tenant" is not a tenant's name/])
})

t.test('keys list on a terminal: the same cells in columns aligned under the header', async (t) => {
  const { dir } = await makeKeys(t)
  const piped = capture(false)
  await main(['keys', 'list'], { DATA_DIR: dir }, piped.io)
  const { io, out } = capture(true)
  t.equal(await main(['keys', 'list'], { DATA_DIR: dir }, io), 0)
  t.notOk(out.some((l) => l.includes('\t')), 'no tabs')
  t.same(out.map((l) => l.split(/ {2,}/)), piped.out.map((l) => l.split('\t')), 'the same cells')
  // where each cell starts: the line's start, and after each gap of two spaces or more
  const starts = (line: string): number[] => [...line.matchAll(/(?:^|(?<= {2}))\S/g)].map((m) => m.index)
  const columns = starts(out[0] as string)
  t.equal(columns.length, HEADER.length)
  for (const line of out.slice(1)) t.same(starts(line), columns, `aligned: ${line}`)
})

t.test('keys list --json: an array of the keys, with neither the key nor its hash', async (t) => {
  const { dir, keys } = await makeKeys(t)
  const { io, out, err } = capture(true)
  t.equal(await main(['keys', 'list', '--json'], { DATA_DIR: dir }, io), 0)
  t.same(err, [])
  t.equal(out.length, 1, 'one JSON document, even on a terminal')
  const listed = JSON.parse(out[0] as string) as Array<Record<string, unknown>>
  t.equal(listed.length, 2)
  for (const k of listed) t.same(Object.keys(k).sort(), ['agents', 'created_at', 'expires_at', 'id', 'name', 'revoked_at', 'scopes', 'state', 'tenant'])
  t.match(listed[0], { name: 'web', scopes: ['assist:invoke', 'agents:read'], agents: ['echo'], created_at: /^\d{4}-/, expires_at: /^\d{4}-/, revoked_at: /^\d{4}-/, state: 'revoked' })
  t.match(listed[1], { name: 'ops-admin', tenant: 'acme', scopes: ['admin'], agents: null, expires_at: null, revoked_at: null, state: 'active' })
  const stored = openDatabase(dir)
  const hashes = (stored.prepare('SELECT hash, salt FROM api_keys').all() as Array<{ hash: string, salt: string }>).flatMap((r) => [r.hash, r.salt])
  stored.close()
  t.equal(hashes.length, 4)
  for (const secret of [...hashes, ...keys]) t.notOk((out[0] as string).includes(secret), 'nothing secret')
})

// regression (issue 31): a key past its expiry was listed as active
t.test('keys list: a key past its expiry is expired, a revoked one revoked (even when also expired), in the table and the JSON', async (t) => {
  const dir = tempDataDir(t)
  const db = openDatabase(dir)
  const store = new SqliteKeyStore(db)
  const past = new Date(Date.now() - 60_000)
  store.create({ name: 'lapsed', scopes: ['agents:read'], expiresAt: past })
  store.create({ name: 'gone', scopes: ['agents:read'], expiresAt: past })
  store.create({ name: 'live', scopes: ['agents:read'], expiresAt: new Date(Date.now() + 86_400_000) })
  store.revoke('gone')
  db.close()
  const { io, out } = capture(false)
  t.equal(await main(['keys', 'list'], { DATA_DIR: dir }, io), 0)
  // made in the same millisecond, the keys are listed in their ids' order: read them by name
  const rows = new Map(out.slice(1).map((l) => l.split('\t')).map((cells) => [cells[1], cells]))
  t.match(rows.get('lapsed'), [String, 'lapsed', 'default', String, String, String, past.toISOString(), 'expired'])
  t.match(rows.get('gone'), [String, 'gone', 'default', String, String, String, past.toISOString(), /^revoked \d{4}-/])
  t.match(rows.get('live'), [String, 'live', 'default', String, String, String, /^\d{4}-/, 'active'])
  const json = capture(false)
  t.equal(await main(['keys', 'list', '--json'], { DATA_DIR: dir }, json.io), 0)
  t.same(Object.fromEntries((JSON.parse(json.out[0] as string) as Array<{ name: string, state: string }>).map((k) => [k.name, k.state])), { lapsed: 'expired', gone: 'revoked', live: 'active' })
})

// regression (issue 31): `agent-host --version` was "unknown option"
t.test('--version and -v print the package\'s version alone and exit 0', async (t) => {
  for (const flag of ['--version', '-v']) {
    const { io, out, err } = capture(false)
    t.equal(await main([flag], {}, io), 0, flag)
    t.same(out, [pkg.version], flag)
    t.same(err, [])
  }
})

t.test('keys list with no keys: the header alone, or []', async (t) => {
  const dir = tempDataDir(t)
  const text = capture(false)
  t.equal(await main(['keys', 'list'], { DATA_DIR: dir }, text.io), 0)
  t.same(text.out, [HEADER.join('\t')])
  const json = capture(false)
  t.equal(await main(['keys', 'list', '--json'], { DATA_DIR: dir }, json.io), 0)
  t.same(json.out, ['[]'])
})

t.test('audit verify on a terminal draws its progress, clears it before the verdict, and the verdict is unchanged', async (t) => {
  const rows = 2 * AUDIT_PROGRESS_ROWS + 500
  const dir = auditLogOf(t, rows)
  const tty = capture(true)
  t.equal(await main(['audit', 'verify', '--data-dir', dir], {}, tty.io), 0)
  t.same(tty.drawn, [
    `\rverifying audit rows: ${AUDIT_PROGRESS_ROWS}/${rows} (40%)\x1b[K`,
    `\rverifying audit rows: ${2 * AUDIT_PROGRESS_ROWS}/${rows} (80%)\x1b[K`,
    '\r\x1b[K'
  ])
  t.same(tty.log.slice(-3, -1), [`tty ${JSON.stringify('\r\x1b[K')}`, `out ${tty.out[0] ?? ''}`], 'the line is cleared, then the verdict printed')
  const piped = capture(false)
  t.equal(await main(['audit', 'verify', '--data-dir', dir], {}, piped.io), 0)
  t.same(piped.drawn, [])
  t.same(untimed(tty.out[0]), untimed(piped.out[0]))
  t.match(JSON.parse(piped.out[0] ?? ''), { ok: true, rows })
  t.same(tty.err, piped.err, 'the same warnings')
  t.match(tty.err, [/2500 rows are not signed/])
})

t.test('audit verify of a broken log still clears its line', async (t) => {
  const dir = auditLogOf(t, AUDIT_PROGRESS_ROWS + 10)
  const db = openDatabase(dir)
  db.exec('DROP TRIGGER audit_log_no_update')
  db.prepare("UPDATE audit_log SET actor = 'mallory' WHERE audit_id = ?").run(AUDIT_PROGRESS_ROWS + 5)
  db.close()
  const { io, out, drawn } = capture(true)
  t.equal(await main(['audit', 'verify', '--data-dir', dir], {}, io), 1)
  t.equal(drawn.length, 2)
  t.equal(drawn.at(-1), '\r\x1b[K')
  t.match(JSON.parse(out[0] ?? ''), { ok: false, first_bad_row: AUDIT_PROGRESS_ROWS + 5 })
})

t.test('a command that migrates the database names each migration on a terminal, then clears it', async (t) => {
  const tty = capture(true)
  t.equal(await main(['keys', 'list'], { DATA_DIR: tempDataDir(t) }, tty.io), 0)
  t.same(tty.drawn, [...MIGRATIONS.map((m, i) => `\rmigrating the database (${m.version}: ${m.description}): ${i}/${MIGRATIONS.length} (${Math.floor(i * 100 / MIGRATIONS.length)}%)\x1b[K`), '\r\x1b[K'])
  t.equal(tty.log.at(-1), `out ${HEADER.join('  ')}`, 'the output comes after the line is cleared')
  const dir = tempDataDir(t)
  const piped = capture(false)
  t.equal(await main(['keys', 'list'], { DATA_DIR: dir }, piped.io), 0)
  t.same(piped.log, [`out ${HEADER.join('\t')}`], 'piped: the output alone')
  const again = capture(true)
  t.equal(await main(['keys', 'list'], { DATA_DIR: dir }, again.io), 0)
  t.same(again.drawn, [], 'nothing to migrate: no progress at all')
})

t.test('the CLI with its stderr piped prints the result alone: no progress, no migration line', async (t) => {
  const rows = 2 * AUDIT_PROGRESS_ROWS
  const logged = auditLogOf(t, rows)
  const fresh = tempDataDir(t)
  const run = async (args: string[], dataDir: string): Promise<{ code: number, stdout: string, stderr: string }> => {
    const child = spawn(process.execPath, [...process.execArgv, 'src/cli.ts', ...args], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir, AUDIT_KEY: '' }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
    child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
    const [code] = await once(child, 'exit') as [number]
    return { code, stdout, stderr }
  }
  const [verify, list] = await Promise.all([run(['audit', 'verify'], logged), run(['keys', 'list', '--json'], fresh)])
  t.equal(verify.code, 0)
  t.match(verify.stdout, /^\{.*\}\n$/, 'one line: the verdict')
  t.match(JSON.parse(verify.stdout), { ok: true, rows })
  t.equal(verify.stderr, `${rows} rows are not signed (written without AUDIT_KEY): they are checked against accidents and the checkpoints only\n`, 'stderr: the warning alone')
  t.equal(list.code, 0)
  t.equal(list.stdout, '[]\n', 'a fresh database was migrated without a word')
  t.equal(list.stderr, '')
})
