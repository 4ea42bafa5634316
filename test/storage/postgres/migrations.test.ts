import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { migratePostgres, openPostgres, PG_SCHEMA_VERSION } from '../../../src/storage/postgres/database.js'
import { PG_MIGRATIONS } from '../../../src/storage/postgres/migrations.js'
import { pgDatabase } from '../../pg.js'

const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

t.test('a fresh database gets every table; migrating again is a no-op', async (t) => {
  const url = await pgDatabase(t, { empty: true })
  if (url === undefined) return
  const steps: number[] = []
  const pool = await openPostgres(url, { onMigration: (step) => { steps.push(step.version) } })
  t.teardown(async () => { await pool.end() })
  t.same(steps, PG_MIGRATIONS.map((m) => m.version))
  const { rows } = await pool.query<{ tablename: string }>("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
  const tables = rows.map((r) => r.tablename)
  for (const name of ['audit_head', 'audit_log', 'events', 'interactions', 'journal', 'runs', 'schema_migrations', 'session_values', 'sessions', 'tasks', 'api_keys', 'bus_events', 'bus_deliveries', 'a2a_push_configs', 'narrator_state', 'rate_limits']) t.ok(tables.includes(name), name)
  t.same(await migratePostgres(pool), [])
  t.equal(PG_SCHEMA_VERSION, PG_MIGRATIONS.length, 'versions are 1..n')
  // bigint columns come back as numbers
  const started = Date.now()
  // wire_id is the host's to give (step 2): no longer computed from the envelope
  await pool.query("INSERT INTO runs (request_id, envelope_hash, envelope, wire_id, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, started_at) VALUES ('r', 'h', '{\"request_id\":\"w\"}', 'w', 's', 'a', 'm', 'running', 'i', 1, $1)", [started])
  const run = (await pool.query('SELECT run_id, started_at, wire_id FROM runs')).rows[0]
  t.same(run, { run_id: 1, started_at: started, wire_id: 'w' })
})

t.test('the audit log refuses updates, deletes and truncation', async (t) => {
  const url = await pgDatabase(t, { empty: true })
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  await pool.query("INSERT INTO audit_log (audit_id, timestamp, actor, action, resource, success, previous_hash, integrity_hash) VALUES (1, 't', 'a', 'x', 'r', 1, 'p', 'i')")
  await t.rejects(pool.query("UPDATE audit_log SET actor = 'b'"), /append-only/)
  await t.rejects(pool.query('DELETE FROM audit_log'), /append-only/)
  await t.rejects(pool.query('TRUNCATE audit_log'), /append-only/)
})

t.test('a database newer than the code is refused', async (t) => {
  const url = await pgDatabase(t, { empty: true })
  if (url === undefined) return
  const pool = await openPostgres(url)
  await pool.query("INSERT INTO schema_migrations VALUES ($1, 'from the future', 'later')", [PG_SCHEMA_VERSION + 1])
  await pool.end()
  await t.rejects(openPostgres(url), { code: 'AH_ERR_STORAGE_SCHEMA_TOO_NEW', message: new RegExp(`schema version ${PG_SCHEMA_VERSION + 1} but this code knows only up to ${PG_SCHEMA_VERSION}`) })
  t.notMatch(url, /password/)
})

t.test('instances booting together migrate once', async (t) => {
  const url = await pgDatabase(t, { empty: true })
  if (url === undefined) return
  const boots = await Promise.all([1, 2, 3].map(async () => await new Promise<number[]>((resolve, reject) => {
    const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/pg-migrate.ts', url], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
    child.on('error', reject)
    child.on('exit', (code) => { code === 0 ? resolve(JSON.parse(out) as number[]) : reject(new Error(`exit ${String(code)}`)) })
  })))
  t.same(boots.flat().sort((a, b) => a - b), PG_MIGRATIONS.map((m) => m.version), `each step applied by exactly one of ${JSON.stringify(boots)}`)
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.equal((await client.query('SELECT count(*)::int AS n FROM schema_migrations')).rows[0].n, PG_MIGRATIONS.length)
  await client.end()
})
