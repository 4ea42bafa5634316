import type pg from 'pg'
import { inTransaction, PG_LOCKS } from './database.js'
import type { AuditInput } from '../audit.js'
import { BOOTSTRAP_KEY_NAME, checkKey, ConfigKeys, keyCreated, keysRevoked, nameFree, namedKey, newKeyRow, splitKey, toRecord, type ApiKeyRecord, type ConfigKey, type Identity, type KeyRefusal, type KeyRow, type KeyStore, type NewKey } from '../api-keys.js'

export interface PgKeyStoreOptions {
  /** The keys of API_KEYS (held in memory, never stored). */
  configKeys?: ConfigKey[]
  /**
   * How long a stored key's row, once read, is trusted by this instance (ms; default 500, at most
   * 1000: a key revoked on another instance is refused here within that time; 0: read every time).
   */
  cacheMs?: number
  /** How many keys' rows are cached at most (default 10 000; the oldest read is dropped first). */
  cacheSize?: number
  /** Where the changes made `by` someone are audited, in their transaction (the database's audit log). */
  audit?: { appendIn: (client: pg.ClientBase, input: AuditInput) => Promise<unknown> }
}

const COLUMNS = 'id, name, salt, hash, scopes, agents, created_at, expires_at, revoked_at, tenant'

/**
 * API keys in PostgreSQL (the {@link KeyStore} contract), shared by every instance: the same rows,
 * salted hashes and rules as the SQLite store.
 *
 * What is cached: `verify` runs on every authenticated request, so each instance keeps the stored
 * row of a key it found (its salt and hash, scopes, agents, expiry and revocation) for `cacheMs`
 * (500 ms by default), reading it once for concurrent requests. The secret is still checked, and
 * the expiry still compared with `now`, on every call; a key that is not found is never cached (so
 * a key made on another instance works at once); a revocation made on another instance is refused
 * here once the row's time is up (within 1 s), one made through this store at once.
 */
export class PgKeyStore implements KeyStore {
  readonly #pool: pg.Pool
  readonly #config: ConfigKeys
  readonly #cacheMs: number
  readonly #cacheSize: number
  readonly #audit: PgKeyStoreOptions['audit']
  readonly #rows = new Map<string, { row: Promise<KeyRow | undefined>, at: number }>()

  constructor (pool: pg.Pool, options: PgKeyStoreOptions = {}) {
    this.#pool = pool
    this.#config = new ConfigKeys(options.configKeys ?? [])
    this.#cacheMs = Math.min(options.cacheMs ?? 500, 1000)
    this.#cacheSize = options.cacheSize ?? 10_000
    this.#audit = options.audit
  }

  async create (options: NewKey, by?: string): Promise<{ key: string, record: ApiKeyRecord }> {
    return await inTransaction(this.#pool, async (client) => {
      const made = await this.createIn(client, options)
      if (by !== undefined) await this.#audited().appendIn(client, keyCreated(made.record, by))
      return made
    })
  }

  #audited (): NonNullable<PgKeyStoreOptions['audit']> {
    if (this.#audit === undefined) throw new Error('this key store was made without an audit log: it cannot audit a change')
    return this.#audit
  }

  /**
   * {@link create} on `client`, inside the caller's transaction (e.g. with the audit row that
   * records it): the name's lock, taken here, is held until that transaction ends, so a create of
   * the same name elsewhere waits for it and then finds the name taken.
   */
  async createIn (client: pg.ClientBase, options: NewKey): Promise<{ key: string, record: ApiKeyRecord }> {
    const { key, row } = newKeyRow(options)
    nameFree(row.name, await holders(client, row.name))
    await client.query(`INSERT INTO api_keys (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, values(row))
    return { key, record: toRecord(row) }
  }

  async bootstrap (key: string): Promise<ApiKeyRecord | undefined> {
    return await this.bootstrapIn(this.#pool, key)
  }

  /**
   * {@link bootstrap} on `client`. Instances booting together with the same BOOTSTRAP_ADMIN_KEY make
   * it once: the key's id is derived from it, so the later insert meets the first and does nothing.
   */
  async bootstrapIn (client: pg.ClientBase | pg.Pool, key: string): Promise<ApiKeyRecord | undefined> {
    const { row } = newKeyRow({ name: BOOTSTRAP_KEY_NAME, scopes: ['admin'], key })
    const made = await client.query(`INSERT INTO api_keys (${COLUMNS})
      SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 WHERE NOT EXISTS (SELECT 1 FROM api_keys WHERE name = $2)
      ON CONFLICT (id) DO NOTHING`, values(row))
    return made.rowCount === 1 ? toRecord(row) : undefined
  }

  async usable (now = new Date()): Promise<number> {
    const { rows } = await this.#pool.query<{ n: number }>('SELECT count(*)::int AS n FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $1)', [now.toISOString()])
    return (rows[0] as { n: number }).n + this.#config.count
  }

  async list (): Promise<ApiKeyRecord[]> {
    // byte order, as SQLite sorts, whatever the database's collation
    const { rows } = await this.#pool.query<KeyRow>(`SELECT ${COLUMNS} FROM api_keys ORDER BY created_at COLLATE "C", id COLLATE "C"`)
    return [...rows.map(toRecord), ...this.#config.records]
  }

  async revoke (idOrName: string, by?: string): Promise<number> {
    return await inTransaction(this.#pool, async (client) => {
      const revoked = await this.revokeIn(client, idOrName)
      if (revoked > 0 && by !== undefined) await this.#audited().appendIn(client, keysRevoked(idOrName, revoked, by))
      return revoked
    })
  }

  /**
   * {@link revoke} on `client`, inside the caller's transaction. This instance forgets the rows it
   * cached; the others within `cacheMs`.
   */
  async revokeIn (client: pg.ClientBase, idOrName: string): Promise<number> {
    const now = new Date().toISOString()
    const byId = await client.query('UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL', [now, idOrName])
    let revoked = Number(byId.rowCount)
    if (revoked === 0) {
      const id = namedKey(idOrName, await holders(client, idOrName))
      if (id !== undefined) revoked = Number((await client.query('UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL', [now, id])).rowCount)
    }
    this.#rows.clear()
    return revoked
  }

  async verify (presented: string, now = new Date()): Promise<Identity | KeyRefusal> {
    const configured = this.#config.find(presented)
    if (configured !== undefined) return configured
    const { id, secret } = splitKey(presented)
    return checkKey(await this.#row(id, now.getTime()), secret, now)
  }

  /** The stored row of key `id`: the cached one if read less than `cacheMs` before `at`. */
  async #row (id: string, at: number): Promise<KeyRow | undefined> {
    const cached = this.#rows.get(id)
    if (cached !== undefined && at - cached.at < this.#cacheMs) return await cached.row
    const row = this.#pool.query<KeyRow>(`SELECT ${COLUMNS} FROM api_keys WHERE id = $1`, [id]).then((r) => r.rows[0])
    if (this.#cacheMs <= 0) return await row
    const entry = { row, at }
    this.#rows.delete(id)
    this.#rows.set(id, entry)
    if (this.#rows.size > this.#cacheSize) this.#rows.delete(this.#rows.keys().next().value as string)
    const forget = (): void => { if (this.#rows.get(id) === entry) this.#rows.delete(id) }
    row.then((found) => { if (found === undefined) forget() }, forget)
    return await row
  }
}

/**
 * The ids of the keys not revoked named `name`, oldest first, under the name's lock (held to the end
 * of `client`'s transaction: creates and revocations of one name take turns).
 */
async function holders (client: pg.ClientBase, name: string): Promise<string[]> {
  await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [PG_LOCKS.keyName, name])
  const { rows } = await client.query<{ id: string }>('SELECT id FROM api_keys WHERE name = $1 AND revoked_at IS NULL ORDER BY created_at COLLATE "C", id COLLATE "C"', [name])
  return rows.map((r) => r.id)
}

function values (row: KeyRow): unknown[] {
  return [row.id, row.name, row.salt, row.hash, row.scopes, row.agents, row.created_at, row.expires_at, row.revoked_at, row.tenant]
}
