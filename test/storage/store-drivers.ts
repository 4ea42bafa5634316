// The whole `Stores` of each driver, as the server opens them, for the contract suites of the stores
// that have no narrower maker: a fresh SQLite DATA_DIR, or a PostgreSQL database of the test's own
// (none without PG_TEST_URL); `another` opens a second instance on the same database.
import type { Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { loadConfig } from '../../src/config.js'
import type { Stores } from '../../src/storage/stores.js'
import { openSqliteStores } from '../../src/storage/sqlite/index.js'
import { openPgStores } from '../../src/storage/postgres/index.js'
import { pgDatabase } from '../pg.js'
import { tempDataDir } from '../helper.js'

const quiet = { info: () => {}, warn: () => {}, error: () => {} }

export const drivers: Record<string, (t: Test) => Promise<{ stores: Stores, another: () => Promise<Stores> } | undefined>> = {
  sqlite: async (t) => {
    const config = loadConfig({ DATA_DIR: tempDataDir(t) })
    const open = async (): Promise<Stores> => {
      const stores = openSqliteStores(config, { instanceId: randomUUID(), log: quiet, serving: false })
      t.teardown(async () => { await stores.close() })
      return stores
    }
    return { stores: await open(), another: open }
  },
  postgres: async (t) => {
    const url = await pgDatabase(t)
    if (url === undefined) return undefined
    const config = loadConfig({ DATA_DIR: tempDataDir(t), DATABASE_URL: url })
    const open = async (): Promise<Stores> => {
      const stores = await openPgStores(config, { instanceId: randomUUID(), log: quiet, serving: false })
      t.teardown(async () => { await stores.close() })
      return stores
    }
    return { stores: await open(), another: open }
  }
}
