/** The task stores the multi-process tests (concurrency, chaos) run against, each with where its worker processes find it. */
import type { Test } from 'tap'
import { FileTaskStore } from '../../../src/storage/file/tasks.js'
import { PgTaskStore } from '../../../src/storage/postgres/tasks.js'
import { SqliteTaskStore } from '../../../src/storage/sqlite/tasks.js'
import type { TaskStore } from '../../../src/storage/tasks/task-store.js'
import { openDatabase } from '../../../src/storage/sqlite/database.js'
import { openPostgres } from '../../../src/storage/postgres/database.js'
import { tempDataDir } from '../../helper.js'
import { pgDatabase } from '../../pg.js'

/** A new, empty store and where its workers find it: a folder, or a database URL. */
export type MadeStore = { store: TaskStore, location: string } | undefined

/**
 * A maker of a new, empty store of each kind (undefined when PostgreSQL is missing, after the
 * loud skip of `pgDatabase`).
 * @param fileStaleMs the file store's lock stale period (its default when not given)
 */
export function taskStoreMakers (fileStaleMs?: number): Record<'file' | 'sqlite' | 'postgres', (t: Test) => Promise<MadeStore>> {
  return {
    file: async (t) => {
      const dir = tempDataDir(t)
      return { store: new FileTaskStore(dir, fileStaleMs === undefined ? {} : { staleMs: fileStaleMs }), location: dir }
    },
    sqlite: async (t) => {
      const dir = tempDataDir(t)
      const db = openDatabase(dir)
      t.teardown(() => db.close())
      return { store: new SqliteTaskStore(db), location: dir }
    },
    postgres: async (t) => {
      const url = await pgDatabase(t)
      if (url === undefined) return undefined
      const pool = await openPostgres(url)
      t.teardown(async () => { await pool.end() })
      return { store: new PgTaskStore(pool), location: url }
    }
  }
}
