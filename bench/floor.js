// The floor of a JSON request's durable work (issue 33): what the writes of one `/v1/assist` run of
// the echo agent cost with no HTTP, no engine and no agent, 50 runs at a time as the group commit
// batches them under 50 connections, on a fresh database in this process:
//   stores: the calls the engine makes, through the SQLite stores the server uses (the run ledger's
//     lookup and start with its session claim, the agent's value get and store, a journal row, the
//     finish with its answer, interaction and audit row; the search index filled in the background);
//   bare:   the same rows written by plain prepared statements, in two transactions per 50 runs (their
//     starts, then their ends), checkpointed once a second, with no savepoint, hash chain, JSON,
//     search index or promise: SQLite's own cost.
// CPU per run (this process, its checkpointer thread included) and bytes written per run
// (/proc/self/io), in interleaved rounds, medians. The server's whole cost is `bench/cost.js`'s.
//   npm run build && node bench/floor.js [--runs=20000] [--rounds=3] [--page-size=4096] [--smoke]
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { arg, load, saveResult, tempDir } from './common.js'

const runs = arg('runs', 20000, 200)
const rounds = arg('rounds', 3, 1)
const pageSize = arg('page-size', 4096)
const BATCH = 50

const { loadConfig } = await load('config')
const { openSqliteStores } = await load('storage/sqlite/index')
const { openDatabase } = await load('storage/sqlite/database')

const written = () => Number(/write_bytes: (\d+)/.exec(readFileSync('/proc/self/io', 'utf8'))[1])
const quiet = { trace () {}, debug () {}, info () {}, warn () {}, error () {}, fatal () {}, child () { return quiet } }
// what the echo requests of bench/assist.js carry: a ~1 KB envelope whose query the answer repeats
// (in the journal's result and CLOSE frames, the stored answer and the interaction), and a counter
// the agent keeps in the session
const QUERY = 'hello benchmark '.repeat(36)
const ENVELOPE = JSON.stringify({ request_id: randomUUID(), context: { session_id: randomUUID(), agent_id: randomUUID(), user: { user_id: 'bench', tier: 'free', locale: 'en-GB' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() }, payload: { session_id: randomUUID(), payload: { query: QUERY } } })
const OUTPUT = { echo: QUERY, calls: 1 }
const FRAME = [
  JSON.stringify({ stream_id: randomUUID(), op: 'EVENT', t: new Date().toISOString(), p: { type: 'result', data: OUTPUT } }),
  JSON.stringify({ stream_id: randomUUID(), seq: 0, op: 'CLOSE', t: new Date().toISOString(), p: { reason: 'done' } })
].join('\n')
const ANSWER = { request_id: randomUUID(), status: 'success', output: OUTPUT, metrics: { latency_ms: 1.234, packets: 2 } }

/** Through the stores: each run as the engine writes it, 50 at a time. */
async function stores (dir) {
  // DB_* and SESSION_SEARCH from the environment pass through, to measure settings against each other
  const settings = Object.fromEntries(Object.entries(process.env).filter(([key]) => key.startsWith('DB_') || key === 'SESSION_SEARCH'))
  const config = loadConfig({ ...settings, DATA_DIR: dir, DB_CHECKPOINT_INTERVAL_MS: '1000', DB_PAGE_SIZE: String(pageSize) })
  const opened = openSqliteStores(config, { log: quiet, serving: true })
  await opened.ready()
  const ledger = opened.ledger
  const sessions = Array.from({ length: BATCH }, () => randomUUID())
  const one = async (sessionId) => {
    const requestId = randomUUID()
    const token = randomUUID()
    await ledger.get(requestId)
    await ledger.start({ request_id: requestId, envelope_hash: 'h', envelope: ENVELOPE, session_id: sessionId, agent_id: 'echo', main_stream_id: 's', owner_instance: 'i', owner_pid: 1, owner_key: 'k', lease_token: token, lease_expires_at: Date.now() + 30000 }, { sessionId, userId: 'u', keyId: 'k' })
    const session = opened.sessions.open(sessionId, { user_id: 'u', tier: 'free', locale: 'en' })
    await session.store('count', await session.get('count', 0) + 1)
    ledger.append(requestId, token, { ord: 1, stream_id: 's', seq: 0, frame: FRAME })
    await ledger.finish({ requestId, token, reason: 'done', status: 200, response: ANSWER },
      { request_id: requestId, session_id: sessionId, user_id: 'u', agent_id: 'echo', agent_request_id: requestId, root_request_id: requestId, timestamp: new Date().toISOString(), status: 'done', input: { query: QUERY }, output: OUTPUT },
      { actor: 'k', action: 'assist', resource: 'echo', success: true, request_id: requestId, details: { agent: 'echo', end: 'done', packets: 2 } })
  }
  return {
    batch: async () => { await Promise.all(sessions.map(one)) },
    close: async () => { await opened.close() }
  }
}

/** The same rows by plain statements: SQLite's floor. */
async function bare (dir) {
  // checkpointed once a second, as the server's checkpointer does (a hot page is copied once a checkpoint)
  const db = openDatabase(dir, { cacheKiB: 65536, autoCheckpoint: false, pageSize })
  let checkpointed = performance.now()
  const start = db.prepare(`INSERT INTO runs (request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, owner_instance, owner_pid, owner_key, lease_token, lease_expires_at, started_at)
    VALUES (?, 'h', ?, ?, 'echo', 's', 'running', 'i', 1, 'k', ?, ?, ?)`)
  const finish = db.prepare("UPDATE runs SET state = 'ended', end_reason = 'done', ended_at = ?, response_status = 200, response = ? WHERE request_id = ? AND state = 'running' AND lease_token = ?")
  const journal = db.prepare('INSERT INTO journal (run_id, ord, count, frames) VALUES (?, 1, 1, ?)')
  const touch = db.prepare("INSERT INTO sessions (session_id, user_id, created_at, updated_at, key_id) VALUES (?, 'u', ?, ?, 'k') ON CONFLICT (session_id) DO UPDATE SET updated_at = excluded.updated_at")
  const value = db.prepare("INSERT INTO session_values (session_id, key, value, updated_at, pending) VALUES (?, 'count', ?, ?, 1) ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, pending = 1")
  const interaction = db.prepare("INSERT INTO interactions (request_id, session_id, agent_id, agent_request_id, root_request_id, timestamp, status, input, output) VALUES (?, ?, 'echo', ?, ?, ?, 'done', ?, ?)")
  const audit = db.prepare("INSERT INTO audit_log (timestamp, actor, action, resource, success, request_id, details, previous_hash, integrity_hash) VALUES (?, 'k', 'assist', 'echo', 1, ?, '{}', 'p', 'h')")
  const head = db.prepare("INSERT INTO audit_head (id, audit_id, integrity_hash) VALUES (1, ?, 'h') ON CONFLICT (id) DO UPDATE SET audit_id = excluded.audit_id")
  const sessions = Array.from({ length: BATCH }, () => randomUUID())
  const answer = JSON.stringify(ANSWER)
  const input = JSON.stringify({ query: QUERY })
  const output = JSON.stringify(OUTPUT)
  const starts = db.transaction((batch) => {
    const now = new Date().toISOString()
    for (const r of batch) { touch.run(r.session, now, now); r.runId = start.run(r.id, ENVELOPE, r.session, r.token, Date.now() + 30000, Date.now()).lastInsertRowid }
  })
  const ends = db.transaction((batch) => {
    const now = new Date().toISOString()
    for (const r of batch) {
      value.run(r.session, '1', now)
      journal.run(r.runId, FRAME)
      finish.run(Date.now(), answer, r.id, r.token)
      touch.run(r.session, now, now)
      interaction.run(r.id, r.session, r.id, r.id, now, input, output)
      head.run(audit.run(now, r.id).lastInsertRowid)
    }
  })
  return {
    batch: async () => {
      const batch = sessions.map((session) => ({ id: randomUUID(), token: randomUUID(), session }))
      starts.immediate(batch)
      ends.immediate(batch)
      if (performance.now() - checkpointed >= 1000) {
        db.pragma('wal_checkpoint(PASSIVE)')
        checkpointed = performance.now()
      }
    },
    close: async () => { db.close() }
  }
}

const TARGETS = { stores, bare }
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const results = Object.fromEntries(Object.keys(TARGETS).map((name) => [name, []]))
for (let round = 0; round < rounds; round++) {
  for (const [name, open] of Object.entries(TARGETS)) {
    const data = tempDir()
    const target = await open(data.dir)
    try {
      await target.batch()
      const cpu = process.cpuUsage()
      const bytes = written()
      const started = performance.now()
      for (let done = 0; done < runs; done += BATCH) await target.batch()
      const used = process.cpuUsage(cpu)
      results[name].push({ cpu_us_per_run: (used.user + used.system) / runs, disk_bytes_per_run: (written() - bytes) / runs, runs_per_second: runs / (performance.now() - started) * 1000 })
    } finally {
      await target.close()
      data.remove()
    }
  }
}
const summary = Object.fromEntries(Object.entries(results).map(([name, rs]) => [name, Object.fromEntries(Object.keys(rs[0]).map((k) => [k, median(rs.map((r) => r[k]))]))]))
console.log(`\nthe durable writes of ${runs} JSON runs, ${BATCH} at a time, ${pageSize}-byte pages, medians of ${rounds} rounds`)
console.log('target   CPU µs/run   KiB written/run    runs/s')
for (const [name, s] of Object.entries(summary)) console.log(`${name.padEnd(8)} ${s.cpu_us_per_run.toFixed(1).padStart(10)} ${(s.disk_bytes_per_run / 1024).toFixed(1).padStart(17)} ${s.runs_per_second.toFixed(0).padStart(9)}`)
const ratios = { 'CPU stores / bare': summary.stores.cpu_us_per_run / summary.bare.cpu_us_per_run, 'disk stores / bare': summary.stores.disk_bytes_per_run / summary.bare.disk_bytes_per_run }
console.log('')
for (const [name, value] of Object.entries(ratios)) console.log(`${name.padEnd(20)} ${value.toFixed(2)}`)
saveResult('floor', { settings: { runs, rounds, batch: BATCH, page_size: pageSize }, rounds: results, median: summary, ratios })
