import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Statement } from 'better-sqlite3'
import type { Db } from '../storage/database.js'

/** A key as listed: never the key itself, which is shown once when it is made. */
export interface ApiKeyRecord {
  id: string
  name: string
  scopes: string[]
  /** Agents (ids or names) the key may invoke; null for any. */
  agents: string[] | null
  created_at: string
  expires_at: string | null
  revoked_at: string | null
  /** `db` for keys made with `agent-host keys create`, `config` for keys from API_KEYS. */
  source: 'db' | 'config'
}

/** Who is calling, as the routes see it. */
export interface Identity {
  /** The key's id, or `anonymous` when AUTH_MODE is off. */
  id: string
  name: string
  scopes: ReadonlySet<string>
  agents: ReadonlySet<string> | null
  anonymous: boolean
}

/** A key from the API_KEYS setting. */
export interface ConfigKey {
  name: string
  key: string
  scopes: string[]
  agents?: string[]
}

interface KeyRow {
  id: string
  name: string
  salt: string
  hash: string
  scopes: string
  agents: string | null
  created_at: string
  expires_at: string | null
  revoked_at: string | null
}

const KEY = /^ahk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/

/** The name of the key BOOTSTRAP_ADMIN_KEY makes. */
export const BOOTSTRAP_KEY_NAME = 'bootstrap-admin'

/** The id and secret of a presented key: its own for `ahk_` keys, derived from the whole key for one an operator chose (BOOTSTRAP_ADMIN_KEY). */
function split (key: string): { id: string, secret: string } {
  const match = KEY.exec(key)
  return match !== null ? { id: match[1] as string, secret: match[2] as string } : { id: createHash('sha256').update(key).digest('hex').slice(0, 16), secret: key }
}

function digest (salt: string, secret: string): Buffer {
  // the secrets are 256 random bits, so a keyed hash is enough (no password stretching needed)
  return createHmac('sha256', salt).update(secret).digest()
}

/**
 * API keys: made with `agent-host keys create` (stored in SQLite as a salted HMAC, the key shown
 * once) or listed in API_KEYS. Keys look like `ahk_<16 hex id>_<43 base64url>`; a key is found by
 * its id and compared in constant time.
 */
export class KeyStore {
  readonly #db: Db
  readonly #config: Array<{ record: ApiKeyRecord, salt: string, hash: Buffer }>
  // every authenticated request looks its key up: prepare that once
  #byId: Statement | undefined

  constructor (db: Db, configKeys: ConfigKey[] = []) {
    this.#db = db
    this.#config = configKeys.map((k, i) => {
      const salt = randomBytes(16).toString('hex')
      return {
        salt,
        hash: digest(salt, k.key),
        record: { id: `config-${i}`, name: k.name, scopes: k.scopes, agents: k.agents ?? null, created_at: new Date(0).toISOString(), expires_at: null, revoked_at: null, source: 'config' }
      }
    })
  }

  /**
   * Make a key. Returns the key (show it once: only its hash is kept) and its record. `key` stores a
   * key the operator chose instead of making one.
   */
  create (options: { name: string, scopes: string[], agents?: string[], expiresAt?: Date, key?: string }): { key: string, record: ApiKeyRecord } {
    const { id, secret } = options.key !== undefined ? split(options.key) : { id: randomBytes(8).toString('hex'), secret: randomBytes(32).toString('base64url') }
    const salt = randomBytes(16).toString('hex')
    const row: KeyRow = {
      id,
      name: options.name,
      salt,
      hash: digest(salt, secret).toString('hex'),
      scopes: JSON.stringify(options.scopes),
      agents: options.agents === undefined ? null : JSON.stringify(options.agents),
      created_at: new Date().toISOString(),
      expires_at: options.expiresAt?.toISOString() ?? null,
      revoked_at: null
    }
    this.#db.prepare(`INSERT INTO api_keys (id, name, salt, hash, scopes, agents, created_at, expires_at, revoked_at)
      VALUES (@id, @name, @salt, @hash, @scopes, @agents, @created_at, @expires_at, @revoked_at)`).run(row)
    return { key: options.key ?? `ahk_${id}_${secret}`, record: toRecord(row) }
  }

  /**
   * The first-run admin key (BOOTSTRAP_ADMIN_KEY): stored as `bootstrap-admin` with the `admin` scope
   * unless a key of that name was ever made (so revoking it is final). Returns its record when made now.
   */
  bootstrap (key: string): ApiKeyRecord | undefined {
    if (this.#db.prepare('SELECT 1 FROM api_keys WHERE name = ?').get(BOOTSTRAP_KEY_NAME) !== undefined) return undefined
    return this.create({ name: BOOTSTRAP_KEY_NAME, scopes: ['admin'], key }).record
  }

  /** How many keys work now: stored ones neither revoked nor expired, and those of API_KEYS. */
  usable (now = new Date()): number {
    const row = this.#db.prepare('SELECT count(*) AS n FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)').get(now.toISOString()) as { n: number }
    return row.n + this.#config.length
  }

  list (): ApiKeyRecord[] {
    const rows = this.#db.prepare('SELECT * FROM api_keys ORDER BY created_at, id').all() as KeyRow[]
    return [...rows.map(toRecord), ...this.#config.map((c) => c.record)]
  }

  /** Revoke a stored key by id or name. Returns how many keys were revoked. */
  revoke (idOrName: string): number {
    return this.#db.prepare('UPDATE api_keys SET revoked_at = ? WHERE (id = ? OR name = ?) AND revoked_at IS NULL').run(new Date().toISOString(), idOrName, idOrName).changes
  }

  /** The identity a presented key stands for, or why it is refused. */
  verify (presented: string, now = new Date()): Identity | { refused: 'unknown' | 'revoked' | 'expired' } {
    for (const c of this.#config) {
      if (timingSafeEqual(digest(c.salt, presented), c.hash)) return identity(c.record)
    }
    const { id, secret } = split(presented)
    this.#byId ??= this.#db.prepare('SELECT * FROM api_keys WHERE id = ?')
    const row = this.#byId.get(id) as KeyRow | undefined
    if (row === undefined || !timingSafeEqual(digest(row.salt, secret), Buffer.from(row.hash, 'hex'))) return { refused: 'unknown' }
    if (row.revoked_at !== null) return { refused: 'revoked' }
    if (row.expires_at !== null && Date.parse(row.expires_at) <= now.getTime()) return { refused: 'expired' }
    return identity(toRecord(row))
  }
}

function toRecord (row: KeyRow): ApiKeyRecord {
  return {
    id: row.id,
    name: row.name,
    scopes: JSON.parse(row.scopes) as string[],
    agents: row.agents === null ? null : JSON.parse(row.agents) as string[],
    created_at: row.created_at,
    expires_at: row.expires_at,
    revoked_at: row.revoked_at,
    source: 'db'
  }
}

function identity (record: ApiKeyRecord): Identity {
  return { id: record.id, name: record.name, scopes: new Set(record.scopes), agents: record.agents === null ? null : new Set(record.agents), anonymous: false }
}

/** The caller when AUTH_MODE is off: anonymous, holding every scope. */
export const ANONYMOUS: Identity = { id: 'anonymous', name: 'anonymous', scopes: new Set(['admin']), agents: null, anonymous: true }
