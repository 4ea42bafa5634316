import type pg from 'pg'
import { BOOTSTRAP_KEY_NAME, checkKey, ConfigKeys, newKeyRow, splitKey, toRecord, type ApiKeyRecord, type ConfigKey, type Identity, type KeyRefusal, type KeyRow, type KeyStore, type NewKey } from '../api-keys.js'

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
}

const COLUMNS = 'id, name, salt, hash, scopes, agents, created_at, expires_at, revoked_at'

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
  readonly #rows = new Map<string, { row: Promise<KeyRow | undefined>, at: number }>()

  constructor (pool: pg.Pool, options: PgKeyStoreOptions = {}) {
    this.#pool = pool
    this.#config = new ConfigKeys(options.configKeys ?? [])
    this.#cacheMs = Math.min(options.cacheMs ?? 500, 1000)
    this.#cacheSize = options.cacheSize ?? 10_000
  }

  async create (options: NewKey): Promise<{ key: string, record: ApiKeyRecord }> {
    return await this.createIn(this.#pool, options)
  }

  /** {@link create} on `client` (inside the caller's transaction, e.g. with the audit row that records it). */
  async createIn (client: pg.ClientBase | pg.Pool, options: NewKey): Promise<{ key: string, record: ApiKeyRecord }> {
    const { key, row } = newKeyRow(options)
    await client.query(`INSERT INTO api_keys (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, values(row))
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
      SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE NOT EXISTS (SELECT 1 FROM api_keys WHERE name = $2)
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

  async revoke (idOrName: string): Promise<number> {
    return await this.revokeIn(this.#pool, idOrName)
  }

  /** {@link revoke} on `client`. This instance forgets the rows it cached; the others within `cacheMs`. */
  async revokeIn (client: pg.ClientBase | pg.Pool, idOrName: string): Promise<number> {
    const result = await client.query('UPDATE api_keys SET revoked_at = $1 WHERE (id = $2 OR name = $2) AND revoked_at IS NULL', [new Date().toISOString(), idOrName])
    this.#rows.clear()
    return Number(result.rowCount)
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

function values (row: KeyRow): unknown[] {
  return [row.id, row.name, row.salt, row.hash, row.scopes, row.agents, row.created_at, row.expires_at, row.revoked_at]
}
