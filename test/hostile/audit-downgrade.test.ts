import t from 'tap'
import Database from 'better-sqlite3'
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { AGENTS, build, envelope } from '../helper.js'
import { main } from '../../src/commands.js'
import { CHECKPOINT_FILE } from '../../src/storage/audit-checkpoints.js'
import { DB_FILE } from '../../src/storage/database.js'
import { rechain, type RawSql } from '../storage/audit-stores.js'

const KEY = 'k'.repeat(40)

/** `agent-host audit verify --data-dir dir` with this environment: its exit code and verdict. */
async function verify (dir: string, env: Record<string, string>): Promise<{ code: number, verdict: Record<string, unknown> }> {
  const out: string[] = []
  const code = await main(['audit', 'verify', '--data-dir', dir], env, { out: (l) => out.push(l), err: () => {} })
  return { code, verdict: JSON.parse(out[0] ?? '{}') as Record<string, unknown> }
}

// Issue 27, fault 8: whoever can write DATA_DIR recomputed a keyed server's log as a plain SHA-256
// chain and deleted the checkpoint file, and `AUDIT_KEY=… agent-host audit verify` said ok.
t.test('a keyed server\'s checkpoint file deleted, or its log recomputed without the key, fails verify with AUDIT_KEY: the route and the command line (issue 27, fault 8)', async (t) => {
  const app = await build(t, { AUDIT_KEY: KEY, WORKERS_PER_TYPE: '0', AUDIT_CHECKPOINT_INTERVAL_MS: '0' })
  const dir = app.config.DATA_DIR
  for (let i = 0; i < 2; i++) t.equal((await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo) })).statusCode, 200)
  t.match((await app.inject({ url: '/v1/audit/verify' })).json(), { ok: true, rows: 3, keyed_rows: 3, checkpoints_checked: 1 })
  rmSync(join(dir, CHECKPOINT_FILE))
  t.match((await app.inject({ url: '/v1/audit/verify' })).json(), { ok: false, rows: 3, first_bad_row: 1, reason: /row 1 is a signed boot, after which the server wrote a signed checkpoint to .*, but no signed checkpoint was given/ }, 'the route')
  await app.close()
  t.match(await verify(dir, { AUDIT_KEY: KEY }), { code: 0, verdict: { ok: true, rows: 4 } }, 'the shutdown wrote a signed checkpoint again')

  const db = new Database(join(dir, DB_FILE))
  const sql: RawSql = {
    exec: async (text) => { db.exec(text) },
    run: async (text, ...params) => { db.prepare(text).run(...params) },
    all: async <T>(text: string, ...params: unknown[]) => db.prepare(text).all(...params) as T[],
    unguard: async () => { db.exec('DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete') }
  }
  await sql.unguard()
  await sql.run("UPDATE audit_log SET actor = 'mallory' WHERE audit_id = 2")
  await rechain(sql, 1)
  db.close()
  rmSync(join(dir, CHECKPOINT_FILE))
  t.match(await verify(dir, { AUDIT_KEY: KEY }), { code: 1, verdict: { ok: false, keyed_rows: 0, reason: /no row is signed with an audit key this verifier holds, and AUDIT_KEY is set/ } }, 'the command line')
  t.match(await verify(dir, {}), { code: 0, verdict: { ok: true, rows: 4, keyed_rows: 0 } }, 'without the key nothing tells (the threat model)')
})

// Issue 27, fault 2, at another cut of the audit path: a bus event's key is kept to 256 characters in its audit row.
t.test('a bus event key cut for its audit row is never cut inside a surrogate pair', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const key = `${'k'.repeat(255)}\u{1F600}tail`
  const res = await app.inject({ method: 'POST', url: '/v1/bus/events', payload: { event: { type: 'x.y', key, data: {}, visibility: 'a2a' } } })
  t.equal(res.statusCode, 202, res.body)
  const [row] = await app.audit.list({ action: 'bus.publish' })
  t.equal(row?.details?.key, 'k'.repeat(255), 'the pair is left out whole')
})
