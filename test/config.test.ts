import t from 'tap'
import { readFileSync } from 'node:fs'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { BUNDLED_AGENTS_DIR, ConfigSchema, loadConfig } from '../src/config.js'
import { tempDataDir } from './helper.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))

t.test('every key has its default', async (t) => {
  const config = loadConfig({})
  t.match(config, {
    HOST: '127.0.0.1',
    PORT: 3000,
    LOG_LEVEL: 'info',
    DATA_DIR: resolve('data'),
    AGENTS_DIR: BUNDLED_AGENTS_DIR,
    BODY_LIMIT: 1048576,
    SSE_HEARTBEAT_MS: 15000,
    SSE_RETRY_MS: 3000,
    SSE_MAX_BUFFER_BYTES: 8388608,
    JOURNAL_RETENTION_MS: 86400000,
    TASK_STORE: 'file',
    WORKERS_PER_TYPE: 1,
    TASK_LEASE_MS: 30000,
    TASK_HEARTBEAT_MS: 10000,
    TASK_POLL_MS: 500,
    DISCONNECT_POLICY: 'continue',
    CLOSE_GRACE_MS: 10000,
    INSTANCE_ID: '',
    TRUST_PROXY: false
  })
  t.ok(BUNDLED_AGENTS_DIR.endsWith('/agents/'))
})

t.test('STREAMING_LLM_DATA_DIR is another name for DATA_DIR; DATA_DIR wins', async (t) => {
  t.equal(loadConfig({ STREAMING_LLM_DATA_DIR: 'legacy' }).DATA_DIR, resolve('legacy'))
  t.equal(loadConfig({ STREAMING_LLM_DATA_DIR: 'legacy', DATA_DIR: 'new' }).DATA_DIR, resolve('new'))
})

t.test('a heartbeat no shorter than the lease is refused', async (t) => {
  t.throws(() => loadConfig({ TASK_HEARTBEAT_MS: '5000', TASK_LEASE_MS: '5000' }), { code: 'AH_ERR_CONFIG_INVALID', message: /TASK_HEARTBEAT_MS/ })
})

t.test('values are parsed from strings; paths are resolved; unknown keys are ignored', async (t) => {
  const config = loadConfig({ PORT: '8080', TRUST_PROXY: 'true', DATA_DIR: 'x/y', AGENTS_DIR: 'my-agents', INSTANCE_ID: 'AAAAAAAA-0000-4000-8000-000000000000', NODE_ENV: 'production' })
  t.equal(config.PORT, 8080)
  t.equal(config.TRUST_PROXY, true)
  t.equal(config.DATA_DIR, resolve('x/y'))
  t.equal(config.AGENTS_DIR, resolve('my-agents'))
  t.notOk('NODE_ENV' in config)
})

for (const [key, value] of [['PORT', 'abc'], ['PORT', '70000'], ['LOG_LEVEL', 'loud'], ['BODY_LIMIT', '10'], ['INSTANCE_ID', 'not-a-uuid'], ['DISCONNECT_POLICY', 'maybe'], ['SSE_HEARTBEAT_MS', '-1']] as const) {
  t.test(`an invalid ${key} (${value}) is refused naming the key`, async (t) => {
    t.throws(() => loadConfig({ [key]: value }), { code: 'AH_ERR_CONFIG_INVALID', message: new RegExp(key) })
  })
}

t.test('.env.example lists every key with its default, and nothing else', async (t) => {
  const text = readFileSync(new URL('../.env.example', import.meta.url), 'utf8')
  const entries = Object.fromEntries(text.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#')).map((l) => {
    const i = l.indexOf('=')
    return [l.slice(0, i), l.slice(i + 1)]
  }))
  const properties = ConfigSchema.properties as unknown as Record<string, { default: unknown }>
  t.same(Object.keys(entries).sort(), Object.keys(properties).sort())
  for (const [key, schema] of Object.entries(properties)) t.equal(entries[key], String(schema.default), key)
})

t.test('the configuration reference lists every key with its default and a meaning', async (t) => {
  const reference = readFileSync(new URL('../docs/reference/configuration.md', import.meta.url), 'utf8')
  const properties = ConfigSchema.properties as unknown as Record<string, { default: unknown, description?: string }>
  for (const [key, schema] of Object.entries(properties)) {
    const row = reference.split('\n').find((l) => l.startsWith(`| \`${key}\` |`))
    t.ok(row, key)
    const cells = row?.split(' | ')
    t.equal(cells?.[1], schema.default === '' ? '*(empty)*' : `\`${String(schema.default)}\``, `${key} default`)
    t.ok((schema.description ?? '').length > 10, `${key} is described in the schema`)
  }
})

async function runServer (env: Record<string, string>): Promise<{ code: number | null, stderr: string }> {
  const child = spawn(process.execPath, [...process.execArgv, 'src/server.ts'], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'silent', ...env }, stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  const [code] = await once(child, 'exit') as [number | null]
  return { code, stderr }
}

t.test('the server refuses to start on invalid configuration, naming the key', async (t) => {
  const { code, stderr } = await runServer({ PORT: 'abc', DATA_DIR: tempDataDir(t) })
  t.equal(code, 1)
  t.match(stderr, /agent-host: Invalid configuration: .*PORT/)
})

t.test('the server refuses to start with a broken agent, naming its file', async (t) => {
  const { code, stderr } = await runServer({ AGENTS_DIR: resolve(tempDataDir(t), 'missing'), DATA_DIR: tempDataDir(t) })
  t.equal(code, 1)
  t.match(stderr, /agent-host: cannot start: Invalid agent at .*missing/)
})

t.test('the server exits 1 when it cannot listen', async (t) => {
  const blocker = (await import('node:net')).createServer()
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
  t.teardown(() => blocker.close())
  const port = (blocker.address() as { port: number }).port
  const { code } = await runServer({ PORT: String(port), DATA_DIR: tempDataDir(t) })
  t.equal(code, 1)
})

t.test('TASK_LOCK_STALE_MS: 5 s by default; under half a second is refused at boot, naming the setting', async (t) => {
  t.equal(loadConfig({}).TASK_LOCK_STALE_MS, 5000)
  t.equal(loadConfig({ TASK_LOCK_STALE_MS: '2000' }).TASK_LOCK_STALE_MS, 2000)
  t.throws(() => loadConfig({ TASK_LOCK_STALE_MS: '100' }), { code: 'AH_ERR_CONFIG_INVALID', message: /TASK_LOCK_STALE_MS/ })
})

t.test('a bad setting is named once, with the value given and what it must be', async (t) => {
  const err = t.throws(() => loadConfig({ AUTH_MODE: 'apikee' })) as Error
  t.equal(err.message, 'Invalid configuration: env/AUTH_MODE is "apikee": it must be one of off, apikey, jwt')
  t.match((t.throws(() => loadConfig({ TASK_STORE: 'redis', LOG_LEVEL: 'loud' })) as Error).message, /env\/LOG_LEVEL is "loud": it must be one of fatal, error, warn, info, debug, trace, silent; env\/TASK_STORE is "redis": it must be one of file, sqlite|env\/TASK_STORE is "redis": it must be one of file, sqlite; env\/LOG_LEVEL is "loud"/)
  t.equal((t.throws(() => loadConfig({ PORT: 'abc' })) as Error).message, 'Invalid configuration: env/PORT is "abc": it must be integer')
})

t.test('DATABASE_URL: a postgres:// URL or nothing; with it the task graph is shared by default, and a machine-local SQLite task graph is refused', async (t) => {
  t.equal(loadConfig({}).DATABASE_URL, '', 'SQLite under DATA_DIR by default')
  t.equal(loadConfig({}).TASK_STORE, 'file')
  const url = 'postgres://u:p@db:5432/agent_host'
  t.equal(loadConfig({ DATABASE_URL: url }).TASK_STORE, 'postgres', 'the default with DATABASE_URL')
  t.equal(loadConfig({ DATABASE_URL: 'postgresql://db/agent_host' }).DATABASE_URL, 'postgresql://db/agent_host')
  t.equal(loadConfig({ DATABASE_URL: url, TASK_STORE: 'file' }).TASK_STORE, 'file', 'an explicit file store stays')
  t.throws(() => loadConfig({ DATABASE_URL: 'mysql://db/x' }), { code: 'AH_ERR_CONFIG_INVALID', message: /DATABASE_URL must be a postgres:\/\// })
  t.throws(() => loadConfig({ DATABASE_URL: url, TASK_STORE: 'sqlite' }), { code: 'AH_ERR_CONFIG_INVALID', message: /TASK_STORE=sqlite with DATABASE_URL/ })
  t.throws(() => loadConfig({ TASK_STORE: 'postgres' }), { code: 'AH_ERR_CONFIG_INVALID', message: /TASK_STORE=postgres needs DATABASE_URL/ })
  t.throws(() => loadConfig({ DB_POOL_MAX: '1' }), /DB_POOL_MAX/)
})
