// How fast `audit verify` walks a large audit log, keyed (HMAC-SHA256 per row, AUDIT_KEY) against
// plain (SHA-256 per row), in alternating rounds, and how much memory it holds while it does: it
// streams the rows, so what it holds must not grow with the log.
// Run: npm run build && node --expose-gc bench/audit-verify.js   Options: --rows=<n> (default 1 000 000) --rounds=<n>
import { arg, load, mean, saveResult, tempDir } from './common.js'

const { openDatabase } = await load('storage/sqlite/database')
const { SqliteAuditLog } = await load('storage/sqlite/audit')
const { AuditKeyring } = await load('storage/audit-key')
const rows = arg('rows', 1_000_000, 2000)
const rounds = arg('rounds', 3, 1)

/** A log of `rows` rows (in transactions of 10 000, as a busy server's appends would leave it). */
function fill (keyring) {
  const data = tempDir()
  const db = openDatabase(data.dir)
  const audit = new SqliteAuditLog(db, keyring)
  const started = Date.now()
  for (let done = 0; done < rows; done += 10_000) {
    db.transaction(() => {
      for (let i = done; i < Math.min(rows, done + 10_000); i++) {
        audit.append({ actor: `key-${i % 50}`, action: 'assist', resource: 'agent:echo', success: i % 7 !== 0, claimed_user: `user-${i % 1000}`, request_id: `req-${i}`, trace_id: `trace-${i}`, details: { agent: 'echo', end: 'done', packets: i % 40 } })
      }
    })()
  }
  console.log(`${keyring.keyed ? 'keyed' : 'plain'} log of ${rows} rows written in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  return { db, data, keyring }
}

/** One verify; what the heap holds after it beyond what it held before (with --expose-gc, after a collection on each side). */
function verify (log) {
  global.gc?.()
  const before = process.memoryUsage().heapUsed
  const result = new SqliteAuditLog(log.db, log.keyring, { readOnly: true }).verify([])
  global.gc?.()
  const held = process.memoryUsage().heapUsed - before
  if (!result.ok || result.rows !== rows) throw new Error(`verify failed: ${JSON.stringify(result)}`)
  return { seconds: result.seconds, rows_per_second: result.rows_per_second, heap_growth_mib: Math.round(held / 2 ** 20 * 10) / 10, rss_mib: Math.round(process.memoryUsage().rss / 2 ** 20) }
}

const keyed = fill(new AuditKeyring('k'.repeat(64)))
const plain = fill(new AuditKeyring(''))
const results = { keyed: [], plain: [] }
for (let i = 0; i < rounds; i++) {
  results.keyed.push(verify(keyed))
  results.plain.push(verify(plain))
}
for (const log of [keyed, plain]) {
  log.db.close()
  log.data.remove()
}

console.log('\nround  log     seconds   rows/s     heap growth MiB  rss MiB')
for (let i = 0; i < rounds; i++) {
  for (const [name, r] of [['keyed', results.keyed[i]], ['plain', results.plain[i]]]) {
    console.log(`${String(i + 1).padEnd(6)} ${name.padEnd(7)} ${r.seconds.toFixed(2).padStart(7)} ${String(r.rows_per_second).padStart(9)} ${String(r.heap_growth_mib).padStart(15)} ${String(r.rss_mib).padStart(8)}`)
  }
}
const k = mean(results.keyed.map((r) => r.rows_per_second))
const p = mean(results.plain.map((r) => r.rows_per_second))
console.log(`\n${rows} rows: keyed ${k.toFixed(0)} rows/s (${(rows / k).toFixed(1)} s), plain ${p.toFixed(0)} rows/s; ratio keyed/plain = ${(k / p).toFixed(3)}`)
saveResult('audit-verify', { settings: { rows, rounds }, rounds: results, mean: { keyed: k, plain: p }, ratio: k / p })
