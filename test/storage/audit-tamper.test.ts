import t from 'tap'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Db } from '../../src/storage/database.js'
import { openDatabase } from '../../src/storage/database.js'
import { AuditLog, hashAuditRow, type AuditRow, type AuditVerification } from '../../src/storage/audit.js'
import { AuditKeyring } from '../../src/storage/audit-key.js'
import { appendCheckpoint, CHECKPOINT_FILE, readCheckpoints } from '../../src/storage/audit-checkpoints.js'
import { tempDataDir, type Teardown } from '../helper.js'

// Fault 1 of issue 16, as an operator with write access to DATA_DIR (but not to AUDIT_KEY) would try
// it: every case, on a keyed log and on a plain one, with the verdict each must get. Ten rows are
// covered by a checkpoint, two more were written after it.

const KEY = 'k'.repeat(40)

interface Log { db: Db, dir: string, keyring: AuditKeyring }

function fresh (t: Teardown, keyed: boolean): Log {
  const dir = tempDataDir(t)
  const db = openDatabase(dir)
  t.teardown(() => { if (db.open) db.close() })
  const keyring = new AuditKeyring(keyed ? KEY : '')
  const audit = new AuditLog(db, keyring)
  for (let i = 1; i <= 12; i++) {
    audit.append({ actor: `key-${i}`, action: 'assist', resource: 'agent:echo', success: i % 3 !== 0, claimed_user: `user-${i}`, details: { i } })
    if (i === 10) appendCheckpoint(dir, audit.checkpoint())
  }
  db.exec('DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete')
  return { db, dir, keyring }
}

function verify (log: Log): AuditVerification {
  return new AuditLog(log.db, log.keyring, { readOnly: true }).verify(readCheckpoints(join(log.dir, CHECKPOINT_FILE)).checkpoints)
}

const rows = (db: Db): AuditRow[] => (db.prepare('SELECT * FROM audit_log ORDER BY audit_id').all() as Array<Omit<AuditRow, 'success' | 'details'> & { success: number, details: string | null }>)
  .map((r) => ({ ...r, success: r.success === 1, details: r.details === null ? null : JSON.parse(r.details) as Record<string, unknown> }))

/** What someone without the key can do after changing rows: rewrite them from `from` on as a plain SHA-256 chain, renumbered, and move the head. */
function rechain (db: Db, from: number): void {
  const all = rows(db)
  db.prepare('DELETE FROM audit_log WHERE audit_id >= ?').run(from)
  let previous = all.find((r) => r.audit_id === from - 1)?.integrity_hash ?? '0'.repeat(64)
  const insert = db.prepare(`INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, claimed_user, request_id, root_request_id, trace_id, details, key_id, previous_hash, integrity_hash)
    VALUES (@audit_id, @timestamp, @actor, @action, @resource, @success, @claimed_user, @request_id, @root_request_id, @trace_id, @details, @key_id, @previous_hash, @integrity_hash)`)
  all.filter((r) => r.audit_id >= from).forEach((row, i) => {
    const { integrity_hash: _old, ...rest } = row
    const unhashed = { ...rest, audit_id: from + i, key_id: null, previous_hash: previous }
    const hash = hashAuditRow(unhashed) as string
    insert.run({ ...unhashed, success: unhashed.success ? 1 : 0, details: unhashed.details === null ? null : JSON.stringify(unhashed.details), integrity_hash: hash })
    previous = hash
  })
  const last = rows(db).at(-1)
  db.prepare('UPDATE audit_head SET audit_id = ?, integrity_hash = ? WHERE id = 1').run(last?.audit_id ?? 0, last?.integrity_hash ?? '0'.repeat(64))
}

/** Each attack, and what verify must say about it on a keyed log and on a plain one (undefined: it passes, as the threat model says). */
const CASES: Array<{ name: string, tamper: (log: Log) => void, keyed: RegExp | undefined, plain: RegExp | undefined, row?: number }> = [
  { name: 'nothing (intact)', tamper: () => {}, keyed: undefined, plain: undefined },
  {
    name: 'rows cut from the end, the head moved back',
    tamper: ({ db }) => { db.prepare('DELETE FROM audit_log WHERE audit_id > 8').run(); db.prepare('UPDATE audit_head SET audit_id = 8, integrity_hash = (SELECT integrity_hash FROM audit_log WHERE audit_id = 8) WHERE id = 1').run() },
    keyed: /rows 9\.\.10 are missing: the checkpoint .* counted 10/,
    plain: /rows 9\.\.10 are missing: the checkpoint .* counted 10/,
    row: 9
  },
  {
    name: 'every row and the head deleted',
    tamper: ({ db }) => { db.exec('DELETE FROM audit_log; DELETE FROM audit_head') },
    keyed: /rows 1\.\.10 are missing/,
    plain: /rows 1\.\.10 are missing/,
    row: 1
  },
  {
    name: 'a row edited and the chain recomputed',
    tamper: ({ db }) => { db.prepare("UPDATE audit_log SET actor = 'someone-else' WHERE audit_id = 5").run(); rechain(db, 5) },
    keyed: /row 5 is not signed, after signed rows/,
    plain: /row 10 is not the row the checkpoint .* ends with: rows up to 10 were rewritten/,
    row: 5
  },
  {
    name: 'a row inserted and the chain recomputed',
    tamper: ({ db }) => {
      db.prepare('UPDATE audit_log SET audit_id = audit_id + 100 WHERE audit_id >= 6').run()
      db.prepare("INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, previous_hash, integrity_hash) VALUES (105, '2026-01-01T00:00:00.000Z', 'ghost', 'assist', 'agent:echo', 1, '', '')").run()
      db.prepare('UPDATE audit_log SET audit_id = audit_id - 99 WHERE audit_id >= 105').run()
      rechain(db, 6)
    },
    keyed: /row 6 is not signed, after signed rows/,
    plain: /row 10 is not the row the checkpoint/,
    row: 6
  },
  {
    name: 'a row deleted and the chain recomputed',
    tamper: ({ db }) => { db.prepare('DELETE FROM audit_log WHERE audit_id = 4').run(); db.prepare('UPDATE audit_log SET audit_id = audit_id - 1 WHERE audit_id > 4').run(); rechain(db, 4) },
    keyed: /row 4 is not signed, after signed rows/,
    plain: /row 10 is not the row the checkpoint/,
    row: 4
  },
  {
    name: 'a row edited, signed or not, and nothing recomputed',
    tamper: ({ db }) => { db.prepare("UPDATE audit_log SET resource = 'agent:other' WHERE audit_id = 7").run() },
    keyed: /row 7: integrity_hash does not match the row \(it was changed by someone without the audit key\)/,
    plain: /row 7: integrity_hash does not match the row/,
    row: 7
  },
  {
    name: 'success 0 made 2 (read back as false: the same hash)',
    tamper: ({ db }) => { db.prepare('UPDATE audit_log SET success = 2 WHERE audit_id = 3').run() },
    keyed: /row 3: success is 2, not 0 or 1/,
    plain: /row 3: success is 2, not 0 or 1/,
    row: 3
  },
  {
    name: 'the head table dropped',
    tamper: ({ db }) => { db.exec('DROP TABLE audit_head') },
    keyed: /the audit_head table cannot be read/,
    plain: /the audit_head table cannot be read/
  },
  {
    name: 'the whole log rewritten from the first row',
    tamper: ({ db }) => { db.prepare("UPDATE audit_log SET details = '{\"i\":0}' WHERE audit_id = 1").run(); rechain(db, 1) },
    keyed: /row 1: integrity_hash does not match|row 10 is not the row the checkpoint/,
    plain: /row 10 is not the row the checkpoint/
  },
  {
    name: 'a row edited, the chain recomputed, and the checkpoint file rewritten to match',
    tamper: ({ db, dir }) => {
      db.prepare("UPDATE audit_log SET actor = 'someone-else' WHERE audit_id = 5").run()
      rechain(db, 5)
      const head = db.prepare('SELECT integrity_hash FROM audit_log WHERE audit_id = 10').get() as { integrity_hash: string }
      const file = join(dir, CHECKPOINT_FILE)
      const line = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>
      writeFileSync(file, `${JSON.stringify({ ...line, head: head.integrity_hash })}\n`)
    },
    keyed: /the checkpoint .* has a bad signature: it was edited/,
    plain: undefined
  },
  {
    name: 'rows after the last checkpoint cut, the head moved back (what the checkpoint interval leaves open)',
    tamper: ({ db }) => { db.prepare('DELETE FROM audit_log WHERE audit_id > 10').run(); db.prepare('UPDATE audit_head SET audit_id = 10, integrity_hash = (SELECT integrity_hash FROM audit_log WHERE audit_id = 10) WHERE id = 1').run() },
    keyed: undefined,
    plain: undefined
  }
]

for (const { name, tamper, keyed, plain, row } of CASES) {
  for (const mode of ['keyed', 'plain'] as const) {
    t.test(`${mode} log: ${name}`, async (t) => {
      const log = fresh(t, mode === 'keyed')
      tamper(log)
      const expected = mode === 'keyed' ? keyed : plain
      const verdict = verify(log)
      if (expected === undefined) {
        t.equal(verdict.ok, true, 'passes (see the threat model)')
        return
      }
      t.equal(verdict.ok, false, 'detected')
      t.match(verdict.reason, expected)
      if (row !== undefined && !(mode === 'plain' && /rewritten/.test(String(verdict.reason)))) t.equal(verdict.first_bad_row, row, `the first bad row is ${row}`)
    })
  }
}

t.test('a keyed log verified without the key fails, naming the key it needs; with a retired key after a rotation it passes', async (t) => {
  const log = fresh(t, true)
  const without = new AuditLog(log.db, new AuditKeyring(''), { readOnly: true }).verify()
  t.match(without, { ok: false, first_bad_row: 1, reason: /signed by key [0-9a-f]{16}, which this verifier does not hold/ })
  const next = 'n'.repeat(40)
  const rotated = new AuditLog(log.db, new AuditKeyring(next, [KEY]))
  rotated.append({ actor: 'key-13', action: 'assist', resource: 'agent:echo', success: true })
  t.match(new AuditLog(log.db, new AuditKeyring(next, [KEY]), { readOnly: true }).verify(), { ok: true, rows: 13, keyed_rows: 13 })
  t.match(new AuditLog(log.db, new AuditKeyring(next), { readOnly: true }).verify(), { ok: false, first_bad_row: 1 }, 'the old key is still needed for the old rows')
  t.throws(() => new AuditLog(log.db, new AuditKeyring('')), { code: 'AH_ERR_AUDIT_KEY_MISSING' }, 'a process without a key may not append to a keyed log')
})

t.test('verify reports its speed and streams the log', async (t) => {
  const log = fresh(t, true)
  const verdict = verify(log)
  t.match(verdict, { ok: true, rows: 12, keyed_rows: 12, checkpoints_checked: 1 })
  t.ok(verdict.seconds >= 0 && verdict.rows_per_second > 0)
})
