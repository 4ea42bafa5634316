import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { AUDIT_GENESIS, AUDIT_MAX_FAULTS, hashAuditRow, type AuditStore } from '../../src/storage/audit.js'
import { AuditKeyring } from '../../src/storage/audit-key.js'
import { main } from '../../src/commands.js'
import { AUDIT_STORES, type AuditSubject } from './audit-stores.js'

// One contract, two stores: every test runs against the SQLite log and the PostgreSQL one.

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

async function fresh (t: Test, make: (t: Test) => Promise<AuditSubject | undefined>, rows = 10): Promise<{ s: AuditSubject, audit: AuditStore } | undefined> {
  const s = await make(t)
  if (s === undefined) return undefined
  const audit = await s.open()
  for (let i = 1; i <= rows; i++) await audit.append({ actor: `user-${i}`, action: 'assist', resource: 'agent', success: i % 3 !== 0, request_id: `req-${i}`, details: { i } })
  return { s, audit }
}

for (const [kind, make] of Object.entries(AUDIT_STORES)) {
  t.test(`${kind}: the audit log contract`, async (t) => {
    t.test('rows chain from the genesis value, each hash over its canonical JSON', async (t) => {
      const f = await fresh(t, make, 5)
      if (f === undefined) return
      const rows = await f.audit.list()
      t.equal(rows.length, 5)
      t.equal(rows[0]?.previous_hash, AUDIT_GENESIS)
      for (let i = 1; i < rows.length; i++) t.equal(rows[i]?.previous_hash, rows[i - 1]?.integrity_hash)
      for (const row of rows) {
        const { integrity_hash: hash, ...rest } = row
        t.equal(hashAuditRow(rest), hash)
        t.match(hash, /^[0-9a-f]{64}$/)
      }
      t.match(await f.audit.verify(), { ok: true, rows: 5, keyed_rows: 0 })
      t.equal(await f.audit.count(), 5)
      t.equal(f.audit.keyed, false)
    })

    t.test('an appended row is returned as it is stored: its claimed user cut to 256 characters, absent fields null', async (t) => {
      const f = await fresh(t, make, 0)
      if (f === undefined) return
      const row = await f.audit.append({ actor: 'a', action: 'x', resource: 'r', success: true, claimed_user: 'u'.repeat(300) })
      t.match(row, { audit_id: 1, claimed_user: 'u'.repeat(256), request_id: null, root_request_id: null, trace_id: null, details: null, key_id: null, previous_hash: AUDIT_GENESIS })
      t.same(await f.audit.list(), [row])
    })

    t.test('every text of a row is stored as it is hashed: a lone surrogate or NUL, in any column or in details (keys too), becomes U+FFFD (issue 27, fault 2)', async (t) => {
      const f = await fresh(t, make, 0)
      if (f === undefined) return
      const odd = (name: string): string => `${name}\ud800|\udc00|\u0000|\u{1F600}`
      const clean = (name: string): string => `${name}\ufffd|\ufffd|\ufffd|\u{1F600}`
      const row = await f.audit.append({
        actor: odd('actor'),
        action: odd('action'),
        resource: odd('resource'),
        success: true,
        claimed_user: odd('user'),
        request_id: odd('req'),
        root_request_id: odd('root'),
        trace_id: odd('trace'),
        details: { [odd('key')]: odd('value'), nested: [odd('item'), { [odd('deep')]: 1 }], plain: 'caf\u00e9' }
      })
      t.match(row, { actor: clean('actor'), action: clean('action'), resource: clean('resource'), claimed_user: clean('user'), request_id: clean('req'), root_request_id: clean('root'), trace_id: clean('trace') })
      t.same(row.details, { [clean('key')]: clean('value'), nested: [clean('item'), { [clean('deep')]: 1 }], plain: 'caf\u00e9' })
      t.same(await f.audit.list(), [row], 'what is read back is what was returned')
      t.match(await f.audit.verify(), { ok: true, rows: 1 })
      const [raw] = await f.s.sql.all<{ actor: string }>('SELECT actor FROM audit_log')
      t.equal(raw?.actor, clean('actor'), 'and what the database holds')
    })

    t.test('the claimed user is cut at 256 characters, never inside a surrogate pair (issue 27, fault 2)', async (t) => {
      const f = await fresh(t, make, 0)
      if (f === undefined) return
      const cut = async (user: string): Promise<string | null> => (await f.audit.append({ actor: 'a', action: 'x', resource: 'r', success: true, claimed_user: user })).claimed_user
      t.equal(await cut(`${'a'.repeat(255)}\u{1F600}`), 'a'.repeat(255), 'a pair across the limit is left out whole')
      t.equal(await cut(`${'a'.repeat(254)}\u{1F600}x`), `${'a'.repeat(254)}\u{1F600}`, 'a pair inside the limit is kept')
      t.equal(await cut('\u{1F600}'.repeat(200)), '\u{1F600}'.repeat(128))
      t.match(await f.audit.verify(), { ok: true, rows: 3 })
    })

    t.test('verify reports every bad row: a row that went bad by accident does not hide a real edit after it (issue 27, fault 2)', async (t) => {
      const f = await fresh(t, make)
      if (f === undefined) return
      await f.s.sql.unguard()
      // what a database that stored U+FFFD for a lone surrogate left before the fix
      await f.s.sql.run("UPDATE audit_log SET actor = 'user-3\ufffd' WHERE audit_id = 3")
      await f.s.sql.run("UPDATE audit_log SET resource = 'mallory' WHERE audit_id = 7")
      await f.s.sql.run('UPDATE audit_log SET success = 5 WHERE audit_id = 9')
      const verdict = await f.audit.verify()
      t.match(verdict, { ok: false, rows: 2, rows_read: 10, first_bad_row: 3, reason: /row 3: integrity_hash/, fault_count: 3 })
      t.same(verdict.faults?.map((fault) => fault.row), [3, 7, 9])
      t.match(verdict.faults?.[1], { row: 7, reason: /row 7: integrity_hash does not match/ })
      t.match(verdict.faults?.[2], { row: 9, reason: /row 9: success is 5/ })
      const lines: string[] = []
      t.equal(await main(['audit', 'verify'], { DATA_DIR: f.s.dir, ...f.s.database }, { out: (l) => lines.push(l), err: () => {} }), 1)
      t.same((JSON.parse(lines[0] ?? '{}') as { faults: Array<{ row: number }> }).faults.map((fault) => fault.row), [3, 7, 9], 'the command line lists them too')
    })

    t.test('verify lists at most AUDIT_MAX_FAULTS faults and counts them all', async (t) => {
      const f = await fresh(t, make, AUDIT_MAX_FAULTS + 5)
      if (f === undefined) return
      await f.s.sql.unguard()
      await f.s.sql.run("UPDATE audit_log SET resource = 'mallory'")
      const verdict = await f.audit.verify()
      t.match(verdict, { ok: false, rows: 0, rows_read: AUDIT_MAX_FAULTS + 5, fault_count: AUDIT_MAX_FAULTS + 5 })
      t.equal(verdict.faults?.length, AUDIT_MAX_FAULTS)
    })

    t.test('the log is append-only: UPDATE and DELETE are refused by the database', async (t) => {
      const f = await fresh(t, make, 2)
      if (f === undefined) return
      await t.rejects(f.s.sql.run("UPDATE audit_log SET actor = 'mallory' WHERE audit_id = 1"), /append-only/)
      await t.rejects(f.s.sql.run('DELETE FROM audit_log WHERE audit_id = 2'), /append-only/)
      if (kind === 'postgres') await t.rejects(f.s.sql.run('TRUNCATE audit_log'), /append-only/)
    })

    t.test('a log opened to be read refuses appends', async (t) => {
      const f = await fresh(t, make, 1)
      if (f === undefined) return
      const reader = await f.s.open(new AuditKeyring(''), { readOnly: true })
      await t.rejects(async () => await reader.append({ actor: 'a', action: 'x', resource: 'r', success: true }), /opened to be read/)
      t.equal(await f.audit.count(), 1)
    })

    t.test('list filters and pages', async (t) => {
      const f = await fresh(t, make, 10)
      if (f === undefined) return
      const { audit } = f
      t.same((await audit.list({ actor: 'user-3' })).map((r) => r.audit_id), [3])
      t.same((await audit.list({ after: 7 })).map((r) => r.audit_id), [8, 9, 10])
      t.same((await audit.list({ limit: 2, after: 2 })).map((r) => r.audit_id), [3, 4])
      t.equal((await audit.list({ request_id: 'req-4' }))[0]?.success, true)
      t.equal((await audit.list({ request_id: 'req-3' }))[0]?.success, false)
      t.same(await audit.list({ since: '2999-01-01T00:00:00.000Z' }), [])
      t.same((await audit.list({ viewer: { owner: 'user-3' } })).map((r) => r.audit_id), [3], 'a viewer: the rows of the actors it sees')
      await audit.append({ actor: 'tenant:acme/k1', action: 'x', resource: 'r', success: true })
      t.same((await audit.list({ viewer: { tenant: 'acme' } })).map((r) => r.audit_id), [11])
      t.equal((await audit.list({ viewer: { tenant: 'default' }, limit: 100 })).length, 10, 'the default tenant\'s: every actor of no other tenant (the route drops the host\'s own)')
      t.same((await audit.list({ since: '2000-01-01', action: 'assist', resource: 'agent', limit: 3 })).map((r) => r.audit_id), [1, 2, 3])
    })

    t.test('a checkpoint counts the rows and names the head; signed with the key, plain without', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      t.match(await (await s.open()).checkpoint(), { rows: 0, head: AUDIT_GENESIS, key_id: null, signature: null })
      const keyring = new AuditKeyring('k'.repeat(40))
      const audit = await s.open(keyring)
      t.equal(audit.keyed, true)
      const row = await audit.append({ actor: 'a', action: 'x', resource: 'r', success: true })
      t.match(await audit.checkpoint(), { rows: 1, head: row.integrity_hash, key_id: keyring.current?.id, signature: /^[0-9a-f]{64}$/ })
    })

    t.test('a checkpoint of no rows holds only for a log that had none: it names the genesis value', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const audit = await s.open()
      const empty = { rows: 0, at: '', key_id: null, signature: null }
      t.match(await audit.verify([{ ...empty, head: AUDIT_GENESIS, source: 'genesis' }]), { ok: true, rows: 0, checkpoints_checked: 1 })
      t.match(await audit.verify([{ ...empty, head: 'f'.repeat(64), source: 'forged' }]), { ok: false, rows: 0, reason: 'the checkpoint forged is not of an empty log' })
    })

    t.test('a hand-edited row is reported as the first bad row', async (t) => {
      const f = await fresh(t, make)
      if (f === undefined) return
      await f.s.sql.unguard()
      await f.s.sql.run('UPDATE audit_log SET success = 1 WHERE audit_id = 6')
      t.match(await f.audit.verify(), { ok: false, rows: 5, first_bad_row: 6, reason: /integrity_hash/ })
    })

    t.test('an edited row whose hash was recomputed breaks the next link', async (t) => {
      const f = await fresh(t, make)
      if (f === undefined) return
      await f.s.sql.unguard()
      const row = (await f.audit.list({ after: 3, limit: 1 }))[0]
      if (row === undefined) throw new Error('no row')
      const { integrity_hash: _, ...rest } = { ...row, actor: 'mallory' }
      await f.s.sql.run('UPDATE audit_log SET actor = ?, integrity_hash = ? WHERE audit_id = 4', 'mallory', hashAuditRow(rest))
      t.match(await f.audit.verify(), { ok: false, first_bad_row: 5, reason: /previous_hash/ })
    })

    t.test('a deleted row is reported by its missing id', async (t) => {
      const f = await fresh(t, make)
      if (f === undefined) return
      await f.s.sql.unguard()
      await f.s.sql.run('DELETE FROM audit_log WHERE audit_id = 4')
      t.match(await f.audit.verify(), { ok: false, rows: 3, first_bad_row: 4, reason: /missing/ })
    })

    t.test('reordered rows are detected', async (t) => {
      const f = await fresh(t, make)
      if (f === undefined) return
      await f.s.sql.unguard()
      const [a, b] = await f.s.sql.all<Record<string, unknown>>('SELECT * FROM audit_log WHERE audit_id IN (7, 8) ORDER BY audit_id')
      const columns = ['timestamp', 'actor', 'action', 'resource', 'success', 'request_id', 'root_request_id', 'trace_id', 'details', 'previous_hash', 'integrity_hash']
      const put = `UPDATE audit_log SET ${columns.map((c) => `${c} = ?`).join(', ')} WHERE audit_id = ?`
      await f.s.sql.run(put, ...columns.map((c) => b?.[c]), 7)
      await f.s.sql.run(put, ...columns.map((c) => a?.[c]), 8)
      t.match(await f.audit.verify(), { ok: false, first_bad_row: 7 })
    })

    t.test('rows removed from the end are detected through the head', async (t) => {
      const f = await fresh(t, make)
      if (f === undefined) return
      await f.s.sql.unguard()
      await f.s.sql.run('DELETE FROM audit_log WHERE audit_id >= 9')
      t.match(await f.audit.verify(), { ok: false, rows: 8, first_bad_row: 9, reason: /removed from the end/ })
    })

    t.test('the chain never forks with three processes appending at once', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const key = 'w'.repeat(40)
      const writers = ['a', 'b', 'c'].map((name) => {
        const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/audit-writer.ts', s.target, '150', name, key], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] })
        const ready = new Promise<void>((resolve, reject) => {
          child.stdout.once('data', () => { resolve() })
          child.once('exit', (code) => { reject(new Error(`writer ${name} exited (${String(code)}) before it was ready`)) })
        })
        return { child, ready, exit: once(child, 'exit') }
      })
      await Promise.all(writers.map(async (w) => await w.ready))
      for (const w of writers) w.child.stdin.write('go\n')
      const codes = await Promise.all(writers.map(async (w) => (await w.exit as [number])[0]))
      t.same(codes, [0, 0, 0])
      const audit = await s.open(new AuditKeyring(key))
      t.match(await audit.verify(), { ok: true, rows: 450, keyed_rows: 450 })
      t.equal(await audit.count(), 450, 'the count is the sum of the appends')
      const rows = await audit.list({ limit: 1000 })
      t.same(rows.map((r) => r.audit_id), Array.from({ length: 450 }, (_, i) => i + 1))
      t.equal(new Set(rows.map((r) => r.previous_hash)).size, 450, 'no two rows share a previous_hash')
      for (const name of ['a', 'b', 'c']) t.equal((await audit.list({ actor: name, limit: 1000 })).length, 150)
      t.comment(`writers took turns ${rows.filter((r, i) => i > 0 && r.actor !== rows[i - 1]?.actor).length} times`)
    })

    t.test('agent-host audit verify: exit 0 on an intact chain, 1 on a broken one', async (t) => {
      const f = await fresh(t, make, 4)
      if (f === undefined) return
      const lines: string[] = []
      t.equal(await main(['audit', 'verify', '--data-dir', f.s.dir], { ...f.s.database }, { out: (l) => lines.push(l), err: () => {} }), 0)
      t.match(JSON.parse(lines[0] ?? ''), { ok: true, rows: 4 })
      await f.s.sql.unguard()
      await f.s.sql.run("UPDATE audit_log SET resource = 'x' WHERE audit_id = 2")
      t.equal(await main(['audit', 'verify'], { DATA_DIR: f.s.dir, ...f.s.database }, { out: (l) => lines.push(l), err: () => {} }), 1)
      t.match(JSON.parse(lines[1] ?? ''), { ok: false, first_bad_row: 2 })
    })

    t.test('the CLI runs as its own process', async (t) => {
      const f = await fresh(t, make, 3)
      if (f === undefined) return
      const child = spawn(process.execPath, [...process.execArgv, 'src/cli.ts', 'audit', 'verify'], { cwd: ROOT, env: { ...process.env, DATA_DIR: f.s.dir, ...f.s.database } })
      let out = ''
      child.stdout.on('data', (c: Buffer) => { out += c.toString() })
      const [code] = await once(child, 'exit') as [number]
      t.equal(code, 0)
      t.match(JSON.parse(out), { ok: true, rows: 3 })
    })
  })
}

t.test('the command line: unknown commands, usage and bad options', async (t) => {
  const errors: string[] = []
  t.equal(await main(['nonsense'], {}, { out: () => {}, err: (l) => errors.push(l) }), 2)
  t.match(errors[0], /unknown command/)
  t.equal(await main([], {}, { out: () => {}, err: () => {} }), 2)
  t.equal(await main(['--help'], {}, { out: () => {}, err: () => {} }), 0)
  t.equal(await main(['--bogus'], {}, { out: () => {}, err: () => {} }), 2)
})
