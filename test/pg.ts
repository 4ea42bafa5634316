/**
 * PostgreSQL for tests. Each test gets a database of its own on one server:
 * - `PG_TEST_URL` (a superuser's URL; `.ci/run` and `npm run pg:dev` print one), or `none` to skip
 *   them (`npm run test:quick` sets it when it is unset), else
 * - a throwaway server this test process starts (`scripts/pg-cluster.ts`) when the server binaries
 *   are installed, stopped when the process exits, else
 * - none: the PostgreSQL tests are skipped, and say so loudly. With `AGENT_HOST_REQUIRE_PG=1`
 *   (`.ci/run`) a skip is a failure.
 */
import tap, { type Test } from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import pg from 'pg'
import { openPostgres } from '../src/storage/postgres/database.js'
import { PG_MIGRATIONS } from '../src/storage/postgres/migrations.js'
import { serverBinaries, startCluster, type Cluster } from '../scripts/pg-cluster.js'

let server: Promise<{ url: string, cluster?: Cluster } | undefined> | undefined

/** The server's superuser URL, starting a throwaway server on first use; undefined when there is none. */
export async function pgServer (): Promise<{ url: string, cluster?: Cluster } | undefined> {
  server ??= (async () => {
    const given = process.env.PG_TEST_URL
    if (given === 'none') return undefined
    if (given !== undefined && given !== '') return { url: given }
    if (serverBinaries() === undefined) return undefined
    const cluster = await startCluster()
    process.once('exit', () => { cluster.destroy() })
    tap.teardown(() => { cluster.destroy() })
    return { url: cluster.url, cluster }
  })()
  return await server
}

/** Why the PostgreSQL tests cannot run here. */
export const PG_MISSING = 'SKIPPED: no PostgreSQL server (set PG_TEST_URL, or install the server binaries: apt-get install -y postgresql)'

/** `url` with its database replaced by `database`. */
export function withDatabase (url: string, database: string): string {
  const u = new URL(url)
  u.pathname = `/${database}`
  return u.toString()
}

/** The advisory lock under which a test process makes the migrated template (any number, the same in every process). */
const TEMPLATE_LOCK = 7_243_019

/**
 * The name of a database with this checkout's migrations applied and nothing else, made once per
 * server and schema (its name carries a hash of the migrations): `pgDatabase` clones it, which took
 * about half the time of migrating each new database (some 200 are made in a run of the suite).
 * Made under another name and renamed when whole, under an advisory lock, so that test processes
 * starting together make it once and never clone a half-migrated one.
 */
let template: Promise<string> | undefined
async function migratedTemplate (url: string): Promise<string> {
  template ??= (async () => {
    const name = `agent_host_template_${createHash('sha256').update(JSON.stringify(PG_MIGRATIONS)).digest('hex').slice(0, 16)}`
    const admin = new pg.Client({ connectionString: url })
    await admin.connect()
    try {
      await admin.query('SELECT pg_advisory_lock($1)', [TEMPLATE_LOCK])
      if ((await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 0) {
        const building = `${name}_${process.pid}`
        await admin.query(`DROP DATABASE IF EXISTS ${building}`)
        await admin.query(`CREATE DATABASE ${building}`)
        const pool = await openPostgres(withDatabase(url, building))
        await pool.end()
        // the closed connection's backend may take a moment to go, and a database in use cannot be renamed
        await untilNotInUse(async () => { await admin.query(`ALTER DATABASE ${building} RENAME TO ${name}`) })
      }
    } finally {
      await admin.end()
    }
    return name
  })()
  return await template
}

/** Run `query`, again while PostgreSQL says its database is in use by another session (55006), for up to 10 s. */
async function untilNotInUse (query: () => Promise<void>): Promise<void> {
  for (let tries = 0; ; tries++) {
    try {
      await query()
      return
    } catch (err) {
      if ((err as { code?: string }).code !== '55006' || tries >= 200) throw err
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
}

/**
 * A new database for this test, dropped when it ends: its URL. It has this checkout's migrations
 * applied (cloned from {@link migratedTemplate}), unless `empty` (a test of the migrations, or of a
 * first boot). Undefined (after a loud comment, or a failure when PostgreSQL is required) when there
 * is no server.
 */
export async function pgDatabase (t: Test, options: { empty?: boolean } = {}): Promise<string | undefined> {
  const found = await pgServer()
  if (found === undefined) return missing(t)
  const name = `t_${randomBytes(6).toString('hex')}`
  const from = options.empty === true ? undefined : await migratedTemplate(found.url)
  const admin = new pg.Client({ connectionString: found.url })
  await admin.connect()
  try {
    // FILE_COPY: the default (WAL_LOG) writes every page of the copy to the WAL, some 8 MB for the
    // catalogs alone; copying the files took the server a fifth of the CPU (40 ms, against 180)
    await admin.query(`CREATE DATABASE ${name}${from === undefined ? '' : ` TEMPLATE ${from}`} STRATEGY FILE_COPY`)
  } finally {
    await admin.end()
  }
  t.teardown(async () => {
    const client = new pg.Client({ connectionString: found.url })
    await client.connect()
    try {
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    } finally {
      await client.end()
    }
  })
  return withDatabase(found.url, name)
}

/** Skip loudly (or, with `AGENT_HOST_REQUIRE_PG=1`, fail): there is no PostgreSQL here. */
function missing (t: Test): undefined {
  if (process.env.AGENT_HOST_REQUIRE_PG === '1') t.fail(`AGENT_HOST_REQUIRE_PG=1 but ${PG_MISSING}`)
  else t.skip(PG_MISSING, () => {})
  return undefined
}

/**
 * A throwaway server of this test's own, destroyed when it ends: for tests that stop and start the
 * server (which would break every other test on a shared one). Undefined (after a loud skip, or a
 * failure when PostgreSQL is required) without server binaries.
 */
export async function ownPgServer (t: Test): Promise<Cluster | undefined> {
  if (serverBinaries() === undefined) return missing(t)
  const cluster = await startCluster()
  t.teardown(() => { cluster.destroy() })
  return cluster
}
