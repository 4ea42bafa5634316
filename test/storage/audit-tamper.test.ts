import t, { type Test } from 'tap'
import { appendFileSync, copyFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { AUDIT_BOOT, hashAuditRow, type AuditRow, type AuditVerification } from '../../src/storage/audit.js'
import { AuditKeyring } from '../../src/storage/audit-key.js'
import { appendCheckpoint, CHECKPOINT_FILE, readCheckpoints } from '../../src/storage/audit-checkpoints.js'
import { main } from '../../src/commands.js'
import { tempDataDir } from '../helper.js'
import { AUDIT_STORES, rechain, rows, type AuditSubject, type RawSql } from './audit-stores.js'

// Fault 1 of issue 16, as an operator with write access to DATA_DIR or to the database (but not to
// AUDIT_KEY) would try it: every case, on a keyed log and on a plain one, on SQLite and on
// PostgreSQL (a superuser gets past the append-only triggers with ALTER TABLE ... DISABLE TRIGGER
// ALL), with the verdict each must get. Ten rows are covered by a checkpoint, two more were
// written after it.

const KEY = 'k'.repeat(40)

interface Log { s: AuditSubject, sql: RawSql, dir: string, keyring: AuditKeyring }

async function fresh (t: Test, make: (t: Test) => Promise<AuditSubject | undefined>, keyed: boolean): Promise<Log | undefined> {
  const s = await make(t)
  if (s === undefined) return undefined
  const keyring = new AuditKeyring(keyed ? KEY : '')
  const audit = await s.open(keyring)
  for (let i = 1; i <= 12; i++) {
    await audit.append({ actor: `key-${i}`, action: 'assist', resource: 'agent:echo', success: i % 3 !== 0, claimed_user: `user-${i}`, details: { i } })
    if (i === 10) appendCheckpoint(s.dir, await audit.checkpoint())
  }
  await s.sql.unguard()
  return { s, sql: s.sql, dir: s.dir, keyring }
}

/** `agent-host audit verify` on the subject's log, with `key` as AUDIT_KEY; its exit code and verdict. */
async function cli (s: AuditSubject, key: string, errors: string[] = [], args: string[] = []): Promise<{ code: number, verdict: AuditVerification }> {
  const out: string[] = []
  const code = await main(['audit', 'verify', ...args], { DATA_DIR: s.dir, AUDIT_KEY: key, ...s.database }, { out: (l) => out.push(l), err: (l) => errors.push(l) })
  return { code, verdict: JSON.parse(out[0] ?? '{}') as AuditVerification }
}

async function verify (log: Log): Promise<AuditVerification> {
  return await (await log.s.open(log.keyring, { readOnly: true })).verify(readCheckpoints(join(log.dir, CHECKPOINT_FILE)).checkpoints)
}

/** Each attack, and what verify must say about it on a keyed log and on a plain one (undefined: it passes, as the threat model says). */
const CASES: Array<{ name: string, tamper: (log: Log) => Promise<void>, keyed: RegExp | undefined, plain: RegExp | undefined, row?: number }> = [
  { name: 'nothing (intact)', tamper: async () => {}, keyed: undefined, plain: undefined },
  {
    name: 'rows cut from the end, the head moved back',
    tamper: async ({ sql }) => { await sql.run('DELETE FROM audit_log WHERE audit_id > 8'); await sql.run('UPDATE audit_head SET audit_id = 8, integrity_hash = (SELECT integrity_hash FROM audit_log WHERE audit_id = 8) WHERE id = 1') },
    keyed: /rows 9\.\.10 are missing: the checkpoint .* counted 10/,
    plain: /rows 9\.\.10 are missing: the checkpoint .* counted 10/,
    row: 9
  },
  {
    name: 'every row and the head deleted',
    tamper: async ({ sql }) => { await sql.exec('DELETE FROM audit_log; DELETE FROM audit_head') },
    keyed: /rows 1\.\.10 are missing/,
    plain: /rows 1\.\.10 are missing/,
    row: 1
  },
  {
    name: 'the log and its head truncated (TRUNCATE on PostgreSQL)',
    tamper: async ({ s, sql }) => { await sql.exec(s.kind === 'postgres' ? 'TRUNCATE audit_log, audit_head' : 'DELETE FROM audit_log; DELETE FROM audit_head') },
    keyed: /rows 1\.\.10 are missing/,
    plain: /rows 1\.\.10 are missing/,
    row: 1
  },
  {
    name: 'a row edited and the chain recomputed',
    tamper: async ({ sql }) => { await sql.run("UPDATE audit_log SET actor = 'someone-else' WHERE audit_id = 5"); await rechain(sql, 5) },
    keyed: /row 5 is not signed, after signed rows/,
    plain: /row 10 is not the row the checkpoint .* ends with: rows up to 10 were rewritten/,
    row: 5
  },
  {
    name: 'a row inserted and the chain recomputed',
    tamper: async ({ sql }) => {
      await sql.run('UPDATE audit_log SET audit_id = audit_id + 100 WHERE audit_id >= 6')
      await sql.run("INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, previous_hash, integrity_hash) VALUES (105, '2026-01-01T00:00:00.000Z', 'ghost', 'assist', 'agent:echo', 1, '', '')")
      await sql.run('UPDATE audit_log SET audit_id = audit_id - 99 WHERE audit_id >= 105')
      await rechain(sql, 6)
    },
    keyed: /row 6 is not signed, after signed rows/,
    plain: /row 10 is not the row the checkpoint/,
    row: 6
  },
  {
    name: 'a row deleted and the chain recomputed',
    tamper: async ({ sql }) => { await sql.run('DELETE FROM audit_log WHERE audit_id = 4'); await sql.run('UPDATE audit_log SET audit_id = audit_id - 1 WHERE audit_id > 4'); await rechain(sql, 4) },
    keyed: /row 4 is not signed, after signed rows/,
    plain: /row 10 is not the row the checkpoint/,
    row: 4
  },
  {
    name: 'a row edited, signed or not, and nothing recomputed',
    tamper: async ({ sql }) => { await sql.run("UPDATE audit_log SET resource = 'agent:other' WHERE audit_id = 7") },
    keyed: /row 7: integrity_hash does not match the row \(it was changed by someone without the audit key\)/,
    plain: /row 7: integrity_hash does not match the row/,
    row: 7
  },
  {
    name: 'a row forged at the end without the key (naming the last row\'s key), the head moved to it',
    tamper: async ({ sql }) => {
      const last = (await rows(sql)).at(-1) as AuditRow
      const forged = { ...last, audit_id: 13, actor: 'mallory', previous_hash: last.integrity_hash }
      const { integrity_hash: _last, ...unhashed } = forged
      const hash = hashAuditRow({ ...unhashed, key_id: null }) as string
      await sql.run('INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, claimed_user, details, key_id, previous_hash, integrity_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
        13, forged.timestamp, forged.actor, forged.action, forged.resource, forged.success ? 1 : 0, forged.claimed_user, JSON.stringify(forged.details), forged.key_id, forged.previous_hash, hash)
      await sql.run('UPDATE audit_head SET audit_id = 13, integrity_hash = ? WHERE id = 1', hash)
    },
    keyed: /row 13: integrity_hash does not match the row \(it was changed by someone without the audit key\)/,
    plain: undefined,
    row: 13
  },
  {
    name: 'success 0 made 2 (read back as false: the same hash)',
    tamper: async ({ sql }) => { await sql.run('UPDATE audit_log SET success = 2 WHERE audit_id = 3') },
    keyed: /row 3: success is 2, not 0 or 1/,
    plain: /row 3: success is 2, not 0 or 1/,
    row: 3
  },
  {
    // issue 27, fault 9: the hash covers the parsed details, where the last of two equal keys wins; json_extract reads the first
    name: 'details rewritten with a repeated key, the original last (the parsed value and its hash unchanged)',
    tamper: async ({ sql }) => { await sql.run('UPDATE audit_log SET details = ? WHERE audit_id = 7', '{"i":666,"i":7}') },
    keyed: /row 7: details are not a JSON object in the form the host writes them \(a key repeated, spacing or escapes changed\): they were edited/,
    plain: /row 7: details are not a JSON object in the form the host writes them/,
    row: 7
  },
  {
    name: 'details respaced and a character escaped (the same value)',
    tamper: async ({ sql }) => { await sql.run('UPDATE audit_log SET details = ? WHERE audit_id = 4', '{ "\\u0069": 4 }') },
    keyed: /row 4: details are not a JSON object in the form the host writes them/,
    plain: /row 4: details are not a JSON object in the form the host writes them/,
    row: 4
  },
  {
    name: 'a row numbered 0 put before the first',
    tamper: async ({ sql }) => { await sql.run("INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, previous_hash, integrity_hash) VALUES (0, '2026-01-01T00:00:00.000Z', 'ghost', 'assist', 'agent:echo', 1, '', '')") },
    keyed: /row 0 is out of sequence/,
    plain: /row 0 is out of sequence/
  },
  {
    name: 'the head table dropped',
    tamper: async ({ sql }) => { await sql.exec('DROP TABLE audit_head') },
    keyed: /the audit_head table cannot be read/,
    plain: /the audit_head table cannot be read/
  },
  {
    name: 'the log table dropped',
    tamper: async ({ sql }) => { await sql.exec('DROP TABLE audit_log') },
    keyed: /the audit_log table cannot be read/,
    plain: /the audit_log table cannot be read/
  },
  {
    name: 'the whole log rewritten from the first row',
    tamper: async ({ sql }) => { await sql.run("UPDATE audit_log SET details = '{\"i\":0}' WHERE audit_id = 1"); await rechain(sql, 1) },
    keyed: /row 1: integrity_hash does not match|row 10 is not the row the checkpoint/,
    plain: /row 10 is not the row the checkpoint/
  },
  {
    name: 'a row edited, the chain recomputed, and the checkpoint file rewritten to match',
    tamper: async ({ sql, dir }) => {
      await sql.run("UPDATE audit_log SET actor = 'someone-else' WHERE audit_id = 5")
      await rechain(sql, 5)
      const [head] = await sql.all<{ integrity_hash: string }>('SELECT integrity_hash FROM audit_log WHERE audit_id = 10')
      const file = join(dir, CHECKPOINT_FILE)
      const line = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>
      writeFileSync(file, `${JSON.stringify({ ...line, head: head?.integrity_hash })}\n`)
    },
    keyed: /the checkpoint .* has a bad signature: it was edited/,
    plain: undefined
  },
  {
    name: 'rows after the last checkpoint cut, the head moved back (what the checkpoint interval leaves open)',
    tamper: async ({ sql }) => { await sql.run('DELETE FROM audit_log WHERE audit_id > 10'); await sql.run('UPDATE audit_head SET audit_id = 10, integrity_hash = (SELECT integrity_hash FROM audit_log WHERE audit_id = 10) WHERE id = 1') },
    keyed: undefined,
    plain: undefined
  }
]

for (const [kind, make] of Object.entries(AUDIT_STORES)) {
  t.test(`${kind}: tampering`, async (t) => {
    for (const { name, tamper, keyed, plain, row } of CASES) {
      for (const mode of ['keyed', 'plain'] as const) {
        t.test(`${mode} log: ${name}`, async (t) => {
          const log = await fresh(t, make, mode === 'keyed')
          if (log === undefined) return
          await tamper(log)
          const expected = mode === 'keyed' ? keyed : plain
          const verdict = await verify(log)
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
      const log = await fresh(t, make, true)
      if (log === undefined) return
      const { s } = log
      const without = await (await s.open(new AuditKeyring(''), { readOnly: true })).verify()
      t.match(without, { ok: false, first_bad_row: 1, reason: /signed by key [0-9a-f]{16}, which this verifier does not hold/ })
      const next = 'n'.repeat(40)
      const rotated = await s.open(new AuditKeyring(next, [KEY]))
      await rotated.append({ actor: 'key-13', action: 'assist', resource: 'agent:echo', success: true })
      t.match(await (await s.open(new AuditKeyring(next, [KEY]), { readOnly: true })).verify(), { ok: true, rows: 13, keyed_rows: 13 })
      t.match(await (await s.open(new AuditKeyring(next), { readOnly: true })).verify(), { ok: false, first_bad_row: 1 }, 'the old key is still needed for the old rows')
      await t.rejects(s.open(new AuditKeyring('')), { code: 'AH_ERR_AUDIT_KEY_MISSING' }, 'a process without a key may not append to a keyed log')
    })

    t.test('a checkpoint signed by a key the verifier does not hold fails before any row is read', async (t) => {
      const log = await fresh(t, make, true)
      if (log === undefined) return
      const verdict = await (await log.s.open(new AuditKeyring('o'.repeat(40)), { readOnly: true })).verify(readCheckpoints(join(log.dir, CHECKPOINT_FILE)).checkpoints)
      t.match(verdict, { ok: false, rows: 0, checkpoints_checked: 0, reason: /the checkpoint .* is signed by key [0-9a-f]{16}, which this verifier does not hold/ })
    })

    t.test('verify reports its speed and streams the log', async (t) => {
      const log = await fresh(t, make, true)
      if (log === undefined) return
      const verdict = await verify(log)
      t.match(verdict, { ok: true, rows: 12, keyed_rows: 12, checkpoints_checked: 1 })
      t.ok(verdict.seconds >= 0 && verdict.rows_per_second > 0)
    })

    t.test('a checkpoint file line that is not a checkpoint is a fault, and the rows are still walked', async (t) => {
      const log = await fresh(t, make, true)
      if (log === undefined) return
      appendFileSync(join(log.dir, CHECKPOINT_FILE), 'not a checkpoint\n')
      await log.sql.run("UPDATE audit_log SET resource = 'agent:other' WHERE audit_id = 7")
      const { code, verdict } = await cli(log.s, KEY)
      t.equal(code, 1)
      t.match(verdict, { ok: false, reason: /audit-checkpoints\.jsonl:2 is not a checkpoint/, fault_count: 2, faults: [{}, { row: 7 }] })
    })
  })

  // Issue 27, fault 8: whoever can write DATA_DIR (or the database) recomputes a keyed log as a
  // plain one, forges a row, moves the head and deletes the checkpoint file. With the key, the
  // verifier holds the log to what a keyed server leaves: signed rows, and after a signed boot row
  // a signed checkpoint.
  t.test(`${kind}: a keyed log made plain, or stripped of its checkpoints (issue 27, fault 8)`, async (t) => {
    /** A log as a keyed server leaves it: its signed boot row, a checkpoint, five rows, another checkpoint. */
    async function booted (t: Test): Promise<AuditSubject | undefined> {
      const s = await make(t)
      if (s === undefined) return undefined
      const audit = await s.open(new AuditKeyring(KEY))
      await audit.append({ ...AUDIT_BOOT, resource: 'instance-1', success: true, details: { version: '1.0.0' } })
      appendCheckpoint(s.dir, await audit.checkpoint())
      for (let i = 1; i <= 5; i++) await audit.append({ actor: `key-${i}`, action: 'assist', resource: 'agent:echo', success: true, claimed_user: `user-${i}` })
      appendCheckpoint(s.dir, await audit.checkpoint())
      await s.sql.unguard()
      return s
    }

    t.test('every row recomputed without a key, a row forged, the head moved and the checkpoint file deleted: a failure with AUDIT_KEY', async (t) => {
      const s = await booted(t)
      if (s === undefined) return
      await rechain(s.sql, 1)
      const last = (await rows(s.sql)).at(-1) as AuditRow
      const { integrity_hash: _last, ...forged } = { ...last, audit_id: 7, actor: 'mallory', previous_hash: last.integrity_hash }
      const hash = hashAuditRow(forged) as string
      await s.sql.run('INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, claimed_user, previous_hash, integrity_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
        7, forged.timestamp, forged.actor, forged.action, forged.resource, 1, forged.claimed_user, forged.previous_hash, hash)
      await s.sql.run('UPDATE audit_head SET audit_id = 7, integrity_hash = ? WHERE id = 1', hash)
      rmSync(join(s.dir, CHECKPOINT_FILE))
      const keyed = await cli(s, KEY)
      t.equal(keyed.code, 1)
      t.match(keyed.verdict, { ok: false, rows: 7, keyed_rows: 0, fault_count: 1, reason: /no row is signed with an audit key this verifier holds, and AUDIT_KEY is set/ })
      const errors: string[] = []
      t.equal((await cli(s, '', errors)).code, 0, 'without the key nothing tells (the threat model)')
      t.match(errors, [/7 rows are not signed/])
    })

    t.test('every row and the head deleted, and the checkpoint file: a failure with AUDIT_KEY', async (t) => {
      const s = await booted(t)
      if (s === undefined) return
      await s.sql.exec('DELETE FROM audit_log; DELETE FROM audit_head')
      rmSync(join(s.dir, CHECKPOINT_FILE))
      t.match(await cli(s, KEY), { code: 1, verdict: { ok: false, rows: 0, reason: /no row is signed/ } })
    })

    t.test('the checkpoint file deleted, emptied or replaced by unsigned checkpoints, the rows intact or cut back: a failure with AUDIT_KEY', async (t) => {
      const s = await booted(t)
      if (s === undefined) return
      const file = join(s.dir, CHECKPOINT_FILE)
      const kept = join(tempDataDir(t), 'kept.jsonl')
      copyFileSync(file, kept)
      t.match(await cli(s, KEY), { code: 0, verdict: { ok: true, rows: 6, keyed_rows: 6, checkpoints_checked: 2 } }, 'intact')
      rmSync(file)
      const gone = /row 1 is a signed boot, after which the server wrote a signed checkpoint to .*audit-checkpoints\.jsonl, but no signed checkpoint was given: the file was removed or emptied/
      t.match(await cli(s, KEY), { code: 1, verdict: { ok: false, rows: 6, first_bad_row: 1, fault_count: 1, reason: gone } }, 'deleted')
      writeFileSync(file, '')
      t.match(await cli(s, KEY), { code: 1, verdict: { reason: gone } }, 'emptied')
      const [head] = await s.sql.all<{ integrity_hash: string }>('SELECT integrity_hash FROM audit_log WHERE audit_id = 6')
      writeFileSync(file, `${JSON.stringify({ rows: 6, head: head?.integrity_hash, at: new Date().toISOString(), key_id: null, signature: null })}\n`)
      t.match(await cli(s, KEY), { code: 1, verdict: { checkpoints_checked: 1, reason: gone } }, 'an unsigned checkpoint does not stand for a signed one')
      t.match(await cli(s, KEY, [], ['--checkpoint-file', kept]), { code: 0, verdict: { ok: true, checkpoints_checked: 3 } }, 'a copy kept elsewhere (with PostgreSQL: another instance\'s file) does')
      rmSync(file)
      await s.sql.run('DELETE FROM audit_log WHERE audit_id > 2')
      await s.sql.run('UPDATE audit_head SET audit_id = 2, integrity_hash = (SELECT integrity_hash FROM audit_log WHERE audit_id = 2) WHERE id = 1')
      t.match(await cli(s, KEY), { code: 1, verdict: { rows: 2, reason: gone } }, 'rows cut back to just after the boot')
    })

    t.test('a keyed log that records no boot (written by the command line or a worker) needs no checkpoint file', async (t) => {
      const s = await make(t)
      if (s === undefined) return
      const audit = await s.open(new AuditKeyring(KEY))
      await audit.append({ actor: 'cli:ada', action: 'key.create', resource: 'k1', success: true })
      t.match(await cli(s, KEY), { code: 0, verdict: { ok: true, rows: 1, keyed_rows: 1, checkpoints_checked: 0 } })
    })
  })
}
