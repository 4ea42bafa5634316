/**
 * A throwaway PostgreSQL server in a temporary folder: `initdb`, then `pg_ctl start` on a free port
 * of 127.0.0.1, trust authentication, `fsync=off` (its data is thrown away, so a crash of the machine
 * costs nothing). What the PostgreSQL tests, `.ci/run` and `npm run pg:dev` start. Its folder is in
 * memory (`/dev/shm`) when there is room: each test database is some 300 files, and making them on
 * a disk's file system cost the server 3 to 8 times the CPU (see scripts/scratch.ts).
 *
 * `initdb` and `pg_ctl` refuse to run as root: as root they run as the `postgres` user, which then
 * owns the folder.
 *
 *     npm run pg:dev                     # start one in the foreground; Ctrl-C stops and deletes it
 *     tsx scripts/pg-cluster.ts start    # start one and print `export PG_TEST_URL=... PG_CLUSTER_DIR=...`
 *     tsx scripts/pg-cluster.ts stop DIR # stop it and delete DIR
 */
import { execFileSync, spawnSync } from 'node:child_process'
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { scratchParent } from './scratch.js'

/** A running throwaway server. */
export interface Cluster {
  /** The superuser's URL to the `postgres` database: `postgres://postgres@127.0.0.1:PORT/postgres`. */
  url: string
  port: number
  /** The folder holding its data, socket and log (deleted by {@link Cluster.destroy}). */
  dir: string
  /** Stop the server (fast shutdown), keeping its data: {@link Cluster.start} brings it back on the same port. */
  stop: () => void
  /** Start it again after {@link Cluster.stop}. */
  start: () => void
  /** Stop it at once (immediate shutdown) and delete its folder. */
  destroy: () => void
}

/** The folder holding `initdb`, `pg_ctl` and `postgres`: `PG_BIN`, else the newest under /usr/lib/postgresql, else one on PATH; undefined when there is none. */
export function serverBinaries (): string | undefined {
  const has = (dir: string): boolean => ['initdb', 'pg_ctl', 'postgres'].every((bin) => existsSync(join(dir, bin)))
  if (process.env.PG_BIN !== undefined && process.env.PG_BIN !== '') return has(process.env.PG_BIN) ? process.env.PG_BIN : undefined
  const debian = '/usr/lib/postgresql'
  if (existsSync(debian)) {
    const versions = readdirSync(debian).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a))
    for (const version of versions) if (has(join(debian, version, 'bin'))) return join(debian, version, 'bin')
  }
  for (const dir of (process.env.PATH ?? '').split(':')) if (dir !== '' && has(dir)) return dir
  return undefined
}

/** A port nobody listens on now (the server binds it a moment later; a clash makes `start` fail and retry). */
async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => { resolve(port) })
    })
  })
}

/** Run a server binary, as `postgres` when we are root; throws with its output when it fails. */
function run (bin: string, args: string[]): void {
  const asRoot = process.getuid?.() === 0
  const result = asRoot
    ? spawnSync('runuser', ['-u', 'postgres', '--', bin, ...args], { encoding: 'utf8' })
    : spawnSync(bin, args, { encoding: 'utf8' })
  if (result.status !== 0) {
    throw new Error(`${bin} ${args.join(' ')} failed (${result.error?.message ?? `exit ${String(result.status)}`}):\n${result.stdout}${result.stderr}`)
  }
}

/**
 * Start a throwaway server.
 * @param options.settings more `postgresql.conf` settings (e.g. `max_connections`)
 * @param options.where `memory` (the default: in `/dev/shm` when there is room) or `disk`
 * @throws when there are no server binaries, or the server does not start
 */
export async function startCluster (options: { settings?: Record<string, string | number>, where?: 'memory' | 'disk' } = {}): Promise<Cluster> {
  const bin = serverBinaries()
  if (bin === undefined) throw new Error('no PostgreSQL server binaries (initdb, pg_ctl, postgres): apt-get install -y postgresql, or set PG_BIN')
  const dir = mkdtempSync(join(scratchParent(options.where), 'agent-host-pg-'))
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }))
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }))
    chownSync(dir, uid, gid)
  }
  const data = join(dir, 'data')
  run(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--locale=C'])
  const settings: Record<string, string | number> = {
    fsync: 'off',
    synchronous_commit: 'off',
    full_page_writes: 'off',
    listen_addresses: "'127.0.0.1'",
    unix_socket_directories: `'${dir}'`,
    max_connections: 200,
    ...options.settings
  }
  const port = await freePort()
  writeFileSync(join(dir, 'port'), String(port))
  const conf = Object.entries({ ...settings, port }).map(([k, v]) => `${k} = ${String(v)}`).join('\n')
  // initdb wrote the file as its owner; appending through the shell keeps it theirs
  run('/bin/sh', ['-c', 'printf \'%s\\n\' "$1" >> "$2"', 'sh', conf, join(data, 'postgresql.conf')])
  const start = (): void => { run(join(bin, 'pg_ctl'), ['-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '60', 'start']) }
  const stop = (mode: 'fast' | 'immediate'): void => { run(join(bin, 'pg_ctl'), ['-D', data, '-m', mode, '-w', '-t', '60', 'stop']) }
  try {
    start()
  } catch (err) {
    const log = existsSync(join(dir, 'server.log')) ? readFileSync(join(dir, 'server.log'), 'utf8') : ''
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`${(err as Error).message}\n${log}`)
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    stop: () => { stop('fast') },
    start,
    destroy: () => {
      try { stop('immediate') } catch { /* already stopped */ }
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

/** Stop the server whose folder is `dir` and delete the folder (the `stop` command). */
export function destroyCluster (dir: string): void {
  const bin = serverBinaries()
  if (bin !== undefined && existsSync(join(dir, 'data', 'postmaster.pid'))) {
    try { run(join(bin, 'pg_ctl'), ['-D', join(dir, 'data'), '-m', 'immediate', '-w', 'stop']) } catch { /* not running */ }
  }
  rmSync(dir, { recursive: true, force: true })
}

async function main (args: string[]): Promise<void> {
  const [command = 'dev', dir] = args
  if (command === 'stop') {
    if (dir === undefined) throw new Error('usage: pg-cluster.ts stop DIR')
    destroyCluster(dir)
    return
  }
  const cluster = await startCluster()
  if (command === 'start') {
    process.stdout.write(`export PG_TEST_URL=${cluster.url}\nexport PG_CLUSTER_DIR=${cluster.dir}\n`)
    return
  }
  process.stdout.write(`PostgreSQL is running in ${cluster.dir} (fsync off, in memory when /dev/shm has room: for development only).\n\n  DATABASE_URL=${cluster.url} npm run dev\n  PG_TEST_URL=${cluster.url} npm test\n\nCtrl-C stops it and deletes its data.\n`)
  const done = (): void => { cluster.destroy(); process.exit(0) }
  process.once('SIGINT', done)
  process.once('SIGTERM', done)
  setInterval(() => {}, 1 << 30)
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`${(err as Error).message}\n`)
    process.exit(1)
  })
}
