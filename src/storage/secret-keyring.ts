import { createCipheriv, createDecipheriv, createHash, randomBytes, randomUUID } from 'node:crypto'
import { existsSync, linkSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { secretKeyBytes, secretKeysRetired, SECRET_KEY_HOWTO, type Config } from '../config.js'
import { AH_ERR_CONFIG_INVALID, AH_ERR_SECRET_UNREADABLE, AH_ERR_SECRETS_KEY_UNSET } from '../errors.js'

/** What every sealed value starts with: the format's name and version. */
export const SEALED_PREFIX = 'ahs1'

/** The key file a server on SQLite makes in DATA_DIR when no key is set. */
export const DEFAULT_KEY_FILE = 'secrets.key'

const IV_BYTES = 12
const TAG_BYTES = 16
const SEALED = /^ahs1\.([0-9a-f]{16})\.([A-Za-z0-9_-]{16})\.([A-Za-z0-9_-]{22,})$/

/**
 * The keys that seal stored secrets (AES-256-GCM): the current one (every value sealed now) and
 * retired ones (still opened, for a rotation: `agent-host secrets rotate`), by key id. A sealed
 * value is a self-describing string, `ahs1.<kid>.<iv>.<ciphertext and tag>` (base64url; a random
 * 12-byte IV each time), and is bound to where it is stored by GCM's additional data (its
 * `context`, e.g. the table, column and row), so a value copied into another row does not open. A
 * key never leaves the process: values carry only its id, a fingerprint that cannot be turned back
 * into it.
 */
export class SecretKeyring {
  readonly #keys = new Map<string, Buffer>()
  #current: { id: string, key: Buffer } | undefined
  #make: (() => Buffer) | undefined

  /**
   * @param current `SECRETS_KEY` (32 bytes); a function that makes it when the first value is
   * sealed (DATA_DIR's key file, made only when needed); or undefined for none
   * @param retired `SECRETS_KEYS_RETIRED`: keys used before a rotation, opened only
   */
  constructor (current: Buffer | (() => Buffer) | undefined, retired: readonly Buffer[] = []) {
    for (const key of retired) this.#hold(key)
    if (typeof current === 'function') this.#make = current
    else if (current !== undefined) this.#current = { id: this.#hold(current), key: current }
  }

  #hold (key: Buffer): string {
    if (key.length !== 32) throw new TypeError('a secrets key is 32 bytes')
    const id = secretKeyId(key)
    this.#keys.set(id, key)
    return id
  }

  /** The key new values are sealed with; undefined: none is set (sealing is refused), or it is made when first needed. */
  get current (): { id: string } | undefined {
    return this.#current === undefined ? undefined : { id: this.#current.id }
  }

  /** The current key, made now if it is made when first needed; undefined when none is set. */
  ensureCurrent (): { id: string } | undefined {
    if (this.#make !== undefined) {
      const key = this.#make()
      this.#make = undefined
      this.#current = { id: this.#hold(key), key }
    }
    return this.current
  }

  /** Whether this keyring holds the key `kid` (and so opens values sealed with it). */
  holds (kid: string): boolean {
    return this.#keys.has(kid)
  }

  /** The ids of the keys it holds, the current one last. */
  get ids (): string[] {
    return [...this.#keys.keys()]
  }

  /**
   * `text` sealed with the current key, bound to `context`.
   * @throws AH_ERR_SECRETS_KEY_UNSET when no key is set (never a plain-text fallback)
   */
  seal (text: string, context: string): string {
    this.ensureCurrent()
    const current = this.#current
    if (current === undefined) throw new AH_ERR_SECRETS_KEY_UNSET(context.split(':')[0])
    const iv = randomBytes(IV_BYTES)
    const cipher = createCipheriv('aes-256-gcm', current.key, iv).setAAD(Buffer.from(context, 'utf8'))
    const sealed = Buffer.concat([cipher.update(text, 'utf8'), cipher.final(), cipher.getAuthTag()])
    return `${SEALED_PREFIX}.${current.id}.${iv.toString('base64url')}.${sealed.toString('base64url')}`
  }

  /**
   * The text `sealed` holds, which must have been sealed for `context`.
   * @throws AH_ERR_SECRET_UNREADABLE naming the key id: the value is not a sealed one, its key is
   * not held, or it does not authenticate (changed, or sealed for another place)
   */
  open (sealed: string, context: string): string {
    const parts = SEALED.exec(sealed)
    if (parts === null) throw new AH_ERR_SECRET_UNREADABLE('none', `${context} is not a sealed value`)
    const [, kid, iv, body] = parts as unknown as [string, string, string, string]
    const key = this.#keys.get(kid)
    if (key === undefined) throw new AH_ERR_SECRET_UNREADABLE(kid, `${context} is sealed with a key this server does not hold: set it as SECRETS_KEY, or in SECRETS_KEYS_RETIRED`)
    const bytes = Buffer.from(body, 'base64url')
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'), { authTagLength: TAG_BYTES }).setAAD(Buffer.from(context, 'utf8'))
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES))
      return Buffer.concat([decipher.update(bytes.subarray(0, bytes.length - TAG_BYTES)), decipher.final()]).toString('utf8')
    } catch (err) {
      throw new AH_ERR_SECRET_UNREADABLE(kid, `${context} does not authenticate: it was changed, or sealed for another place`, { cause: err })
    }
  }
}

/** Whether `value` is a sealed value (by its form; {@link SecretKeyring.open} says whether it authenticates). */
export function isSealed (value: string): boolean {
  return SEALED.test(value)
}

/** The id of the key `value` was sealed with; undefined for a value that is not sealed. */
export function sealedKeyId (value: string): string | undefined {
  return SEALED.exec(value)?.[1]
}

/** A key's public id: 16 hex digits of a SHA-256 of it (domain-separated), safe to store and show. */
export function secretKeyId (key: Buffer): string {
  return createHash('sha256').update('agent-host secrets key id\0').update(key).digest('hex').slice(0, 16)
}

/** Where the keyring's current key comes from when none is set, and where it says what it did. */
export interface KeyringOptions {
  /** With neither SECRETS_KEY nor SECRETS_KEY_FILE: use `DATA_DIR/secrets.key`, made when the first secret is sealed (SQLite); false: no key (PostgreSQL: instances must share one). */
  defaultFile: boolean
  log: { info: (obj: object, msg: string) => void }
}

/**
 * The keyring of the settings: SECRETS_KEY or the key in SECRETS_KEY_FILE, and SECRETS_KEYS_RETIRED.
 * With neither key setting and `defaultFile`, the key in `DATA_DIR/secrets.key`: read when it is
 * there, else made when the first secret is sealed (mode 0600, atomically: two processes making it at
 * once use the same one) and logged then, so a deployment that stores no secret has no key file.
 * @throws AH_ERR_CONFIG_INVALID when the key file cannot be read or does not hold a key
 */
export function loadSecretKeyring (config: Pick<Config, 'SECRETS_KEY' | 'SECRETS_KEY_FILE' | 'SECRETS_KEYS_RETIRED' | 'DATA_DIR'>, options: KeyringOptions): SecretKeyring {
  const retired = secretKeysRetired(config).map((text) => secretKeyBytes(text) as Buffer)
  if (config.SECRETS_KEY !== '') return new SecretKeyring(secretKeyBytes(config.SECRETS_KEY), retired)
  if (config.SECRETS_KEY_FILE !== '') return new SecretKeyring(keyInFile(config.SECRETS_KEY_FILE, 'env/SECRETS_KEY_FILE'), retired)
  if (!options.defaultFile) return new SecretKeyring(undefined, retired)
  const file = join(config.DATA_DIR, DEFAULT_KEY_FILE)
  return new SecretKeyring(existsSync(file) ? keyInFile(file, 'the secrets key file') : () => defaultKey(file, options.log), retired)
}

/** The key `file` holds (surrounding white space ignored). */
function keyInFile (file: string, setting: string): Buffer {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    throw new AH_ERR_CONFIG_INVALID(`${setting} ${file} cannot be read: ${(err as Error).message}`, { cause: err })
  }
  const key = secretKeyBytes(text.trim())
  if (key === undefined) throw new AH_ERR_CONFIG_INVALID(`${setting} ${file} does not hold a secrets key: ${SECRET_KEY_HOWTO}`)
  return key
}

/** DATA_DIR's key file `file`, made and linked into place (never replacing one another process made first), then read. */
function defaultKey (file: string, log: KeyringOptions['log']): Buffer {
  const draft = `${file}.${randomUUID()}.tmp`
  writeFileSync(draft, `${randomBytes(32).toString('base64')}\n`, { mode: 0o600, flag: 'wx' })
  try {
    linkSync(draft, file)
    log.info({ file }, `made the key that seals stored secrets (A2A push tokens and credentials): ${file}. Back it up apart from the data; in production set SECRETS_KEY or SECRETS_KEY_FILE to a key kept outside DATA_DIR`)
  } catch (err) {
    // EEXIST: another process made it first, and that one is used
    if ((err as { code?: unknown }).code !== 'EEXIST') throw err
  } finally {
    unlinkSync(draft)
  }
  return keyInFile(file, 'the secrets key file')
}
