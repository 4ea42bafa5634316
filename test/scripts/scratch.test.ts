import t from 'tap'
import { statfsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { scratchParent } from '../../scripts/scratch.js'

// A throwaway server's test databases are some 300 files each: made on ext4 under the suite's load
// they cost the server 3 to 8 times the CPU they cost in memory
t.test('throwaway files (the tests\' own, a PostgreSQL server\'s) go in memory when /dev/shm has room, on the disk when asked or when it has none', async (t) => {
  const room = (() => { try { const fs = statfsSync('/dev/shm'); return fs.bavail * fs.bsize } catch { return 0 } })()
  if (room >= 2 * 1024 ** 3) t.equal(scratchParent(), '/dev/shm', 'this machine has room: in memory')
  else t.equal(scratchParent(), tmpdir(), 'this machine has no room in /dev/shm: on the disk')
  t.equal(scratchParent('disk'), tmpdir(), 'a benchmark\'s durable server, on the disk')
  t.equal(scratchParent('memory', '/no/such/shm'), tmpdir(), 'no /dev/shm (not Linux): on the disk')
  t.equal(scratchParent('memory', tmpdir(), Number.MAX_SAFE_INTEGER), tmpdir(), 'too little room: on the disk')
  t.equal(scratchParent('memory', '/dev/shm', 1), room > 0 ? '/dev/shm' : tmpdir(), 'room enough')
})
