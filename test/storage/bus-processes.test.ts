// The event bus's store shared by processes, on SQLite (one DATA_DIR) and on PostgreSQL (one
// database): publications of one key at the same moment, claims racing for one subscription, a
// process killed holding a delivery, a feed followed while others publish.
import t, { type Test } from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { spawn, type ChildProcessByStdio } from 'node:child_process'
import { once } from 'node:events'
import type { Readable, Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import type { BusEvent } from '../../src/storage/bus.js'
import { openBusStore, type OpenBusStore, type StoreKind } from '../fixtures/scripts/open-bus-store.js'
import { pgDatabase } from '../pg.js'
import { until } from '../socket.js'

/** A DATA_DIR of this test's own (test/helper.ts's would load the whole app; a store needs none of it). */
function tempDir (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-bus-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  return dir
}

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** Where the processes meet: a DATA_DIR, or a fresh database's URL (undefined: no PostgreSQL here, skipped). */
const locations: Record<StoreKind, (t: Test) => Promise<string | undefined>> = {
  sqlite: async (t) => tempDir(t),
  postgres: async (t) => await pgDatabase(t)
}

/** A worker process (test/fixtures/scripts/bus-store-worker.ts): its output lines so far, and its exit. */
interface Worker {
  child: ChildProcessByStdio<Writable, Readable, null>
  lines: string[]
  ready: Promise<void>
  exited: Promise<number | null>
}

function worker (t: Test, kind: StoreKind, location: string, ...args: string[]): Worker {
  const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/bus-store-worker.ts', kind, location, ...args], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] })
  const lines: string[] = []
  let partial = ''
  let ready!: () => void
  const isReady = new Promise<void>((resolve) => { ready = resolve })
  child.stdout.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString()).split('\n')
    partial = parts.pop() as string
    for (const line of parts) {
      if (line === 'ready') ready()
      else lines.push(line)
    }
  })
  const exited = once(child, 'exit').then(([code]) => code as number | null)
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  })
  return { child, lines, ready: isReady, exited }
}

/** Start every worker at once, when all are up. */
async function go (workers: Worker[]): Promise<void> {
  // the deadline's timer is cleared once they are up: left running, it held the file's process
  // open for a minute after its last test (the file took 80 s, of which 18 of CPU)
  const deadline = new AbortController()
  try {
    await Promise.race([Promise.all(workers.map(async (w) => await w.ready)), sleep(60_000, undefined, { signal: deadline.signal }).then(() => { throw new Error('the workers did not start') })])
  } finally {
    deadline.abort()
  }
  for (const w of workers) w.child.stdin.write('go\n')
}

async function open (t: Test, kind: StoreKind, location: string): Promise<OpenBusStore> {
  const opened = await openBusStore(kind, location)
  t.teardown(opened.close)
  return opened
}

const forAll = (): boolean => true

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind} store: two processes publishing the same keys at the same moment store each event once, and deliver it once`, async (t) => {
    const location = await locations[kind](t)
    if (location === undefined) return
    const { store, call } = await open(t, kind, location)
    await call(() => store.saveSubscription({ id: 's', agent: null, patterns: ['**'], filter: null, max_attempts: 3, backoff_ms: 0 }, Date.now()))
    const KEYS = 60
    const publishers = [worker(t, kind, location, 'publish', 'key-', String(KEYS), '1'), worker(t, kind, location, 'publish', 'key-', String(KEYS), '1')]
    await go(publishers)
    t.same(await Promise.all(publishers.map(async (p) => await p.exited)), [0, 0])
    const answers = publishers.flatMap((p) => p.lines.map((line) => line.split(' ') as [string, string, string, string]))
    t.equal(answers.length, 2 * KEYS)
    const byKey = new Map<string, Array<[string, string, string, string]>>()
    for (const a of answers) byKey.set(a[0], [...(byKey.get(a[0]) ?? []), a])
    t.equal(byKey.size, KEYS)
    t.ok([...byKey.values()].every((pair) => pair.filter((a) => a[3] === 'new').length === 1), 'each key stored by one process, a duplicate for the other')
    t.ok([...byKey.values()].every(([a, b]) => a?.[1] === b?.[1] && a?.[2] === b?.[2]), 'both were answered with the one event')
    const feed = await call(() => store.feed({ after: 0, now: Date.now(), limit: 1000 }))
    t.equal(feed.events.length, KEYS, 'one event per key stored')
    const { deliveries } = await call(() => store.claim(['s'], 'test', 60_000, Date.now(), 1000))
    t.equal(deliveries.length, KEYS, 'one delivery per key')
  })

  t.test(`${kind} store: two processes claiming one subscription's deliveries never handle one twice`, async (t) => {
    const location = await locations[kind](t)
    if (location === undefined) return
    const { store, call } = await open(t, kind, location)
    const now = Date.now()
    await call(() => store.saveSubscription({ id: 's', agent: null, patterns: ['**'], filter: null, max_attempts: 3, backoff_ms: 0 }, now))
    const EVENTS = 300
    for (let i = 0; i < EVENTS; i++) {
      await call(() => store.publish({ id: `e${i}`, type: 'x.y', key: `k${i}`, visibility: 'internal', priority: i % 10, target_agents: null, data: {}, source: 'test', owner_key: null, trace_id: null, published_at: now, expires_at: now + 3_600_000 }, forAll))
    }
    const drainers = [worker(t, kind, location, 'drain', 's', 'one'), worker(t, kind, location, 'drain', 's', 'two')]
    await go(drainers)
    t.same(await Promise.all(drainers.map(async (d) => await d.exited)), [0, 0])
    const handled = drainers.flatMap((d) => d.lines)
    t.equal(handled.length, EVENTS, 'as many handled as delivered')
    t.equal(new Set(handled.map((line) => line.split(' ')[0])).size, EVENTS, 'none handled twice')
    t.ok(handled.every((line) => line.endsWith(' 1')), 'each at its first attempt: no lease was shared')
    t.ok(drainers.every((d) => d.lines.length > 0), `both processes took a share: ${drainers.map((d) => d.lines.length).join(', ')}`)
    t.equal(await call(() => store.nextDue(['s'])), undefined, 'nothing left')
  })

  t.test(`${kind} store: a process killed holding a delivery: another process claims it once its lease lapsed, not before`, async (t) => {
    const location = await locations[kind](t)
    if (location === undefined) return
    const { store, call } = await open(t, kind, location)
    const now = Date.now()
    await call(() => store.saveSubscription({ id: 's', agent: null, patterns: ['**'], filter: null, max_attempts: 3, backoff_ms: 0 }, now))
    const { event } = await call(() => store.publish({ id: 'e', type: 'x.y', key: 'k', visibility: 'internal', priority: 5, target_agents: null, data: {}, source: 'test', owner_key: null, trace_id: null, published_at: now, expires_at: now + 3_600_000 }, forAll))
    // the clock is the test's: the holder claims at `now` for 10 s, the others claim at chosen times
    const holder = worker(t, kind, location, 'hold', 's', 'holder', String(now), '10000')
    await go([holder])
    await until('the holder to claim', () => holder.lines.length > 0, 60_000, 10)
    t.same(holder.lines, [`claimed ${event.seq}`])
    holder.child.kill('SIGKILL')
    await holder.exited
    t.same((await call(() => store.claim(['s'], 'other', 10_000, now + 9_999, 10))).deliveries, [], 'its lease still holds')
    const taken = await call(() => store.claim(['s'], 'other', 10_000, now + 10_000, 10))
    t.same(taken.deliveries.map((d) => [d.event.seq, d.attempts]), [[event.seq, 0]], 'claimed by another once the lease lapsed')
    t.equal(await call(() => store.ack('s', event.seq, 'holder')), false, 'the dead holder\'s lease counts for nothing now')
    t.equal(await call(() => store.ack('s', event.seq, 'other')), true)
  })

  t.test(`${kind} store: a follower tailing the feed sees every event of concurrent publishers once, those that committed late too`, async (t) => {
    const location = await locations[kind](t)
    if (location === undefined) return
    const { store, call } = await open(t, kind, location)
    const EACH = 80
    const publishers = ['a-', 'b-', 'c-'].map((prefix) => worker(t, kind, location, 'publish', prefix, String(EACH), '1'))
    const seen: BusEvent[] = []
    let cursor = await call(() => store.head())
    let done = false
    const exits = Promise.all(publishers.map(async (p) => await p.exited)).finally(() => { done = true })
    await go(publishers)
    // after the publishers exit, one more page: what committed last
    for (let last = false; !last;) {
      last = done
      const page = await call(() => store.feed({ after: cursor, now: Date.now(), limit: 7 }))
      seen.push(...page.events)
      if (page.next === cursor) await sleep(1)
      else last = false
      cursor = page.next
    }
    t.same(await exits, [0, 0, 0])
    const published = publishers.flatMap((p) => p.lines.map((line) => line.split(' ')[2]))
    t.equal(published.length, 3 * EACH)
    t.equal(seen.length, published.length, 'as many seen as published')
    t.same(new Set(seen.map((e) => e.id)), new Set(published), 'every event seen, none twice')
    t.ok(seen.every((e, i) => i === 0 || e.seq > (seen[i - 1] as BusEvent).seq), 'in seq order')
  })
}
