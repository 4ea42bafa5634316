import type { Statement } from 'better-sqlite3'
import type { Db } from '../storage/database.js'
import { BOOTSTRAP_KEY_NAME, checkKey, ConfigKeys, newKeyRow, splitKey, toRecord, type ApiKeyRecord, type ConfigKey, type Identity, type KeyRefusal, type KeyRow, type KeyStore as KeyStoreContract, type NewKey } from '../storage/api-keys.js'

export { BOOTSTRAP_KEY_NAME, type ApiKeyRecord, type ConfigKey, type Identity, type KeyRefusal, type KeyStoreContract, type NewKey }

/**
 * API keys in SQLite (the {@link KeyStoreContract} contract; synchronous): made with `agent-host keys create`
 * (stored as a salted HMAC, the key shown once) or listed in API_KEYS. Keys look like
 * `ahk_<16 hex id>_<43 base64url>`; a key is found by its id and compared in constant time.
 */
export class SqliteKeyStore implements KeyStoreContract {
  readonly #db: Db
  readonly #config: ConfigKeys
  // every authenticated request looks its key up: prepare that once
  #byId: Statement | undefined

  constructor (db: Db, configKeys: ConfigKey[] = []) {
    this.#db = db
    this.#config = new ConfigKeys(configKeys)
  }

  create (options: NewKey): { key: string, record: ApiKeyRecord } {
    const { key, row } = newKeyRow(options)
    this.#db.prepare(`INSERT INTO api_keys (id, name, salt, hash, scopes, agents, created_at, expires_at, revoked_at)
      VALUES (@id, @name, @salt, @hash, @scopes, @agents, @created_at, @expires_at, @revoked_at)`).run(row)
    return { key, record: toRecord(row) }
  }

  bootstrap (key: string): ApiKeyRecord | undefined {
    if (this.#db.prepare('SELECT 1 FROM api_keys WHERE name = ?').get(BOOTSTRAP_KEY_NAME) !== undefined) return undefined
    return this.create({ name: BOOTSTRAP_KEY_NAME, scopes: ['admin'], key }).record
  }

  usable (now = new Date()): number {
    const row = this.#db.prepare('SELECT count(*) AS n FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)').get(now.toISOString()) as { n: number }
    return row.n + this.#config.count
  }

  list (): ApiKeyRecord[] {
    const rows = this.#db.prepare('SELECT * FROM api_keys ORDER BY created_at, id').all() as KeyRow[]
    return [...rows.map(toRecord), ...this.#config.records]
  }

  revoke (idOrName: string): number {
    return this.#db.prepare('UPDATE api_keys SET revoked_at = ? WHERE (id = ? OR name = ?) AND revoked_at IS NULL').run(new Date().toISOString(), idOrName, idOrName).changes
  }

  verify (presented: string, now = new Date()): Identity | KeyRefusal {
    const configured = this.#config.find(presented)
    if (configured !== undefined) return configured
    const { id, secret } = splitKey(presented)
    this.#byId ??= this.#db.prepare('SELECT * FROM api_keys WHERE id = ?')
    return checkKey(this.#byId.get(id) as KeyRow | undefined, secret, now)
  }
}

/** The caller when AUTH_MODE is off: anonymous, holding every scope. */
export const ANONYMOUS: Identity = { id: 'anonymous', name: 'anonymous', scopes: new Set(['admin']), agents: null, anonymous: true }
