import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { openPostgres, PG_LOCKS } from '../../../src/storage/postgres/database.js'
import { PgStreamGate, type PgStreamGateOptions } from '../../../src/storage/postgres/stream-slots.js'
import { pgDatabase, withDatabase } from '../../pg.js'

const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

type Slot = Awaited<ReturnType<PgStreamGate['acquire']>>

/** Gates of instances on one database, each on a pool of its own, closed after the test. */
async function cluster (t: Test): Promise<{ url: string, gate: (options: Partial<PgStreamGateOptions> & { instance: string }) => Promise<PgStreamGate>, gateQuery: (sql: string, values?: unknown[]) => Promise<Array<Record<string, unknown>>> } | undefined> {
  const url = await pgDatabase(t)
  if (url === undefined) return undefined
  const pools: pg.Pool[] = [await openPostgres(url)]
  t.teardown(async () => { for (const pool of pools) await pool.end() })
  const first = pools[0] as pg.Pool
  return {
    url,
    gateQuery: async (sql, values = []) => (await first.query(sql, values)).rows,
    gate: async (options) => {
      const pool = await openPostgres(url)
      pools.push(pool)
      const gate = new PgStreamGate(pool, { max: 0, perCaller: 2, leaseMs: 30_000, ...options })
      t.teardown(async () => { await gate.close() })
      return gate
    }
  }
}

function taken (slot: Slot): () => void {
  if (typeof slot !== 'function') throw new Error(`refused: ${slot}`)
  return slot
}

/** Poll `check` until it holds (bounded). */
async function until (what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!await check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

t.test('MAX_STREAMS_PER_CALLER counts a caller\'s streams on every instance; a slot given back on one can be taken on another', async (t) => {
  const c = await cluster(t)
  if (c === undefined) return
  const a = await c.gate({ instance: 'a' })
  const b = await c.gate({ instance: 'b' })
  const first = taken(await a.acquire('alice'))
  taken(await b.acquire('alice'))
  t.equal(await a.acquire('alice'), 'caller', 'a third on instance A')
  t.equal(await b.acquire('alice'), 'caller', 'a third on instance B')
  t.equal(await a.held('alice'), 2)
  t.same([a.open, b.open], [1, 1], 'refusals hold nothing')
  taken(await b.acquire('bob'))
  t.equal(await b.held('bob'), 1, 'another caller counts alone')
  first()
  first()
  t.equal(a.open, 0, 'given back once, however often it is called')
  await until('the slot to be given back', async () => await b.held('alice') === 1)
  taken(await b.acquire('alice'))
  t.equal(await a.acquire('alice'), 'caller')
})

t.test('acquires racing on two instances: exactly MAX_STREAMS_PER_CALLER taken', async (t) => {
  const c = await cluster(t)
  if (c === undefined) return
  const gates = [await c.gate({ instance: 'a', perCaller: 3 }), await c.gate({ instance: 'b', perCaller: 3 })]
  const slots = await Promise.all(Array.from({ length: 20 }, async (_, i) => await gates[i % 2]?.acquire('racer')))
  t.equal(slots.filter((s) => typeof s === 'function').length, 3)
  t.equal(slots.filter((s) => s === 'caller').length, 17)
  t.equal(await gates[0]?.held('racer'), 3)
})

t.test('MAX_STREAMS stays each instance\'s own capacity; a full caller is told before a full server', async (t) => {
  const c = await cluster(t)
  if (c === undefined) return
  const small = await c.gate({ instance: 'small', max: 1, perCaller: 2 })
  const big = await c.gate({ instance: 'big', max: 10, perCaller: 2 })
  taken(await small.acquire('carol'))
  t.equal(await small.acquire('dave'), 'total', 'instance "small" is full')
  taken(await big.acquire('dave'))
  taken(await big.acquire('carol'))
  t.equal(await small.acquire('carol'), 'caller', 'carol holds her 2 (one on each instance): the caller\'s limit is answered first')
  const local = new PgStreamGate(undefined as unknown as pg.Pool, { max: 1, perCaller: 0, instance: 'local' })
  await local.start()
  const slot = taken(await local.acquire('erin'))
  t.equal(await local.acquire('erin'), 'total', 'without a per-caller quota: the capacity only, and no database')
  slot()
  taken(await local.acquire('erin'))
  await local.close()
})

t.test('a killed instance\'s slots come back once its lease lapses', async (t) => {
  const c = await cluster(t)
  if (c === undefined) return
  const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/stream-slot-holder.ts', c.url, 'kate', '2', '600'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  await until('the child to hold its slots', async () => out.includes('held'), 60_000)
  const survivor = await c.gate({ instance: 'survivor', leaseMs: 600 })
  t.equal(await survivor.acquire('kate'), 'caller', 'the child holds both')
  t.ok(child.kill('SIGKILL'))
  await once(child, 'exit')
  await until('the killed instance\'s lease to lapse', async () => await survivor.held('kate') === 0)
  taken(await survivor.acquire('kate'))
  taken(await survivor.acquire('kate'))
  await survivor.heartbeat()
  const admin = new pg.Client({ connectionString: c.url })
  await admin.connect()
  t.teardown(async () => { await admin.end() })
  const leases = await admin.query<{ instance: string }>('SELECT instance FROM stream_leases ORDER BY instance')
  t.same(leases.rows.map((r) => r.instance), ['survivor'], 'a heartbeat deleted the lapsed lease')
})

t.test('an instance that finds its lease lapsed takes a new one and puts back the slots of its open streams', async (t) => {
  const c = await cluster(t)
  if (c === undefined) return
  const paused = await c.gate({ instance: 'paused' })
  const other = await c.gate({ instance: 'other' })
  const admin = new pg.Client({ connectionString: c.url })
  await admin.connect()
  t.teardown(async () => { await admin.end() })
  const lapse = async (): Promise<void> => { await admin.query("UPDATE stream_leases SET lease_expires_at = 0 WHERE instance = 'paused'") }

  taken(await paused.acquire('lia'))
  await lapse()
  t.equal(await other.held('lia'), 0, 'a lapsed lease\'s slots count no more')
  taken(await other.acquire('lia'))
  taken(await other.acquire('lia'))
  t.equal(await paused.acquire('lia'), 'caller', 'the paused instance takes a new lease, puts back the slot of its open stream, and finds the quota full')
  t.equal(await other.held('lia'), 3, 'its open stream counts again, past the quota: the streams are open')

  await lapse()
  await other.heartbeat()
  t.equal((await admin.query("SELECT 1 FROM stream_leases WHERE instance = 'paused'")).rowCount, 0, 'another instance deleted the lapsed lease, its slots with it')
  t.equal(await other.held('lia'), 2)
  await paused.heartbeat()
  t.equal(await other.held('lia'), 3, 'its heartbeat took a new lease and put its slot back')

  // a slot whose release never reached the database: the heartbeat deletes it
  const holder = (await admin.query<{ holder: string }>("SELECT holder FROM stream_leases WHERE instance = 'paused'")).rows[0]?.holder
  await admin.query("INSERT INTO stream_slots (id, holder, caller, acquired_at) VALUES ('stray', $1, 'lia', 0)", [holder])
  t.equal(await other.held('lia'), 4)
  await paused.heartbeat()
  t.equal(await other.held('lia'), 3, 'the stray row is gone')
})

t.test('close gives every slot back at once, and a closed gate takes no more', async (t) => {
  const c = await cluster(t)
  if (c === undefined) return
  const leaving = await c.gate({ instance: 'leaving' })
  const staying = await c.gate({ instance: 'staying' })
  taken(await leaving.acquire('mia'))
  taken(await leaving.acquire('mia'))
  t.equal(await staying.acquire('mia'), 'caller')
  await leaving.close()
  t.equal(await staying.held('mia'), 0)
  taken(await staying.acquire('mia'))
  t.equal(await leaving.acquire('mia'), 'total', 'closed: full')
  await leaving.heartbeat()
  t.equal(await staying.held('mia'), 1, 'a closed gate\'s heartbeat takes no lease')
  const unstarted = await c.gate({ instance: 'unstarted' })
  await unstarted.close()
})

t.test('failures: an unreachable database rejects the acquire (and the next one tries again); a failed heartbeat is told; a lease shorter than a round trip is full', async (t) => {
  const c = await cluster(t)
  if (c === undefined) return
  const errors: Error[] = []
  const broken = new pg.Pool({ connectionString: withDatabase(c.url, 'no_such_database') })
  t.teardown(async () => { await broken.end() })
  const away = new PgStreamGate(broken, { max: 1, perCaller: 1, instance: 'away', onError: (err) => { errors.push(err) } })
  await t.rejects(away.acquire('nia'), /no_such_database/)
  await t.rejects(away.acquire('nia'), /no_such_database/, 'tried again')
  t.equal(away.open, 0, 'nothing held')

  const pool = await openPostgres(c.url)
  const gate = new PgStreamGate(pool, { max: 0, perCaller: 1, instance: 'ending', onError: (err) => { errors.push(err) } })
  taken(await gate.acquire('nia'))
  await pool.end()
  await t.rejects(gate.acquire('nia'))
  t.equal(gate.open, 1, 'the failed acquire holds nothing')
  await gate.heartbeat()
  t.match(errors.at(-1)?.message, /after calling end/, 'the heartbeat\'s failure is told, not thrown')

  const hasty = await c.gate({ instance: 'hasty', leaseMs: 0 })
  t.equal(await hasty.acquire('olga'), 'total', 'a lease that lapses at once cannot hold a slot')
  t.equal(hasty.open, 0)
})

t.test('a slot committed under a lease that was replaced meanwhile is moved under the new one', async (t) => {
  const c = await cluster(t)
  if (c === undefined) return
  const mover = await c.gate({ instance: 'mover' })
  await mover.start()
  const admin = new pg.Client({ connectionString: c.url })
  await admin.connect()
  t.teardown(async () => { await admin.end() })
  const first = (await admin.query<{ holder: string }>("SELECT holder FROM stream_leases WHERE instance = 'mover'")).rows[0]?.holder as string
  // hold the caller's lock, so that the acquire waits with the first lease in hand
  await admin.query('BEGIN')
  await admin.query("SELECT pg_advisory_xact_lock($1, hashtext('pia'))", [PG_LOCKS.streamQuota])
  const pending = mover.acquire('pia')
  await until('the acquire to wait for the lock', async () => (await c.gateQuery("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).length > 0)
  // meanwhile the lease lapses and the heartbeat replaces it; then the first lease is (as far as
  // the waiting acquire can tell) alive again
  await c.gateQuery("UPDATE stream_leases SET lease_expires_at = 0 WHERE instance = 'mover'")
  await mover.heartbeat()
  await c.gateQuery("INSERT INTO stream_leases (holder, instance, lease_expires_at) VALUES ($1, 'mover', 9999999999999)", [first])
  await admin.query('COMMIT')
  taken(await pending)
  const rows = await c.gateQuery("SELECT s.holder FROM stream_slots s WHERE s.caller = 'pia'")
  t.equal(rows.length, 1)
  t.not(rows[0]?.holder, first, 'the slot is held under the new lease')
})
