import type pg from 'pg'
import type { AuditInput } from '../audit.js'
import type { SecretKeyring } from '../secret-keyring.js'
import { resealRow, SECRET_COLUMNS, type StoredSecrets } from '../secrets.js'
import { inTransaction } from './database.js'

/**
 * The stored secrets ({@link SECRET_COLUMNS}) and the key ids in use (`secret_keys`) on PostgreSQL,
 * shared by every instance: a rewrite of every secret is one transaction, which holds `secret_keys`
 * exclusively (two instances sealing an earlier version's plain values at boot take turns: the
 * second finds them sealed) and locks the rows it reads. What a value is sealed with and for is the
 * keyring's and the port's, never this file's.
 */
export class PgStoredSecrets implements StoredSecrets {
  readonly keyring: SecretKeyring
  readonly #pool: pg.Pool
  readonly #audit: { appendIn: (client: pg.ClientBase, input: AuditInput) => Promise<unknown> }

  constructor (pool: pg.Pool, keyring: SecretKeyring, audit: { appendIn: (client: pg.ClientBase, input: AuditInput) => Promise<unknown> }) {
    this.#pool = pool
    this.keyring = keyring
    this.#audit = audit
  }

  async recorded (): Promise<string[]> {
    const { rows } = await this.#pool.query<{ kid: string }>('SELECT kid FROM secret_keys ORDER BY kid')
    return rows.map((r) => r.kid)
  }

  async record (kid: string): Promise<void> {
    await this.#pool.query('INSERT INTO secret_keys (kid, recorded_at) VALUES ($1, $2) ON CONFLICT (kid) DO NOTHING', [kid, Date.now()])
  }

  async values (): Promise<string[]> {
    const found: string[] = []
    for (const { table, columns } of SECRET_COLUMNS) {
      const { rows } = await this.#pool.query<string[]>({ text: `SELECT ${columns.join(', ')} FROM ${table}`, rowMode: 'array' })
      for (const row of rows) for (const value of row) if (value !== null) found.push(value)
    }
    return found
  }

  async reseal (change: (value: string, context: string) => string | undefined, recorded: readonly string[], audit?: (changed: number) => AuditInput): Promise<number> {
    return await inTransaction(this.#pool, async (client) => {
      await client.query('LOCK TABLE secret_keys IN EXCLUSIVE MODE')
      let changed = 0
      for (const entry of SECRET_COLUMNS) {
        const { table, key, columns } = entry
        const { rows } = await client.query<Record<string, string | null>>(`SELECT ${[...key, ...columns].join(', ')} FROM ${table} FOR UPDATE`)
        const update = `UPDATE ${table} SET ${columns.map((c, i) => `${c} = $${i + 1}`).join(', ')} WHERE ${key.map((k, i) => `${k} = $${columns.length + i + 1}`).join(' AND ')}`
        for (const row of rows) {
          const next = resealRow(entry, row, change)
          if (next.changed === 0) continue
          await client.query(update, [...next.values, ...next.ids])
          changed += next.changed
        }
      }
      await client.query('DELETE FROM secret_keys')
      await client.query('INSERT INTO secret_keys (kid, recorded_at) SELECT unnest($1::text[]), $2', [recorded, Date.now()])
      if (audit !== undefined) await this.#audit.appendIn(client, audit(changed))
      return changed
    })
  }
}
