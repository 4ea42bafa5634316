import t from 'tap'
import { execFile } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import Database from 'better-sqlite3'
import pg from 'pg'
import { main, type CommandIo } from '../src/commands.js'
import type { BackupManifest } from '../src/backup.js'
import { openDatabase } from '../src/storage/sqlite/database.js'
import { needsPrograms } from './host-programs.js'
import { harnessFreeEnv } from './child-env.js'
import { docBlocks } from './docs/doc-blocks.js'
import { AGENTS, build, envelope, tempDataDir } from './helper.js'
import { pgDatabase } from './pg.js'
import { startServer } from './server-child.js'
import { until } from './socket.js'

// Heavy: a backup is taken by `agent-host backup` in its own process from a server in its own
// process that is answering requests and taking tasks all the while: what those processes share is
// only DATA_DIR's files and SQLite's and the task store's locks, which is what an online backup must
// get right (the restored server then boots in this process). What runs is the guide's shell blocks
// (docs/backups.md): its backup command under that load, its backup by hand, its restore and audit
// check; and its PostgreSQL blocks against a test database.

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const noSqlite3 = needsPrograms(['sqlite3'])

/** A folder whose `agent-host` runs this checkout's command line as the test's own processes do: the guide's commands run as written. */
function agentHostOnPath (scratch: string): string {
  const bin = join(scratch, 'bin')
  mkdirSync(bin)
  const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`
  writeFileSync(join(bin, 'agent-host'), `#!/bin/sh\nexec ${[process.execPath, ...process.execArgv, join(ROOT, 'src/cli.ts')].map(quote).join(' ')} "$@"\n`)
  chmodSync(join(bin, 'agent-host'), 0o755)
  return bin
}

/** Run a shell block in `cwd` (bash, -euo pipefail): its exit code and output. */
async function bash (script: string, cwd: string, env: Record<string, string>): Promise<{ code: number, stdout: string, stderr: string }> {
  return await new Promise((resolve) => {
    execFile('bash', ['-euo', 'pipefail', '-c', script], { cwd, env, timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr })
    })
  })
}

function capture (): { io: CommandIo, out: string[] } {
  const out: string[] = []
  return { io: { out: (l) => { out.push(l) }, err: (l) => { out.push(l) } }, out }
}

interface Answered { body: ReturnType<typeof envelope>, created_at: string, output: unknown, at: number }

t.test('a backup taken under load restores: the audit chain verifies, every answer acknowledged before it replays, its tasks are there', async (t) => {
  const scratch = tempDataDir(t)
  const data = join(scratch, 'data')
  // a database made before the server starts holds its schema in the file itself: a copy of the
  // file alone then opens, and shows what it lacks
  openDatabase(data).close()
  const env = {
    AUDIT_KEY: randomBytes(32).toString('hex'),
    DATABASE_URL: '',
    RATE_LIMIT_MAX: '0',
    RATE_LIMIT_AGENT_MAX: '0',
    WORKERS_PER_TYPE: '0',
    // every commit of the test stays in the WAL (no checkpoint within the hour): the backup must read
    // through the WAL, and a copy of the database file alone holds none of them
    DB_CHECKPOINT_INTERVAL_MS: '3600000',
    // audit checkpoints written all the while: the backup must copy none ahead of its database
    AUDIT_CHECKPOINT_INTERVAL_MS: '50'
  }
  const server = await startServer(t, { ...env, DATA_DIR: data })

  const answers: Answered[] = []
  const tasks: Array<{ id: string, at: number }> = []
  const failures: string[] = []
  const halt = new AbortController()
  const post = async (path: string, body: unknown): Promise<{ status: number, json: Record<string, unknown> }> => {
    const res = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    return { status: res.status, json: await res.json() as Record<string, unknown> }
  }
  const assistLoop = async (): Promise<void> => {
    const sessionId = randomUUID()
    while (!halt.signal.aborted) {
      const body = envelope(AGENTS.echo, { query: `load ${answers.length}` }, { sessionId })
      const res = await post('/v1/assist', body)
      if (res.status !== 200) failures.push(`${res.status} ${JSON.stringify(res.json)}`)
      else answers.push({ body, created_at: res.json.created_at as string, output: res.json.output, at: performance.now() })
    }
  }
  const taskLoop = async (): Promise<void> => {
    for (let n = 0; !halt.signal.aborted; n++) {
      const res = await post('/v1/tasks', { id: `task-${n}`, type: 'nobody', inputs: { n } })
      if (res.status !== 201) failures.push(`${res.status} ${JSON.stringify(res.json)}`)
      else tasks.push({ id: `task-${n}`, at: performance.now() })
    }
  }
  const load = Promise.all([assistLoop(), assistLoop(), taskLoop()])
  await until('some answers and tasks', () => answers.length >= 40 && tasks.length >= 5, 60_000, 10)

  const bin = agentHostOnPath(scratch)
  const shell = { ...harnessFreeEnv((name) => name === 'DATA_DIR'), ...env, PATH: `${bin}:${process.env.PATH ?? ''}` }
  const [backupBlock] = docBlocks('docs/backups.md', '## Back up a running server')
  const began = performance.now()
  copyFileSync(join(data, 'agent-host.db'), join(scratch, 'naive.db'))
  const backup = await bash(backupBlock as string, scratch, shell)
  const ended = performance.now()
  t.equal(backup.code, 0, `the guide's backup command: ${backup.stderr}`)
  t.ok(answers.some((a) => a.at > began && a.at < ended), 'requests were answered while the backup ran')
  if (noSqlite3 === false) {
    const [handBlock] = docBlocks('docs/backups.md', '### By hand')
    const handBegan = performance.now()
    const hand = await bash(handBlock as string, scratch, shell)
    t.equal(hand.code, 0, `the guide's backup by hand: ${hand.stderr}`)
    const byHand = readdirSync(join(scratch, 'backups')).find((name) => name.startsWith('by-hand-')) as string
    const copy = new Database(join(scratch, 'backups', byHand, 'agent-host.db'), { readonly: true })
    const held = new Set((copy.prepare('SELECT request_id FROM runs').all() as Array<{ request_id: string }>).map((r) => r.request_id))
    t.equal(copy.pragma('quick_check', { simple: true }), 'ok')
    copy.close()
    t.same(answers.filter((a) => a.at < handBegan && !held.has(a.body.request_id)).map((a) => a.body.request_id), [], 'the copy by hand holds every answer acknowledged before it')
  } else {
    t.comment(`the guide's backup by hand: ${noSqlite3}`)
  }
  halt.abort()
  await load
  t.same(failures, [], 'every request of the load was answered')
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0, 'the server stopped cleanly')

  const before = answers.filter((a) => a.at < began)
  const tasksBefore = tasks.filter((task) => task.at < began)
  const naive = new Database(join(scratch, 'naive.db'), { readonly: true })
  const inNaive = new Set((naive.prepare('SELECT request_id FROM runs').all() as Array<{ request_id: string }>).map((r) => r.request_id))
  naive.close()
  t.ok(before.filter((a) => !inNaive.has(a.body.request_id)).length > 0, `a copy of the database file alone lacks answers acknowledged before it (it holds ${before.filter((a) => inNaive.has(a.body.request_id)).length} of ${before.length}): they were in the WAL`)

  const folder = readdirSync(join(scratch, 'backups')).find((name) => name.startsWith('agent-host-')) as string
  const taken = join(scratch, 'backups', folder)
  t.same(readdirSync(taken).sort(), ['agent-host.db', 'audit-checkpoints.jsonl', 'backup-manifest.json', 'tasks.graph.json'], 'no WAL in the backup: the database opens without the original\'s')
  const manifest = JSON.parse(readFileSync(join(taken, 'backup-manifest.json'), 'utf8')) as BackupManifest
  t.match(backup.stdout, `keep with the backup, as its checkpoint: {"rows":${manifest.point_in_time?.audit.rows ?? -1},`, 'it printed the point in time it wrote')

  // the guide's restore, then its check against the replaced folder's later checkpoints
  const [restoreBlock] = docBlocks('docs/backups.md', '## Restore')
  const restore = await bash(restoreBlock as string, scratch, shell)
  t.equal(restore.code, 0, `the guide's restore and its audit verify: ${restore.stdout}${restore.stderr}`)
  t.match(JSON.parse(restore.stdout.trim().split('\n').at(-1) as string), { ok: true, rows: manifest.point_in_time?.audit.rows })
  t.ok(existsSync(join(scratch, 'data', 'backup-manifest.json')) && readdirSync(scratch).some((name) => name.startsWith('data.replaced-')), 'the copy is DATA_DIR, the replaced one kept')
  const [rollbackBlock] = docBlocks('docs/backups.md', '## What a restore means for the audit log')
  const rollback = await bash(rollbackBlock as string, scratch, shell)
  const rows = manifest.point_in_time?.audit.rows ?? 0
  t.match(rollback.stdout, new RegExp(`"missing":\\{"from":${rows + 1},"to":\\d+\\},"reason":"rows ${rows + 1}\\.\\.\\d+ are missing: the checkpoint data\\.replaced-`), 'held to the replaced folder\'s later checkpoints, the rows after the backup are missing')
  t.match(rollback.stdout, /\nexit 1\n$/)

  // the restored server in this process: what crosses processes was the backup, not the restore
  const restored = await build(t, { ...env, DATA_DIR: join(scratch, 'data') })
  const replays: string[] = []
  for (const a of before) {
    const res = await restored.inject({ method: 'POST', url: '/v1/assist', payload: a.body })
    const json = res.json() as { created_at?: string, output?: unknown }
    if (res.statusCode !== 200 || json.created_at !== a.created_at || JSON.stringify(json.output) !== JSON.stringify(a.output)) replays.push(`${a.body.request_id}: ${res.statusCode} ${res.body}, answered ${a.created_at} ${JSON.stringify(a.output)}`)
  }
  t.same(replays, [], `each of the ${before.length} answers acknowledged before the backup, asked again, is the stored one (the same created_at and output)`)
  const lost: string[] = []
  for (const task of tasksBefore) {
    const res = await restored.inject({ method: 'GET', url: `/v1/tasks/${task.id}` })
    if (res.statusCode !== 200) lost.push(`${task.id}: ${res.statusCode}`)
  }
  t.same(lost, [], `each of the ${tasksBefore.length} tasks created before the backup is there`)
  await restored.close()
  const verify = capture()
  t.equal(await main(['audit', 'verify'], { DATA_DIR: join(scratch, 'data'), AUDIT_KEY: env.AUDIT_KEY }, verify.io), 0, `the restored server's log verifies: ${verify.out.join('\n')}`)
})

t.test('PostgreSQL, as the guide says: DATA_DIR\'s files, then pg_dump; restored with pg_restore and the files, the log verifies', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const scratch = tempDataDir(t)
  const data = join(scratch, 'data')
  const env = { DATABASE_URL: url, AUDIT_KEY: randomBytes(32).toString('hex'), AUDIT_CHECKPOINT_INTERVAL_MS: '0' }
  // an instance in this process, on the database and its own DATA_DIR
  const app = await build(t, { ...env, DATA_DIR: data })
  const ask = async (): Promise<string> => {
    const body = envelope(AGENTS.echo)
    const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: body })
    if (res.statusCode !== 200) throw new Error(res.body)
    return body.request_id
  }
  const kept = await ask()
  const shell = { ...harnessFreeEnv((name) => name === 'DATA_DIR'), ...env, PATH: `${agentHostOnPath(scratch)}:${process.env.PATH ?? ''}` }
  const [backupBlock, restoreBlock] = docBlocks('docs/backups.md', '## PostgreSQL')
  const backup = await bash(backupBlock as string, scratch, shell)
  t.equal(backup.code, 0, `the guide's backup: ${backup.stderr}`)
  t.match(backup.stderr, /the database is not in this backup: DATABASE_URL is set/)
  await ask() // answered after the dump
  await app.close()

  const restore = await bash(restoreBlock as string, scratch, shell)
  t.equal(restore.code, 0, `the guide's restore: ${restore.stdout}${restore.stderr}`)
  t.match(JSON.parse(restore.stdout.trim().split('\n').at(-1) as string), { ok: true })
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.teardown(async () => { await client.end() })
  const runs = (await client.query<{ request_id: string }>('SELECT request_id FROM runs')).rows.map((r) => r.request_id)
  t.same(runs, [kept], 'the run answered before the dump is there, the one after it is not')
  t.equal(readdirSync(scratch).filter((name) => name.startsWith('audit-checkpoints.replaced-')).length, 1, 'the replaced checkpoints kept aside')
})
