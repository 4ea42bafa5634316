import t from 'tap'
import Database from 'better-sqlite3'
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import { AGENTS, build, envelope, tempDataDir } from '../helper.js'
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { main } from '../../src/commands.js'
import { CHECKPOINT_FILE } from '../../src/storage/audit-checkpoints.js'
import { DB_FILE } from '../../src/storage/sqlite/database.js'
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

t.test('a keyed server booting on a log whose last row is plain says so: the key was just turned on, or the log was made plain, which only a checkpoint kept elsewhere then proves (issue 27, fault 8)', async (t) => {
  const dir = tempDataDir(t)
  const boot = async (env: Record<string, string>): Promise<{ app: FastifyInstance, warnings: string[] }> => {
    const warnings: string[] = []
    const logStream = new Writable({ write (chunk: Buffer, _encoding, done) { warnings.push(...chunk.toString().split('\n').filter((l) => l.includes('"level":40') && l.includes('audit log'))); done() } })
    const app = await buildApp(loadConfig({ DATA_DIR: dir, WORKERS_PER_TYPE: '0', LOG_LEVEL: 'warn', AUDIT_CHECKPOINT_INTERVAL_MS: '0', ...env }), { logStream })
    t.teardown(() => app.close())
    return { app, warnings }
  }
  const unsigned = /AUDIT_KEY is set and no row of the audit log is signed yet: signing starts with this boot/
  const plain = await boot({})
  await plain.app.close()
  t.notMatch(plain.warnings.join('\n'), unsigned)
  const first = await boot({ AUDIT_KEY: KEY })
  t.match(first.warnings, [unsigned], 'the key turned on: the first keyed boot says so')
  const kept = (await first.app.inject({ url: '/v1/audit/checkpoint' })).body
  await first.app.close()
  const second = await boot({ AUDIT_KEY: KEY })
  t.same(second.warnings, [], 'a signed log: nothing to say')
  await second.app.close()

  const db = new Database(join(dir, DB_FILE))
  db.exec('DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete')
  await rechain({ exec: async () => {}, unguard: async () => {}, run: async (text, ...params) => { db.prepare(text).run(...params) }, all: async <T>(text: string, ...params: unknown[]) => db.prepare(text).all(...params) as T[] }, 1)
  db.close()
  rmSync(join(dir, CHECKPOINT_FILE))
  const laundered = await boot({ AUDIT_KEY: KEY })
  t.match(laundered.warnings, [unsigned], 'a log made plain: the next keyed boot says so')
  t.match((await laundered.app.inject({ url: '/v1/audit/verify' })).json(), { ok: true }, 'and then nothing in DATA_DIR tells (the limit)')
  await laundered.app.close()
  const out: string[] = []
  t.equal(await main(['audit', 'verify', '--data-dir', dir, '--checkpoint', kept], { AUDIT_KEY: KEY }, { out: (l) => out.push(l), err: () => {} }), 1, 'a checkpoint kept elsewhere does')
  t.match(JSON.parse(out[0] ?? '{}'), { ok: false, reason: /row \d+ is not the row the checkpoint --checkpoint #1 .* ends with/ })
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
