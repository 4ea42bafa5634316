import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer, type AddressInfo, type Socket } from 'node:net'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { inTransaction, openPostgres } from '../../../src/storage/postgres/database.js'
import { CHANNELS, PgNotifications, notifyIn, type Channel } from '../../../src/storage/postgres/notifications.js'
import { until } from '../../socket.js'
import { pgDatabase } from '../../pg.js'

const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

let listeners = 0

/** A database, a pool to notify from, and a started listener on it (closed after the test) with the warnings it logged. */
async function setup (t: Test): Promise<{ url: string, pool: pg.Pool, notifications: PgNotifications, name: string, warnings: Array<{ obj: object, msg: string }> } | undefined> {
  const url = await pgDatabase(t)
  if (url === undefined) return undefined
  const pool = await openPostgres(url)
  const name = `notifications test ${process.pid} ${++listeners}`
  const warnings: Array<{ obj: object, msg: string }> = []
  const notifications = new PgNotifications({ connectionString: url, application_name: name }, { warn: (obj, msg) => { warnings.push({ obj, msg }) } })
  t.teardown(async () => {
    await notifications.close()
    await pool.end()
  })
  await notifications.start()
  return { url, pool, notifications, name, warnings }
}

/** Notify `ids` on `channel` in a committed transaction of `pool`. */
async function notify (pool: pg.Pool, channel: Channel, ids: ReadonlyArray<string | number>): Promise<void> {
  await inTransaction(pool, async (client) => { await notifyIn(client, channel, ids) })
}

t.test('ids notified in a committed transaction reach the subscribers of their channel; a rolled-back transaction\'s never do', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  t.equal(s.notifications.connected, true)
  const journal: string[] = []
  const cancel: string[] = []
  s.notifications.on(CHANNELS.journal, (id) => { journal.push(id) })
  s.notifications.on(CHANNELS.cancel, (id) => { cancel.push(id) })
  await t.rejects(inTransaction(s.pool, async (client) => {
    await notifyIn(client, CHANNELS.journal, [666])
    throw new Error('rolled back')
  }), /rolled back/)
  await notify(s.pool, CHANNELS.journal, [1, 2, 3])
  await notify(s.pool, CHANNELS.cancel, ['r-1'])
  await notify(s.pool, CHANNELS.journal, [])
  await until('both channels\' ids', () => journal.length === 3 && cancel.length === 1, 10_000)
  t.same(journal, ['1', '2', '3'], 'one notification per transaction, each id on its own')
  t.same(cancel, ['r-1'])
})

t.test('ids whose list is longer than one payload are sent in chunks and arrive whole, in order', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const ids = Array.from({ length: 3000 }, (_, i) => 1_000_000 + i)
  t.ok(ids.join(',').length > 7000 * 2, 'more than two payloads\' worth')
  const raw = new pg.Client({ connectionString: s.url })
  await raw.connect()
  t.teardown(async () => { await raw.end() })
  const payloads: string[] = []
  raw.on('notification', (message) => { payloads.push(message.payload ?? '') })
  await raw.query(`LISTEN ${CHANNELS.journal}`)
  const got: string[] = []
  s.notifications.on(CHANNELS.journal, (id) => { got.push(id) })
  await notify(s.pool, CHANNELS.journal, ids)
  await until('every id', () => got.length >= ids.length, 10_000)
  t.same(got, ids.map(String))
  await until('every payload on the raw listener', () => payloads.join(',').split(',').length >= ids.length, 10_000)
  t.ok(payloads.length >= 3, `${payloads.length} notifications`)
  t.ok(payloads.every((p) => p.length <= 7000), 'each within the chunk size (the server\'s limit is 8 000 bytes)')
})

t.test('on returns the function that stops that listener; a channel nobody listens on is ignored', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const first: string[] = []
  const second: string[] = []
  const stop = s.notifications.on(CHANNELS.journal, (id) => { first.push(id) })
  s.notifications.on(CHANNELS.journal, (id) => { second.push(id) })
  await notify(s.pool, CHANNELS.journal, [1])
  await until('both to hear 1', () => first.length === 1 && second.length === 1, 10_000)
  stop()
  await notify(s.pool, CHANNELS.cancel, ['unheard'])
  await notify(s.pool, CHANNELS.journal, [2])
  await until('the second to hear 2', () => second.length === 2, 10_000)
  t.same(first, ['1'], 'the stopped listener heard nothing more')
  t.same(second, ['1', '2'])
})

t.test('a terminated listening connection is told, connected goes false, and it reconnects and listens again', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  const heard: string[] = []
  s.notifications.on(CHANNELS.cancel, (id) => { heard.push(id) })
  const { rows } = await s.pool.query<{ ok: boolean }>('SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1', [s.name])
  t.same(rows, [{ ok: true }], 'its one connection terminated')
  await until('the listener to notice', () => !s.notifications.connected, 10_000, 1)
  t.match(s.warnings, [{ msg: /notification connection was lost/ }])
  await until('the listener to be back', () => s.notifications.connected, 10_000)
  await notify(s.pool, CHANNELS.cancel, ['after'])
  await until('a notification after the reconnect', () => heard.includes('after'), 10_000)
  t.same(heard, ['after'])
  t.equal((await s.pool.query('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [s.name])).rowCount, 1, 'one listening connection again')
})

/** Run the closer fixture in `mode`; its output lines once it exited by itself. */
async function closer (t: Test, url: string, mode: string): Promise<{ code: number | null, lines: string[] }> {
  const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/notifications-closer.ts', url, mode], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (c: Buffer) => { out += c.toString() })
  // a retry timer left running would keep the process alive: bounded, then killed and failed
  const killer = setTimeout(() => { child.kill('SIGKILL') }, 60_000)
  t.teardown(() => { clearTimeout(killer); child.kill('SIGKILL') })
  const [code] = await once(child, 'exit') as [number | null]
  clearTimeout(killer)
  return { code, lines: out.trim().split('\n') }
}

t.test('close stops reconnecting: a process that closed its listener exits by itself', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  t.same(await closer(t, url, 'terminated'), { code: 0, lines: ['started connected=true', 'lost warned=1', 'closed'] }, 'after losing a live connection')
  t.same(await closer(t, url, 'refused'), { code: 0, lines: ['started connected=false warned=1', 'closed'] }, 'while retrying a server that refuses (start resolved after the first try)')
  t.same(await closer(t, url, 'connecting'), { code: 0, lines: ['closed connected=false', 'closed'] }, 'closed before its first connection was up')
})

t.test('a closed listener does not start again', async (t) => {
  const s = await setup(t)
  if (s === undefined) return
  await s.notifications.close()
  t.equal(s.notifications.connected, false)
  await s.notifications.start()
  t.equal(s.notifications.connected, false)
  t.equal((await s.pool.query('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [s.name])).rowCount, 0, 'no connection of its own')
})

/** A server that accepts connections and never answers (a partitioned database); counts them. */
async function silentServer (t: Test): Promise<{ port: number, connections: () => number }> {
  const sockets = new Set<Socket>()
  let count = 0
  const server = createServer((socket) => { count++; sockets.add(socket) })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { for (const socket of sockets) socket.destroy(); server.close() })
  return { port: (server.address() as AddressInfo).port, connections: () => count }
}

t.test('closed while its first connect hangs, start settles (it does not wait for a server that never answers)', async (t) => {
  const silent = await silentServer(t)
  const listener = new PgNotifications({ host: '127.0.0.1', port: silent.port, user: 'nobody', database: 'none' }, { warn: () => {} })
  const started = listener.start()
  await until('the first connect', () => silent.connections() === 1)
  const closed = listener.close()
  // bounded: without the fix both would wait for the server forever
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<'late'>((resolve) => { timer = setTimeout(() => { resolve('late') }, 10_000) })
  t.equal(await Promise.race([closed.then(() => 'closed' as const), late]), 'closed', 'close settled')
  t.equal(await Promise.race([started.then(() => 'started' as const), late]), 'started', 'start settled once closed')
  clearTimeout(timer)
  t.equal(listener.connected, false)
})

t.test('a connect the server never answers times out (10 s unless told otherwise) and is tried again: a partition does not leave the listener down for good', async (t) => {
  const silent = await silentServer(t)
  const warnings: string[] = []
  // no connectionTimeoutMillis given: the listener's own default applies (pg's is to wait forever)
  const listener = new PgNotifications({ host: '127.0.0.1', port: silent.port, user: 'nobody', database: 'none' }, { warn: (_obj, msg) => { warnings.push(msg) } })
  t.teardown(async () => { await listener.close() })
  const started = listener.start()
  // bounded: without a timeout the first connect would wait for the server forever
  await until('a second connect', () => silent.connections() >= 2, 20_000)
  await started
  t.equal(listener.connected, false, 'start settled once the first try failed')
  t.ok(warnings.length >= 1, 'the failure is told')
  t.pass('tried again')
})
