import t from 'tap'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteRunStore } from '../../src/storage/sqlite/runs.js'
import { type JournalRow } from '../../src/storage/runs.js'
import { tempDataDir, type Teardown } from '../helper.js'

const MAIN = 'a0000000-0000-4000-8000-00000000000a'
const SUB = 'a0000000-0000-4000-8000-00000000000b'

function store (t: Teardown): SqliteRunStore {
  const db = openDatabase(tempDataDir(t))
  t.teardown(() => { db.close() })
  const runs = new SqliteRunStore(db)
  runs.start({ request_id: 'r1', envelope_hash: 'h', envelope: '{}', session_id: 's', agent_id: 'a', main_stream_id: MAIN, owner_instance: 'i', owner_pid: 1, owner_key: null, lease_token: 'tok', lease_expires_at: Date.now() + 60_000 })
  return runs
}

const frame = (streamId: string, seq: number | null, p: unknown): string =>
  seq === null ? JSON.stringify({ stream_id: streamId, op: 'EVENT', t: 'now', p }) : JSON.stringify({ stream_id: streamId, seq, op: 'DELTA', t: 'now', p })

t.test('a flush is one stored row; rows() gives its packets one by one, from any cursor, up to any limit', async (t) => {
  const runs = store(t)
  const written: JournalRow[] = []
  const add = (streamId: string, seq: number | null, p: unknown): void => {
    const row = { ord: written.length + 1, stream_id: streamId, seq, frame: frame(streamId, seq, p) }
    written.push(row)
    runs.append('r1', 'tok', row)
  }
  add(MAIN, 1, { stream_id: SUB, seq: 2, note: 'a nested object that looks like the head of a later frame' })
  add(SUB, 1, 'line one\nline two')
  add(MAIN, null, { hidden: true })
  t.same(runs.flush(), [])
  add(MAIN, 2, 'a')
  add(SUB, 2, 'b')
  t.same(runs.flush(), [])
  t.same(runs.rows('r1'), written)
  t.same(runs.rows('r1', 2), written.slice(2), 'a cursor inside a stored row')
  t.same(runs.rows('r1', 1, 2), written.slice(1, 3), 'a limit inside a stored row')
  t.same(runs.rows('r1', 2, 2), written.slice(2, 4), 'a page across two stored rows')
  t.same(runs.rows('r1', 5), [])
  t.equal(runs.ordOf('r1', SUB, 1), 2)
  t.equal(runs.ordOf('r1', SUB, 2), 5, 'found by its own head, not by an earlier payload that looks like one')
  t.equal(runs.ordOf('r1', MAIN, 2), 4)
  t.equal(runs.ordOf('r1', MAIN, 3), undefined)
  t.equal(runs.ordOf('nope', MAIN, 1), undefined)
})

t.test('rows of a run whose lease was taken are dropped, and the run is reported lost', async (t) => {
  const runs = store(t)
  runs.append('r1', 'stale', { ord: 1, stream_id: MAIN, seq: 1, frame: frame(MAIN, 1, 'x') })
  t.same(runs.flush(), ['r1'])
  t.same(runs.rows('r1'), [])
})
