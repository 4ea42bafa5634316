import t from 'tap'
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { AuditKeyring } from '../../../src/storage/audit-key.js'
import { AUDIT_PROGRESS_ROWS, type AuditInput } from '../../../src/storage/audit.js'
import { appendCheckpoint, CHECKPOINT_FILE } from '../../../src/storage/audit-checkpoints.js'
import { openAuditReader, PgAuditLog } from '../../../src/storage/postgres/audit.js'
import { inTransaction, openPostgres, PG_LOCKS } from '../../../src/storage/postgres/database.js'
import { main } from '../../../src/commands.js'
import { tempDataDir } from '../../helper.js'
import { pgDatabase } from '../../pg.js'

// What only the PostgreSQL audit log has: appends composed into a caller's transaction, the
// cluster-wide lock, one snapshot per verification, and `audit verify` against a server.

const ROOT = fileURLToPath(new URL('../../../', import.meta.url))
const KEY = 'k'.repeat(40)
const row = (actor: string): AuditInput => ({ actor, action: 'write', resource: 'r', success: true })

/** Poll an asynchronous condition every 5 ms; throw after `ms`. */
async function eventually (what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!await check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

t.test('appendIn joins the caller\'s transaction: a rollback leaves the chain untouched, and every other append waits for the commit', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const audit = await PgAuditLog.open(pool)
  const client = await pool.connect()
  await client.query('BEGIN')
  t.match(await audit.appendIn(client, row('rolled-back')), { audit_id: 1 })
  const next = audit.append(row('next'))
  await eventually('the other append to wait on the chain\'s lock', async () =>
    (await pool.query<{ n: number }>("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted", [PG_LOCKS.audit])).rows[0]?.n === 1)
  await client.query('ROLLBACK')
  client.release()
  t.match(await next, { audit_id: 1, actor: 'next' }, 'the waiting append took the place of the rolled-back row')
  const committed = await inTransaction(pool, async (c) => {
    await c.query('SELECT 1')
    return await audit.appendIn(c, row('committed'))
  })
  t.match(committed, { audit_id: 2, previous_hash: (await next).integrity_hash })
  t.same((await audit.list()).map((r) => r.actor), ['next', 'committed'])
  t.match(await audit.verify(), { ok: true, rows: 2 })
})

t.test('an append at REPEATABLE READ is refused: its snapshot could not see the previous append', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const audit = await PgAuditLog.open(pool)
  const client = await pool.connect()
  t.teardown(() => { client.release() })
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ')
  await t.rejects(audit.appendIn(client, row('x')), /READ COMMITTED level, not repeatable read/)
  await client.query('ROLLBACK')
  t.equal(await audit.count(), 0)
})

t.test('an instance without the key may not append once another instance signed the log', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const plain = await PgAuditLog.open(pool)
  const keyed = await PgAuditLog.open(pool, new AuditKeyring(KEY))
  await keyed.append(row('keyed'))
  await t.rejects(plain.append(row('plain')), { code: 'AH_ERR_AUDIT_KEY_MISSING' }, 'checked again under the lock, not only when opened')
  await t.rejects(PgAuditLog.open(pool), { code: 'AH_ERR_AUDIT_KEY_MISSING' })
  t.match(await keyed.verify(), { ok: true, rows: 1, keyed_rows: 1 })
})

t.test('verify reads one snapshot: rows another process appends meanwhile are neither half seen nor taken for a cut', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  // the walk's snapshot stays open while this process is blocked on another one, which on a loaded
  // machine can outlast the 5 s after which the server ends a session idle in a transaction
  const pool = await openPostgres(url, { idleInTransactionTimeoutMs: 120_000 })
  t.teardown(async () => { await pool.end() })
  const audit = await PgAuditLog.open(pool, new AuditKeyring(KEY))
  const told: Array<[number, number]> = []
  t.match(await audit.verify([], { onProgress: (rows, total) => { told.push([rows, total]) } }), { ok: false, rows: 0, fault_count: 1, reason: /no row is signed/ }, 'with the key, a log without signed rows is a fault (issue 27, fault 8)')
  t.same(told, [], 'an empty log: nothing to tell')
  const rows = 2 * AUDIT_PROGRESS_ROWS + 500
  await inTransaction(pool, async (c) => { for (let i = 0; i < rows; i++) await audit.appendIn(c, row('seed')) })
  let late: number | null = null
  const result = await audit.verify([], {
    onProgress: (done, total) => {
      told.push([done, total])
      if (late !== null) return
      // blocks this process while another one appends and commits: the rest of the walk and the head are read after it
      late = spawnSync(process.execPath, [...process.execArgv, 'test/fixtures/scripts/audit-writer.ts', url, '5', 'late', KEY], { cwd: ROOT, input: 'go\n', stdio: ['pipe', 'ignore', 'inherit'], timeout: 60_000 }).status
    }
  })
  t.equal(late, 0, 'the other process appended while verify was walking')
  t.match(result, { ok: true, rows, keyed_rows: rows })
  t.same(told, [[AUDIT_PROGRESS_ROWS, rows], [2 * AUDIT_PROGRESS_ROWS, rows]])
  t.match(await audit.verify(), { ok: true, rows: rows + 5 }, 'the late rows are there for the next verification')
})

t.test('verify rethrows a failure that is not about the log\'s tables (the server went away), and drops the connection', async (t) => {
  for (const failing of [/max\(audit_id\)/, /FROM audit_head/]) {
    const failure = new Error('Connection terminated unexpectedly')
    const released: unknown[] = []
    const client = {
      query: async (sql: string) => {
        if (failing.test(sql) || sql === 'ROLLBACK') throw failure
        return { rows: [] }
      },
      release: (err?: Error) => { released.push(err) }
    }
    const audit = await PgAuditLog.open({ connect: async () => client } as unknown as pg.Pool, new AuditKeyring(''), { readOnly: true })
    await t.rejects(audit.verify([], { onProgress: () => {} }), failure, `a failure of ${String(failing)}`)
    t.same(released, [failure], 'the connection is destroyed, not put back')
  }
})

t.test('audit verify against PostgreSQL: the checkpoints of every instance\'s DATA_DIR catch rows cut from the end', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  const [a, b] = [tempDataDir(t), tempDataDir(t)]
  const instanceA = await PgAuditLog.open(pool, new AuditKeyring(KEY))
  const instanceB = await PgAuditLog.open(pool, new AuditKeyring(KEY))
  for (let i = 0; i < 10; i++) await (i % 2 === 0 ? instanceA : instanceB).append(row(`i${i}`))
  appendCheckpoint(a, await instanceA.checkpoint())
  for (let i = 10; i < 12; i++) await instanceB.append(row(`i${i}`))
  appendCheckpoint(b, await instanceB.checkpoint())
  const run = async (args: string[]): Promise<{ code: number, verdict: Record<string, unknown> }> => {
    const out: string[] = []
    const code = await main(['audit', 'verify', ...args], { DATABASE_URL: url, DATA_DIR: a, AUDIT_KEY: KEY }, { out: (l) => out.push(l), err: () => {} })
    return { code, verdict: JSON.parse(out[0] ?? '{}') as Record<string, unknown> }
  }
  t.match(await run(['--checkpoint-file', join(b, CHECKPOINT_FILE)]), { code: 0, verdict: { ok: true, rows: 12, keyed_rows: 12, checkpoints_checked: 2 } })
  await pool.query('ALTER TABLE audit_log DISABLE TRIGGER ALL')
  await pool.query('DELETE FROM audit_log WHERE audit_id > 10')
  await pool.query('UPDATE audit_head SET audit_id = 10, integrity_hash = (SELECT integrity_hash FROM audit_log WHERE audit_id = 10)')
  t.match(await run([]), { code: 0, verdict: { ok: true, rows: 10 } }, 'instance A\'s checkpoint alone is older than the cut')
  t.match(await run(['--checkpoint-file', join(b, CHECKPOINT_FILE)]), { code: 1, verdict: { ok: false, first_bad_row: 11, missing: { from: 11, to: 12 }, reason: /rows 11\.\.12 are missing: the checkpoint .*audit-checkpoints\.jsonl:1 .* counted 12/ } }, 'instance B\'s checkpoint catches it')
  t.match(await run(['--checkpoint', JSON.stringify({ rows: 12, head: 'f'.repeat(64) })]), { code: 1, verdict: { ok: false, missing: { from: 11, to: 12 } } }, 'so does a monitor\'s copy')
})

t.test('audit verify against PostgreSQL opens it read-only and never migrates it; a database without a log or a server out of reach exits 2, naming it without its password', async (t) => {
  const url = await pgDatabase(t, { empty: true })
  if (url === undefined) return
  const errors: string[] = []
  const io = { out: () => {}, err: (l: string) => errors.push(l) }
  t.equal(await main(['audit', 'verify'], { DATABASE_URL: url, DATA_DIR: tempDataDir(t) }, io), 2)
  t.match(errors[0], /^no audit log in postgres:\/\/[^@]+\/t_[0-9a-f]+: is DATABASE_URL right\?$/)
  const check = new pg.Client({ connectionString: url })
  await check.connect()
  t.teardown(async () => { await check.end() })
  t.equal((await check.query("SELECT to_regclass('schema_migrations') AS found")).rows[0].found, null, 'nothing was created')

  t.equal(await main(['audit', 'verify'], { DATABASE_URL: 'postgres://someone:secret@127.0.0.1:1/gone', DATA_DIR: tempDataDir(t) }, io), 2)
  t.match(errors[1], /^cannot read the audit log at postgres:\/\/127\.0\.0\.1:1\/gone: .*ECONNREFUSED/)
  t.notMatch(errors[1], /secret|someone/)

  await (await openPostgres(url)).end()
  const reader = await openAuditReader(url)
  if (reader === undefined) throw new Error('a migrated database has a log')
  t.teardown(async () => { await reader.end() })
  await t.rejects(reader.query("INSERT INTO audit_head VALUES (1, 1, 'x')"), { code: '25006' }, 'its sessions are read-only')
  // a connection the server drops while it sits idle is replaced, not a crash
  const pid = (await reader.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid
  await check.query('SELECT pg_terminate_backend($1)', [pid])
  await eventually('the dropped connection to leave the pool', async () => reader.totalCount === 0)
  t.match((await reader.query('SELECT 1 AS one')).rows, [{ one: 1 }])
})
