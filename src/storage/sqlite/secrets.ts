import type { Db } from './database.js'
import type { AuditInput } from '../audit.js'
import type { SecretKeyring } from '../secret-keyring.js'
import { resealRow, SECRET_COLUMNS, type StoredSecrets } from '../secrets.js'

/**
 * The stored secrets ({@link SECRET_COLUMNS}) and the key ids in use (`secret_keys`) on SQLite,
 * synchronous: a rewrite of every secret is one immediate transaction (a savepoint inside the group
 * writer's). What a value is sealed with and for is the keyring's and the port's, never this file's.
 */
export class SqliteStoredSecrets implements StoredSecrets {
  readonly keyring: SecretKeyring
  readonly #db: Db
  readonly #audit: { append: (input: AuditInput) => unknown }

  constructor (db: Db, keyring: SecretKeyring, audit: { append: (input: AuditInput) => unknown }) {
    this.#db = db
    this.keyring = keyring
    this.#audit = audit
  }

  recorded (): string[] {
    return this.#db.prepare('SELECT kid FROM secret_keys ORDER BY kid').pluck().all() as string[]
  }

  record (kid: string): void {
    this.#db.prepare('INSERT INTO secret_keys (kid, recorded_at) VALUES (?, ?) ON CONFLICT (kid) DO NOTHING').run(kid, Date.now())
  }

  values (): string[] {
    const found: string[] = []
    for (const { table, columns } of SECRET_COLUMNS) {
      for (const row of this.#db.prepare(`SELECT ${columns.join(', ')} FROM ${table}`).raw().all() as Array<Array<string | null>>) {
        for (const value of row) if (value !== null) found.push(value)
      }
    }
    return found
  }

  reseal (change: (value: string, context: string) => string | undefined, recorded: readonly string[], audit?: (changed: number) => AuditInput): number {
    return this.#db.transaction(() => {
      let changed = 0
      for (const entry of SECRET_COLUMNS) {
        const { table, key, columns } = entry
        const rows = this.#db.prepare(`SELECT ${[...key, ...columns].join(', ')} FROM ${table}`).all() as Array<Record<string, string | null>>
        const update = this.#db.prepare(`UPDATE ${table} SET ${columns.map((c) => `${c} = ?`).join(', ')} WHERE ${key.map((k) => `${k} = ?`).join(' AND ')}`)
        for (const row of rows) {
          const next = resealRow(entry, row, change)
          if (next.changed === 0) continue
          update.run(...next.values, ...next.ids)
          changed += next.changed
        }
      }
      this.#db.prepare('DELETE FROM secret_keys').run()
      const add = this.#db.prepare('INSERT INTO secret_keys (kid, recorded_at) VALUES (?, ?)')
      for (const kid of recorded) add.run(kid, Date.now())
      if (audit !== undefined) this.#audit.append(audit(changed))
      return changed
    }).immediate()
  }
}
