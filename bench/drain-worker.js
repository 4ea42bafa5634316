// One worker process of bench/claims.js: claim and complete `w` tasks until none is left or the
// time is up; print how many and when (ms since epoch) the first claim and last completion were.
import { load } from './common.js'

const { openDatabase } = await load('storage/database')
const { FileTaskStore } = await load('runtime/file-task-store')
const { SqliteTaskStore } = await load('runtime/sqlite-task-store')

const [kind, dataDir, owner, seconds] = process.argv.slice(2)
const db = kind === 'sqlite' ? openDatabase(dataDir) : undefined
const store = db !== undefined ? new SqliteTaskStore(db) : new FileTaskStore(dataDir)
const deadline = Date.now() + Number(seconds) * 1000
let first
let last
let done = 0
while (Date.now() < deadline) {
  const task = await store.claim('w', owner, 60_000)
  if (task === undefined) break
  first ??= Date.now()
  await store.complete(task.id, { owner, attempt: task.attempt }, {})
  last = Date.now()
  done++
}
db?.close()
process.stdout.write(JSON.stringify({ done, first, last }) + '\n')
