import t from 'tap'
import { spawn } from 'node:child_process'
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ensureWritableDir } from '../../src/storage/data-dir.js'

// Issue 17: a root-owned bind mount of /app/data is not writable by the image's `node` user, and the
// boot said nothing useful. The check runs as a user who may not write the folder: as root (CI) the
// server is started as `nobody`; otherwise the folder is made read-only for us.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const NOBODY = 65534
const asRoot = process.getuid?.() === 0

/** Boot the real server (src/server.ts, through tsx) as a user who cannot write `dataDir`; its exit code and stderr. */
async function boot (dataDir: string): Promise<{ code: number | null, stderr: string }> {
  // `env -i`: tap's process hooks add themselves to every child's environment, and as another user
  // they could not write their files; the server needs only these
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: tmpdir(), DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'warn', WORKERS_PER_TYPE: '0' }
  const child = spawn('env', ['-i', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), process.execPath, '--import', 'tsx', 'src/server.ts'], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
    ...(asRoot ? { uid: NOBODY, gid: NOBODY } : {})
  })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
  return { code, stderr }
}

t.test('a DATA_DIR the server may not write stops the boot with who owns it and what to do', { timeout: 60_000 }, async (t) => {
  const parent = mkdtempSync(join(tmpdir(), 'agent-host-datadir-'))
  t.teardown(() => { chmodSync(parent, 0o755); rmSync(parent, { recursive: true, force: true }) })
  chmodSync(parent, 0o755)
  const volume = join(parent, 'data')
  mkdirSync(volume, { mode: 0o755 })
  if (!asRoot) chmodSync(volume, 0o555)
  const { code, stderr } = await boot(volume)
  t.equal(code, 1)
  t.match(stderr, new RegExp(`agent-host: cannot start: Invalid configuration: DATA_DIR ${volume} is not writable by this process \\(uid \\d+\\): it belongs to uid \\d+, gid \\d+, mode (755|555)\\. Give it to the server's user \\(in the Docker image: chown -R 1000:1000 on the host folder, or use a named volume\\)`))
  t.notMatch(stderr, /SQLITE|at .*\.js:/, 'not a bare SQLite error or a stack')

  const missing = await boot(join(volume, 'nested', 'deeper'))
  t.match(missing.stderr, /DATA_DIR .*nested\/deeper is not writable by this process .*: it cannot be made\./, 'a folder it cannot make')

  if (asRoot) {
    // the folder is the user's, the database file in it is not (a copy restored by root)
    chownSync(volume, NOBODY, NOBODY)
    writeFileSync(join(volume, 'agent-host.db'), '')
    chmodSync(join(volume, 'agent-host.db'), 0o644)
    const file = await boot(volume)
    t.match(file.stderr, new RegExp(`${join(volume, 'agent-host.db')} is not writable by this process \\(uid ${NOBODY}\\): it belongs to uid 0`), 'the database file named')
  }
})

t.test('a writable DATA_DIR is made when missing, and passes', async (t) => {
  const parent = mkdtempSync(join(tmpdir(), 'agent-host-datadir-'))
  t.teardown(() => { rmSync(parent, { recursive: true, force: true }) })
  t.doesNotThrow(() => { ensureWritableDir(join(parent, 'a', 'b'), 'agent-host.db') })
  writeFileSync(join(parent, 'a', 'b', 'agent-host.db'), '')
  t.doesNotThrow(() => { ensureWritableDir(join(parent, 'a', 'b'), 'agent-host.db') }, 'with its database file')
})
