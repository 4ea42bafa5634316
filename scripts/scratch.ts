/**
 * Where throwaway files go: in memory (`/dev/shm`, a tmpfs) when it has room, else the temporary
 * folder. The test suite's files (its DATA_DIRs, SQLite databases, task graphs, locks) and its
 * PostgreSQL server's are many small files made and deleted: on ext4 under the suite's load the
 * kernel's inode allocation was a large part of the CPU (perf). With both in memory a full
 * `npm test` took 296 s instead of 352 s, and 502 s of CPU instead of 545 (this machine, two cores).
 */
import { statfsSync } from 'node:fs'
import { tmpdir } from 'node:os'

/** The room asked of `/dev/shm`: a PostgreSQL server's WAL may grow to `max_wal_size` (1 GiB), beside the rest. */
export const MEMORY_NEEDED = 2 * 1024 ** 3

/**
 * The folder to make a throwaway folder in: `shm` when `where` is `memory` and it has `needed`
 * bytes free, else the temporary folder (`disk`: for a benchmark's server whose commits must reach a disk;
 * under `npm test` the temporary folder is its scratch folder, itself in memory, and the smoke runs claim no timing).
 */
export function scratchParent (where: 'memory' | 'disk' = 'memory', shm = '/dev/shm', needed = MEMORY_NEEDED): string {
  if (where === 'memory') {
    try {
      const fs = statfsSync(shm)
      if (fs.bavail * fs.bsize >= needed) return shm
    } catch { /* no /dev/shm (not Linux) */ }
  }
  return tmpdir()
}
