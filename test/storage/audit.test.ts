import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import type { Db } from '../../src/storage/database.js'
import { openDatabase } from '../../src/storage/database.js'
import { AUDIT_GENESIS, AuditLog, hashAuditRow } from '../../src/storage/audit.js'
import { main } from '../../src/commands.js'
import { tempDataDir, type Teardown } from '../helper.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

function fresh (t: Teardown, rows = 10): { db: Db, audit: AuditLog, dir: string } {
  const dir = tempDataDir(t)
  const db = openDatabase(dir)
  t.teardown(() => { if (db.open) db.close() })
  const audit = new AuditLog(db)
  for (let i = 1; i <= rows; i++) audit.append({ actor: `user-${i}`, action: 'assist', resource: 'agent', success: i % 3 !== 0, request_id: `req-${i}`, details: { i } })
  return { db, audit, dir }
}

/** Hand edits need the append-only triggers out of the way first, as an attacker would. */
function dropTriggers (db: Db): void {
  db.exec('DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete')
}

t.test('rows chain from the genesis value, each hash over its canonical JSON', async (t) => {
  const { audit } = fresh(t, 5)
  const rows = audit.list()
  t.equal(rows.length, 5)
  t.equal(rows[0]?.previous_hash, AUDIT_GENESIS)
  for (let i = 1; i < rows.length; i++) t.equal(rows[i]?.previous_hash, rows[i - 1]?.integrity_hash)
  for (const row of rows) {
    const { integrity_hash: hash, ...rest } = row
    t.equal(hashAuditRow(rest), hash)
    t.match(hash, /^[0-9a-f]{64}$/)
  }
  t.match(audit.verify(), { ok: true, rows: 5, keyed_rows: 0 })
})

t.test('the log is append-only: UPDATE and DELETE are refused by the database', async (t) => {
  const { db } = fresh(t, 2)
  t.throws(() => db.prepare("UPDATE audit_log SET actor = 'mallory' WHERE audit_id = 1").run(), /append-only/)
  t.throws(() => db.prepare('DELETE FROM audit_log WHERE audit_id = 2').run(), /append-only/)
})

t.test('list filters and pages', async (t) => {
  const { audit } = fresh(t, 10)
  t.same(audit.list({ actor: 'user-3' }).map((r) => r.audit_id), [3])
  t.same(audit.list({ after: 7 }).map((r) => r.audit_id), [8, 9, 10])
  t.same(audit.list({ limit: 2, after: 2 }).map((r) => r.audit_id), [3, 4])
  t.equal(audit.list({ request_id: 'req-4' })[0]?.success, true)
  t.equal(audit.list({ request_id: 'req-3' })[0]?.success, false)
  t.same(audit.list({ since: '2999-01-01T00:00:00.000Z' }), [])
})

t.test('a hand-edited row is reported as the first bad row', async (t) => {
  const { db, audit } = fresh(t)
  dropTriggers(db)
  db.prepare('UPDATE audit_log SET success = 1 WHERE audit_id = 6').run()
  t.match(audit.verify(), { ok: false, rows: 5, first_bad_row: 6, reason: /integrity_hash/ })
})

t.test('an edited row whose hash was recomputed breaks the next link', async (t) => {
  const { db, audit } = fresh(t)
  dropTriggers(db)
  const row = audit.list({ after: 3, limit: 1 })[0]
  if (row === undefined) throw new Error('no row')
  const { integrity_hash: _, ...rest } = { ...row, actor: 'mallory' }
  db.prepare('UPDATE audit_log SET actor = ?, integrity_hash = ? WHERE audit_id = 4').run('mallory', hashAuditRow(rest))
  t.match(audit.verify(), { ok: false, first_bad_row: 5, reason: /previous_hash/ })
})

t.test('a deleted row is reported by its missing id', async (t) => {
  const { db, audit } = fresh(t)
  dropTriggers(db)
  db.prepare('DELETE FROM audit_log WHERE audit_id = 4').run()
  t.match(audit.verify(), { ok: false, rows: 3, first_bad_row: 4, reason: /missing/ })
})

t.test('reordered rows are detected', async (t) => {
  const { db, audit } = fresh(t)
  dropTriggers(db)
  const swap = db.transaction(() => {
    const a = db.prepare('SELECT * FROM audit_log WHERE audit_id = 7').get() as Record<string, unknown>
    const b = db.prepare('SELECT * FROM audit_log WHERE audit_id = 8').get() as Record<string, unknown>
    const put = db.prepare(`UPDATE audit_log SET timestamp = @timestamp, actor = @actor, action = @action, resource = @resource, success = @success,
      request_id = @request_id, root_request_id = @root_request_id, trace_id = @trace_id, details = @details, previous_hash = @previous_hash,
      integrity_hash = @integrity_hash WHERE audit_id = @target`)
    put.run({ ...b, target: 7 })
    put.run({ ...a, target: 8 })
  })
  swap()
  t.match(audit.verify(), { ok: false, first_bad_row: 7 })
})

t.test('rows removed from the end are detected through the head', async (t) => {
  const { db, audit } = fresh(t)
  dropTriggers(db)
  db.prepare('DELETE FROM audit_log WHERE audit_id >= 9').run()
  t.match(audit.verify(), { ok: false, rows: 8, first_bad_row: 9, reason: /removed from the end/ })
})

t.test('the chain never forks with three processes appending at once', async (t) => {
  const dir = tempDataDir(t)
  openDatabase(dir).close()
  const writers = ['a', 'b', 'c'].map((name) => spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/audit-writer.ts', dir, '150', name], { cwd: ROOT, stdio: 'inherit' }))
  const codes = await Promise.all(writers.map(async (w) => (await once(w, 'exit') as [number])[0]))
  t.same(codes, [0, 0, 0])
  const db = openDatabase(dir)
  t.teardown(() => db.close())
  const audit = new AuditLog(db)
  t.match(audit.verify(), { ok: true, rows: 450 })
  const ids = audit.list({ limit: 1000 }).map((r) => r.audit_id)
  t.same(ids, Array.from({ length: 450 }, (_, i) => i + 1))
  for (const name of ['a', 'b', 'c']) t.equal(audit.list({ actor: name, limit: 1000 }).length, 150)
})

t.test('agent-host audit verify: exit 0 on an intact chain, 1 on a broken one', async (t) => {
  const { db, dir } = fresh(t, 4)
  const lines: string[] = []
  t.equal(await main(['audit', 'verify', '--data-dir', dir], {}, { out: (l) => lines.push(l), err: () => {} }), 0)
  t.match(JSON.parse(lines[0] ?? ''), { ok: true, rows: 4 })
  dropTriggers(db)
  db.prepare("UPDATE audit_log SET resource = 'x' WHERE audit_id = 2").run()
  t.equal(await main(['audit', 'verify'], { DATA_DIR: dir }, { out: (l) => lines.push(l), err: () => {} }), 1)
  t.match(JSON.parse(lines[1] ?? ''), { ok: false, first_bad_row: 2 })
  const errors: string[] = []
  t.equal(await main(['nonsense'], {}, { out: () => {}, err: (l) => errors.push(l) }), 2)
  t.match(errors[0], /unknown command/)
  t.equal(await main([], {}, { out: () => {}, err: () => {} }), 2)
  t.equal(await main(['--help'], {}, { out: () => {}, err: () => {} }), 0)
  t.equal(await main(['--bogus'], {}, { out: () => {}, err: () => {} }), 2)
})

t.test('the CLI runs as its own process', async (t) => {
  const { dir } = fresh(t, 3)
  const child = spawn(process.execPath, [...process.execArgv, 'src/cli.ts', 'audit', 'verify'], { cwd: ROOT, env: { ...process.env, DATA_DIR: dir } })
  let out = ''
  child.stdout.on('data', (c: Buffer) => { out += c.toString() })
  const [code] = await once(child, 'exit') as [number]
  t.equal(code, 0)
  t.match(JSON.parse(out), { ok: true, rows: 3 })
})
