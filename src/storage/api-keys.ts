import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { AuditInput } from './audit.js'
import type { Awaitable } from './awaitable.js'
import { AH_ERR_KEY_NAME_AMBIGUOUS, AH_ERR_KEY_NAME_TAKEN } from '../errors.js'
import { DEFAULT_TENANT, principalId } from './tenants.js'

/** A key as listed: never the key itself, which is shown once when it is made. */
export interface ApiKeyRecord {
  /** A stored key's 16 hex characters; `config:<name>` for a key of API_KEYS. */
  id: string
  name: string
  scopes: string[]
  /** Agents (ids or names) the key may invoke; null for any. */
  agents: string[] | null
  /** The tenant the key belongs to (`default` unless it was made for another). */
  tenant: string
  created_at: string
  expires_at: string | null
  revoked_at: string | null
  /** `db` for keys made with `agent-host keys create`, `config` for keys from API_KEYS. */
  source: 'db' | 'config'
}

/** Who is calling, as the routes see it. */
export interface Identity {
  /**
   * The principal: the key's id (`config:<name>` for a key of API_KEYS, `jwt:<sub>` for a token,
   * `anonymous` when AUTH_MODE is off), as `tenant:<tenant>/<id>` in a tenant other than the default
   * (`storage/tenants.ts:principalId`). What the caller makes is stored under it.
   */
  id: string
  name: string
  /** The tenant the caller belongs to. */
  tenant: string
  scopes: ReadonlySet<string>
  agents: ReadonlySet<string> | null
  anonymous: boolean
}
/** The caller when AUTH_MODE is off: anonymous, holding every scope. */
export const ANONYMOUS: Identity = { id: 'anonymous', name: 'anonymous', tenant: DEFAULT_TENANT, scopes: new Set(['admin']), agents: null, anonymous: true }

/** A key from the API_KEYS setting. */
export interface ConfigKey {
  name: string
  key: string
  scopes: string[]
  agents?: string[]
  tenant?: string
}

/** What {@link KeyStore.create} is given. */
export interface NewKey {
  name: string
  scopes: string[]
  agents?: string[]
  /** Its tenant; `default` when absent. */
  tenant?: string
  expiresAt?: Date
  /** A key the operator chose (BOOTSTRAP_ADMIN_KEY), stored instead of a new one. */
  key?: string
}

/** Why a presented key is refused. */
export interface KeyRefusal { refused: 'unknown' | 'revoked' | 'expired' }

/**
 * API keys, in SQLite (`storage/sqlite/keys.ts`) or PostgreSQL (`storage/postgres/keys.ts`): only a salted
 * HMAC of each key is stored, the key itself is shown once when it is made. Keys look like
 * `ahk_<16 hex id>_<43 base64url>`; a key is found by its id and compared in constant time. Keys
 * from API_KEYS are held in memory beside the stored ones. Callers `await` every method.
 */
export interface KeyStore {
  /**
   * Make a key. Returns the key (show it once: only its hash is kept) and its record. `key` stores a
   * key the operator chose instead of making one. A name is one key's among those not revoked
   * (expired or not): another is refused with `AH_ERR_KEY_NAME_TAKEN`, checked and stored in one
   * transaction. With `by` (who made it), its audit row (`key.create`) is written in the same
   * transaction: no key without its row, no row without its key.
   */
  create: (options: NewKey, by?: string) => Awaitable<{ key: string, record: ApiKeyRecord }>
  /**
   * The first-run admin key (BOOTSTRAP_ADMIN_KEY): stored as `bootstrap-admin` with the `admin` scope
   * unless a key of that name was ever made (so revoking it is final). Returns its record when made now.
   */
  bootstrap: (key: string) => Awaitable<ApiKeyRecord | undefined>
  /** How many keys work now: stored ones neither revoked nor expired, and those of API_KEYS. */
  usable: (now?: Date) => Awaitable<number>
  /** Every stored key (oldest first), then those of API_KEYS. */
  list: () => Awaitable<ApiKeyRecord[]>
  /**
   * Revoke a stored key by id, or by name. Returns how many keys were revoked (0 or 1). A name that
   * more than one key not revoked has (a database from before names were unique) revokes nothing:
   * `AH_ERR_KEY_NAME_AMBIGUOUS`, naming their ids. With `by`, a revocation is audited (`key.revoke`)
   * in the same transaction.
   */
  revoke: (idOrName: string, by?: string) => Awaitable<number>
  /** The identity a presented key stands for, or why it is refused (on every authenticated request). */
  verify: (presented: string, now?: Date) => Awaitable<Identity | KeyRefusal>
}

/** A stored key, as both databases hold it. */
export interface KeyRow {
  id: string
  name: string
  salt: string
  hash: string
  scopes: string
  agents: string | null
  tenant: string
  created_at: string
  expires_at: string | null
  revoked_at: string | null
}

/** Refuse `name` when `holders` (the keys not revoked that have it) are any; `holders` are their ids. */
export function nameFree (name: string, holders: readonly string[]): void {
  if (holders.length > 0) throw new AH_ERR_KEY_NAME_TAKEN(name, holders.join(', '))
}

/** The one key not revoked that `name` stands for: undefined when none, refused when more than one. */
export function namedKey (name: string, holders: readonly string[]): string | undefined {
  if (holders.length > 1) throw new AH_ERR_KEY_NAME_AMBIGUOUS(name, holders.length, holders.join(', '))
  return holders[0]
}

/** The name of the key BOOTSTRAP_ADMIN_KEY makes. */
export const BOOTSTRAP_KEY_NAME = 'bootstrap-admin'

const KEY = /^ahk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/

/** The id and secret of a presented key: its own for `ahk_` keys, derived from the whole key for one an operator chose (BOOTSTRAP_ADMIN_KEY). */
export function splitKey (key: string): { id: string, secret: string } {
  const match = KEY.exec(key)
  return match !== null ? { id: match[1] as string, secret: match[2] as string } : { id: createHash('sha256').update(key).digest('hex').slice(0, 16), secret: key }
}

export function keyDigest (salt: string, secret: string): Buffer {
  // the secrets are 256 random bits, so a keyed hash is enough (no password stretching needed)
  return createHmac('sha256', salt).update(secret).digest()
}

/** The row to store for a new key, and the key to show once. */
export function newKeyRow (options: NewKey): { key: string, row: KeyRow } {
  const { id, secret } = options.key !== undefined ? splitKey(options.key) : { id: randomBytes(8).toString('hex'), secret: randomBytes(32).toString('base64url') }
  const salt = randomBytes(16).toString('hex')
  const row: KeyRow = {
    id,
    name: options.name,
    salt,
    hash: keyDigest(salt, secret).toString('hex'),
    scopes: JSON.stringify(options.scopes),
    agents: options.agents === undefined ? null : JSON.stringify(options.agents),
    tenant: options.tenant ?? DEFAULT_TENANT,
    created_at: new Date().toISOString(),
    expires_at: options.expiresAt?.toISOString() ?? null,
    revoked_at: null
  }
  return { key: options.key ?? `ahk_${id}_${secret}`, row }
}

/**
 * The keys of API_KEYS, hashed with a salt of this process (they are never stored). A key's id is
 * `config:<name>`: what it owns stays its own when other keys are added, removed or reordered, and
 * a key given a new secret under the same name keeps it.
 */
export class ConfigKeys {
  readonly #keys: Array<{ record: ApiKeyRecord, salt: string, hash: Buffer }>

  constructor (keys: ConfigKey[]) {
    this.#keys = keys.map((k) => {
      const salt = randomBytes(16).toString('hex')
      return {
        salt,
        hash: keyDigest(salt, k.key),
        record: { id: `config:${k.name}`, name: k.name, scopes: k.scopes, agents: k.agents ?? null, tenant: k.tenant ?? DEFAULT_TENANT, created_at: new Date(0).toISOString(), expires_at: null, revoked_at: null, source: 'config' }
      }
    })
  }

  get count (): number { return this.#keys.length }

  get records (): ApiKeyRecord[] { return this.#keys.map((c) => c.record) }

  /** The identity of `presented` if it is one of these keys. */
  find (presented: string): Identity | undefined {
    for (const c of this.#keys) {
      if (timingSafeEqual(keyDigest(c.salt, presented), c.hash)) return identity(c.record)
    }
    return undefined
  }
}

/** What a presented key's secret and its stored row (if any) say at `now`. */
export function checkKey (row: KeyRow | undefined, secret: string, now: Date): Identity | KeyRefusal {
  if (row === undefined || !timingSafeEqual(keyDigest(row.salt, secret), Buffer.from(row.hash, 'hex'))) return { refused: 'unknown' }
  if (row.revoked_at !== null) return { refused: 'revoked' }
  if (row.expires_at !== null && Date.parse(row.expires_at) <= now.getTime()) return { refused: 'expired' }
  return identity(toRecord(row))
}

export function toRecord (row: KeyRow): ApiKeyRecord {
  return {
    id: row.id,
    name: row.name,
    scopes: JSON.parse(row.scopes) as string[],
    agents: row.agents === null ? null : JSON.parse(row.agents) as string[],
    tenant: row.tenant,
    created_at: row.created_at,
    expires_at: row.expires_at,
    revoked_at: row.revoked_at,
    source: 'db'
  }
}

function identity (record: ApiKeyRecord): Identity {
  return { id: principalId(record.tenant, record.id), name: record.name, tenant: record.tenant, scopes: new Set(record.scopes), agents: record.agents === null ? null : new Set(record.agents), anonymous: false }
}

/** The audit row of a key made by `actor`. */
export function keyCreated (record: ApiKeyRecord, actor: string): AuditInput {
  return { actor, action: 'key.create', resource: record.id, success: true, details: { name: record.name, tenant: record.tenant, scopes: record.scopes, agents: record.agents, expires_at: record.expires_at } }
}

/** The audit row of `count` keys revoked by `actor`, named as they asked (`target`: an id or a name). */
export function keysRevoked (target: string, count: number, actor: string): AuditInput {
  return { actor, action: 'key.revoke', resource: target, success: true, details: { keys: count } }
}
