import t from 'tap'
import { execFileSync } from 'node:child_process'
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { main, type CommandIo } from '../src/commands.js'
import { BACKUP_MANIFEST, backupDataDir, type BackupManifest } from '../src/backup.js'
import { appendCheckpoint } from '../src/storage/audit-checkpoints.js'
import { FileTaskStore } from '../src/storage/file/tasks.js'
import { GraphLock } from '../src/storage/file/graph-lock.js'
import { AGENTS, build, envelope, tempDataDir, type Teardown } from './helper.js'
import { until } from './socket.js'

// `agent-host backup` in process, on the DATA_DIR of an app built in this process: what it copies
// and leaves out, its refusals, and the task graph's lock held while the graph is copied.
// test/backup-restore.test.ts restores a backup taken from a server process under load.

function capture (): { io: CommandIo, out: string[], err: string[] } {
  const out: string[] = []
  const err: string[] = []
  return { io: { out: (l) => { out.push(l) }, err: (l) => { err.push(l) } }, out, err }
}

/** An app on a temp DATA_DIR that has answered `answers` echo requests and holds `tasks` tasks nobody works. */
async function liveDataDir (t: Teardown, answers = 3, tasks = 2): Promise<{ app: Awaited<ReturnType<typeof build>>, dataDir: string, requests: Array<{ request_id: string, created_at: string }>, taskIds: string[] }> {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const requests: Array<{ request_id: string, created_at: string }> = []
  for (let i = 0; i < answers; i++) {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo, { query: `q${i}` }) })
    if (res.statusCode !== 200) throw new Error(res.body)
    requests.push(res.json())
  }
  const created = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { tasks: Array.from({ length: tasks }, (_, i) => ({ id: `job-${i}`, type: 'nobody' })) } })
  if (created.statusCode !== 201) throw new Error(created.body)
  return { app, dataDir: app.config.DATA_DIR, requests, taskIds: (created.json() as { tasks: Array<{ id: string }> }).tasks.map((task) => task.id) }
}

/** The target folder of a backup: a path in a fresh temp folder, not made yet. */
const target = (t: Teardown): string => join(tempDataDir(t), 'backup')

t.test('backup of a live DATA_DIR: each store copied, what is left out named, the point in time printed; the copy verifies and holds what was answered', async (t) => {
  const { dataDir, requests } = await liveDataDir(t)
  writeFileSync(join(dataDir, 'notes.txt'), 'mine\n')
  writeFileSync(join(dataDir, 'backup-manifest.json'), '{}\n')
  mkdirSync(join(dataDir, 'tasks.graph.json.lock-stale-0a1b2c'))
  writeFileSync(join(dataDir, 'tasks.graph.json.1.ab.tmp'), '')
  const session = join(dataDir, 'workspaces', 'cli-agent', 's1')
  mkdirSync(session, { recursive: true })
  writeFileSync(join(session, 'notes.md'), 'hello\n')
  symlinkSync('notes.md', join(session, 'link.md'))
  execFileSync('mkfifo', [join(session, 'pipe')])
  const to = target(t)
  const { io, out, err } = capture()

  t.equal(await main(['backup', '--to', to], { DATA_DIR: dataDir }, io), 0, err.join('\n'))
  t.same(err, [])
  t.match(out, [
    /^copied audit-checkpoints\.jsonl \(\d+ B\): 1 checkpoint, copied before the database$/,
    /^copied agent-host\.db \([\d.]+ KiB\): SQLite online backup, \d+ pages in one read transaction; quick_check ok$/,
    /^copied tasks\.graph\.json \(\d+ B\): 2 tasks, copied holding the task store's lock$/,
    /^copied workspaces\/ \(6 B\): 1 file, copied one by one as found$/,
    /^left out agent-host\.db-shm: the live database's WAL and index/,
    /^left out agent-host\.db-wal: the live database's WAL and index/,
    /^left out backup-manifest\.json: the manifest of the backup this DATA_DIR was restored from$/,
    /^left out notes\.txt: not written by agent-host/,
    /^left out tasks\.graph\.json\.1\.ab\.tmp: what a crashed writer left/,
    /^left out tasks\.graph\.json\.lock-stale-0a1b2c: what a crashed writer left/,
    /^left out workspaces\/cli-agent\/s1\/pipe: not a file, folder or link/,
    /^point in time: audit row \d+ of \d{4}-\d\d-\d\dT[\d:.]+Z; 3 runs, the last started \d{4}-/,
    /^keep with the backup, as its checkpoint: \{"rows":\d+,"head":"[0-9a-f]{64}"\}$/,
    new RegExp(`^backup of ${dataDir} written to ${to} \\(backup-manifest\\.json last\\), `)
  ])
  t.same(readdirSync(to).sort(), ['agent-host.db', 'audit-checkpoints.jsonl', 'backup-manifest.json', 'tasks.graph.json', 'workspaces'], 'no WAL, no lock, nothing unknown')
  t.equal(readFileSync(join(to, 'workspaces/cli-agent/s1/notes.md'), 'utf8'), 'hello\n')
  t.ok(lstatSync(join(to, 'workspaces/cli-agent/s1/link.md')).isSymbolicLink(), 'a link stays a link')
  t.equal(readlinkSync(join(to, 'workspaces/cli-agent/s1/link.md')), 'notes.md')

  const copy = new Database(join(to, 'agent-host.db'), { readonly: true, fileMustExist: true })
  const answered = copy.prepare('SELECT request_id, response FROM runs').all() as Array<{ request_id: string, response: string }>
  copy.close()
  t.same(answered.map((r) => [r.request_id, JSON.parse(r.response).created_at]).sort(), requests.map((r) => [r.request_id, r.created_at]).sort(), 'every answer, as answered')

  const checkpoint = JSON.parse((out[12] as string).replace(/^[^{]*/, '')) as { rows: number }
  const verify = capture()
  t.equal(await main(['audit', 'verify', '--checkpoint', JSON.stringify(checkpoint)], { DATA_DIR: to }, verify.io), 0, verify.out.join('\n'))
  t.match(JSON.parse(verify.out[0] as string), { ok: true, rows: checkpoint.rows, checkpoints_checked: 2 }, 'the copy verifies, against its own checkpoints and the one printed')

  const json = capture()
  const second = target(t)
  t.equal(await main(['backup', '--to', second, '--json'], { DATA_DIR: dataDir }, json.io), 0)
  const manifest = JSON.parse(json.out[0] as string) as BackupManifest
  t.match(manifest, { format: 1, data_dir: dataDir, to: second, database: 'sqlite', point_in_time: { audit: { rows: Number }, runs: { count: 3 } } })
  t.same(JSON.parse(readFileSync(join(second, BACKUP_MANIFEST), 'utf8')), manifest, 'the manifest printed is the one written')
})

t.test('refused, exit 2 and nothing written: no --to, a DIR that is not empty or not a folder or inside DATA_DIR, no DATA_DIR, no database', async (t) => {
  const { dataDir } = await liveDataDir(t, 1, 1)
  const full = tempDataDir(t)
  writeFileSync(join(full, 'old.db'), 'keep me')
  const file = join(tempDataDir(t), 'a-file')
  writeFileSync(file, 'keep me too')
  const empty = tempDataDir(t)
  const missing = join(tempDataDir(t), 'gone')
  const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
    ['no --to', ['backup'], { DATA_DIR: dataDir }, /^backup needs --to DIR\n\nusage: agent-host/],
    ['a folder that is not empty', ['backup', '--to', full], { DATA_DIR: dataDir }, new RegExp(`^backup refused: ${full} is not empty \\(old\\.db\\): a backup goes into a new or empty folder, and nothing was written$`)],
    ['a file', ['backup', '--to', file], { DATA_DIR: dataDir }, /is not a folder: give a new or empty folder$/],
    ['inside DATA_DIR', ['backup', '--to', join(dataDir, 'backups', 'x')], { DATA_DIR: dataDir }, /is inside DATA_DIR .*: put the backup elsewhere/],
    ['DATA_DIR itself', ['backup', '--to', dataDir], { DATA_DIR: dataDir }, /is inside DATA_DIR/],
    ['no DATA_DIR', ['backup', '--to', join(empty, 'x'), '--data-dir', missing], {}, new RegExp(`^backup refused: no DATA_DIR at ${missing}: is --data-dir \\(or DATA_DIR\\) right\\?$`)],
    ['no database in DATA_DIR', ['backup', '--to', join(empty, 'x'), '--data-dir', empty], {}, /^backup refused: no agent-host database at .*agent-host\.db: is --data-dir \(or DATA_DIR\) right\?$/]
  ]
  for (const [what, argv, env, message] of cases) {
    const { io, out, err } = capture()
    t.equal(await main(argv, env, io), 2, what)
    t.same(out, [], `${what}: nothing printed on stdout`)
    t.match(err.join('\n'), message, `${what}: says why`)
  }
  t.same(readdirSync(full), ['old.db'], 'the full folder is untouched')
  t.equal(readFileSync(join(full, 'old.db'), 'utf8'), 'keep me')
  t.equal(readFileSync(file, 'utf8'), 'keep me too')
  t.same(readdirSync(empty), [], 'nothing made')
  t.notOk(existsSync(join(dataDir, 'backups')), 'nothing made inside DATA_DIR')
})

t.test('with DATABASE_URL: DATA_DIR\'s own files copied, the database left to pg_dump, exit 3 (the database is never contacted)', async (t) => {
  const { dataDir } = await liveDataDir(t, 1, 1)
  writeFileSync(join(dataDir, 'secrets.key'), 'a key', { mode: 0o600 })
  const to = target(t)
  const { io, out, err } = capture()
  t.equal(await main(['backup', '--to', to, '--json'], { DATA_DIR: dataDir, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/agent_host' }, io), 3)
  t.match(err, [/^the database is not in this backup: DATABASE_URL is set, and PostgreSQL's data is backed up with pg_dump --format=custom .*see docs\/backups\.md/])
  const manifest = JSON.parse(out[0] as string) as BackupManifest
  t.match(manifest, { database: 'postgres', point_in_time: null })
  t.same(manifest.copied.map((c) => c.path), ['audit-checkpoints.jsonl', 'tasks.graph.json'])
  t.match(manifest.left_out, [{ path: 'agent-host.db', why: /DATABASE_URL is set: this SQLite database is not the one in use/ }, { path: 'agent-host.db-shm' }, { path: 'agent-host.db-wal' }, { path: 'secrets.key', why: /the key that seals the stored secrets: keep it apart/ }])
  t.same(readdirSync(to).sort(), ['audit-checkpoints.jsonl', 'backup-manifest.json', 'tasks.graph.json'], 'the secrets key is not in the backup')
})

t.test('a writer of the task graph cannot write while the backup copies it: the backup holds the store\'s own lock', async (t) => {
  const { dataDir } = await liveDataDir(t, 0, 2)
  const writer = new FileTaskStore(dataDir, { lockWaitMs: 300 })
  t.teardown(async () => { await writer.close() })
  const to = target(t)
  let refused: unknown
  const manifest = await backupDataDir({
    dataDir,
    to,
    database: 'sqlite',
    graphLock: { staleMs: 5000 },
    whileGraphLocked: async () => {
      refused = await writer.create([{ id: 'mid-copy', type: 'nobody' }]).then(() => undefined, (err: unknown) => err)
    }
  })
  t.match(refused, { code: 'ELOCKED' }, 'the writer waited for the lock, and gave up after its 300 ms')
  t.match(manifest.copied.find((c) => c.path === 'tasks.graph.json'), { how: /^2 tasks, copied holding/ })
  t.same((await writer.create([{ id: 'after', type: 'nobody' }])).map((task) => task.id), ['after'], 'once the backup let go, the writer writes')
  const copied = (JSON.parse(readFileSync(join(to, 'tasks.graph.json'), 'utf8')) as { tasks: Array<{ id: string }> }).tasks.map((task) => task.id)
  t.same(copied, ['job-0', 'job-1'])
})

t.test('the backup waits for a writer holding the graph\'s lock, and copies what that writer committed', async (t) => {
  const { dataDir } = await liveDataDir(t, 0, 1)
  const held = await new GraphLock(join(dataDir, 'tasks.graph.json'), { staleMs: 5000, updateMs: 1000, waitMs: 1000 }).acquire()
  let locked = false
  const to = target(t)
  const running = backupDataDir({ dataDir, to, database: 'sqlite', graphLock: { staleMs: 5000 }, whileGraphLocked: () => { locked = true } })
  await until('the database copied', () => existsSync(join(to, 'agent-host.db')), 30_000, 5)
  t.notOk(locked, 'the backup has not got the lock')
  const graph = '{"tasks":[\n{"id":"written-under-the-lock","type":"nobody"}\n]}\n'
  await (await held.commit([Buffer.from(graph)])).close()
  await running
  t.ok(locked)
  t.equal(readFileSync(join(to, 'tasks.graph.json'), 'utf8'), graph, 'the graph the writer committed')
})

t.test('a checkpoint written while the backup runs, after its database copy, is not in the copy: the copy verifies', async (t) => {
  const { app, dataDir } = await liveDataDir(t, 1, 1)
  const to = target(t)
  await backupDataDir({
    dataDir,
    to,
    database: 'sqlite',
    graphLock: { staleMs: 5000 },
    whileGraphLocked: async () => {
      await app.audit.append({ actor: 'test', action: 'later', resource: 'x', success: true })
      appendCheckpoint(dataDir, await app.audit.checkpoint())
    }
  })
  const lines = (path: string): number => readFileSync(path, 'utf8').split('\n').filter((l) => l !== '').length
  t.equal(lines(join(to, 'audit-checkpoints.jsonl')), lines(join(dataDir, 'audit-checkpoints.jsonl')) - 1, 'the later checkpoint is not copied')
  const verify = capture()
  t.equal(await main(['audit', 'verify'], { DATA_DIR: to }, verify.io), 0, verify.out.join('\n'))
  const later = capture()
  t.equal(await main(['audit', 'verify', '--checkpoint-file', join(dataDir, 'audit-checkpoints.jsonl')], { DATA_DIR: to }, later.io), 1, 'held to the later checkpoint, the copy is short')
  t.match(JSON.parse(later.out[0] as string), { ok: false, reason: /^rows \d+\.\.\d+ are missing: the checkpoint .* counted \d+$/ })
})

t.test('a backup that fails leaves DIR as it was: a folder it made is removed, an empty one given stays empty', async (t) => {
  const { dataDir } = await liveDataDir(t, 1, 1)
  const held = await new GraphLock(join(dataDir, 'tasks.graph.json'), { staleMs: 5000, updateMs: 1000, waitMs: 1000 }).acquire()
  t.teardown(async () => { await held.release() })
  const made = target(t)
  await t.rejects(backupDataDir({ dataDir, to: made, database: 'sqlite', graphLock: { staleMs: 5000, waitMs: 100 } }), { code: 'ELOCKED' })
  t.notOk(existsSync(made), 'the folder it made is gone')
  const given = tempDataDir(t)
  await t.rejects(backupDataDir({ dataDir, to: given, database: 'sqlite', graphLock: { staleMs: 5000, waitMs: 100 } }), { code: 'ELOCKED' })
  t.same(readdirSync(given), [], 'the folder given is empty again')

  const foreign = tempDataDir(t)
  new Database(join(foreign, 'agent-host.db')).exec('CREATE TABLE other (x)')
  const { io, out, err } = capture()
  t.equal(await main(['backup', '--to', made], { DATA_DIR: foreign }, io), 1, 'a database that is not agent-host\'s')
  t.same(out, [])
  t.match(err, [new RegExp(`^backup failed: no such table: audit_log; ${made} is as it was$`)])
  t.notOk(existsSync(made))
})
