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
import { randomBytes } from 'node:crypto'
import pg from 'pg'
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

/**
 * A new, empty database for this test, dropped when it ends: its URL. Undefined (after a loud
 * comment, or a failure when PostgreSQL is required) when there is no server.
 */
export async function pgDatabase (t: Test): Promise<string | undefined> {
  const found = await pgServer()
  if (found === undefined) return missing(t)
  const name = `t_${randomBytes(6).toString('hex')}`
  const admin = new pg.Client({ connectionString: found.url })
  await admin.connect()
  try {
    await admin.query(`CREATE DATABASE ${name}`)
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
