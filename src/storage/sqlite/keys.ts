import type { Statement } from 'better-sqlite3'
import type { Db } from './database.js'
import type { AuditInput } from '../audit.js'
import { BOOTSTRAP_KEY_NAME, checkKey, ConfigKeys, keyCreated, keysRevoked, nameFree, namedKey, newKeyRow, splitKey, toRecord, type ApiKeyRecord, type ConfigKey, type Identity, type KeyRefusal, type KeyRow, type KeyStore as KeyStoreContract, type NewKey } from '../api-keys.js'

/**
 * API keys in SQLite (the {@link KeyStoreContract} contract; synchronous): made with `agent-host keys create`
 * (stored as a salted HMAC, the key shown once) or listed in API_KEYS. Keys look like
 * `ahk_<16 hex id>_<43 base64url>`; a key is found by its id and compared in constant time.
 */
export class SqliteKeyStore implements KeyStoreContract {
  readonly #db: Db
  readonly #config: ConfigKeys
  readonly #audit: { append: (input: AuditInput) => unknown } | undefined
  // every authenticated request looks its key up: prepare that once
  #byId: Statement | undefined

  /** `audit`: where the changes made `by` someone are audited (the database's audit log). */
  constructor (db: Db, configKeys: ConfigKey[] = [], audit?: { append: (input: AuditInput) => unknown }) {
    this.#db = db
    this.#config = new ConfigKeys(configKeys)
    this.#audit = audit
  }

  create (options: NewKey, by?: string): { key: string, record: ApiKeyRecord } {
    const { key, row } = newKeyRow(options)
    const record = toRecord(row)
    // immediate: another process's create of the same name waits for this one's commit
    this.#db.transaction(() => {
      nameFree(row.name, this.#holders(row.name))
      this.#db.prepare(`INSERT INTO api_keys (id, name, salt, hash, scopes, agents, tenant, created_at, expires_at, revoked_at)
        VALUES (@id, @name, @salt, @hash, @scopes, @agents, @tenant, @created_at, @expires_at, @revoked_at)`).run(row)
      if (by !== undefined) this.#audited().append(keyCreated(record, by))
    }).immediate()
    return { key, record }
  }

  #audited (): { append: (input: AuditInput) => unknown } {
    if (this.#audit === undefined) throw new Error('this key store was made without an audit log: it cannot audit a change')
    return this.#audit
  }

  /** The ids of the keys not revoked named `name`, oldest first. */
  #holders (name: string): string[] {
    return (this.#db.prepare('SELECT id FROM api_keys WHERE name = ? AND revoked_at IS NULL ORDER BY created_at, id').all(name) as Array<{ id: string }>).map((r) => r.id)
  }

  bootstrap (key: string): ApiKeyRecord | undefined {
    // one transaction: a process booting beside this one finds the key made, not a name taken
    return this.#db.transaction(() => {
      if (this.#db.prepare('SELECT 1 FROM api_keys WHERE name = ?').get(BOOTSTRAP_KEY_NAME) !== undefined) return undefined
      return this.create({ name: BOOTSTRAP_KEY_NAME, scopes: ['admin'], key }).record
    }).immediate()
  }

  usable (now = new Date()): number {
    const row = this.#db.prepare('SELECT count(*) AS n FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)').get(now.toISOString()) as { n: number }
    return row.n + this.#config.count
  }

  list (): ApiKeyRecord[] {
    const rows = this.#db.prepare('SELECT * FROM api_keys ORDER BY created_at, id').all() as KeyRow[]
    return [...rows.map(toRecord), ...this.#config.records]
  }

  revoke (idOrName: string, by?: string): number {
    return this.#db.transaction(() => {
      const revoke = this.#db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL')
      const now = new Date().toISOString()
      let revoked = revoke.run(now, idOrName).changes
      if (revoked === 0) {
        const id = namedKey(idOrName, this.#holders(idOrName))
        revoked = id === undefined ? 0 : revoke.run(now, id).changes
      }
      if (revoked > 0 && by !== undefined) this.#audited().append(keysRevoked(idOrName, revoked, by))
      return revoked
    }).immediate()
  }

  verify (presented: string, now = new Date()): Identity | KeyRefusal {
    const configured = this.#config.find(presented)
    if (configured !== undefined) return configured
    const { id, secret } = splitKey(presented)
    this.#byId ??= this.#db.prepare('SELECT * FROM api_keys WHERE id = ?')
    return checkKey(this.#byId.get(id) as KeyRow | undefined, secret, now)
  }
}
