import { createHash, createHmac, timingSafeEqual } from 'node:crypto'
import { auditKeysRetired, type Config } from '../config.js'

/**
 * The keys of the audit chain: the current one (new rows and checkpoints are signed with it) and
 * retired ones (still accepted for rows and checkpoints signed before a rotation), by key id. A key
 * never leaves the process: rows carry only its id, a fingerprint that cannot be turned back into it.
 */
export class AuditKeyring {
  readonly current: { id: string, key: Buffer } | undefined
  readonly #keys = new Map<string, Buffer>()

  /**
   * @param current `AUDIT_KEY` ('' for none: the chain is a plain SHA-256 chain)
   * @param retired `AUDIT_KEYS_RETIRED`: keys used before a rotation
   */
  constructor (current: string, retired: readonly string[] = []) {
    for (const text of [...retired, current].filter((k) => k !== '')) this.#keys.set(auditKeyId(text), Buffer.from(text, 'utf8'))
    this.current = current === '' ? undefined : { id: auditKeyId(current), key: Buffer.from(current, 'utf8') }
  }

  /** Whether new rows are keyed. */
  get keyed (): boolean {
    return this.current !== undefined
  }

  /** The key with this id, if this keyring holds it. */
  key (id: string): Buffer | undefined {
    return this.#keys.get(id)
  }

  /** HMAC-SHA256 of `text` with the key `id`, hex; undefined when the key is not held. */
  sign (id: string, text: string): string | undefined {
    const key = this.#keys.get(id)
    return key === undefined ? undefined : createHmac('sha256', key).update(text).digest('hex')
  }

  /** Whether `mac` is the HMAC of `text` with the key `id` (in constant time). */
  verify (id: string, text: string, mac: string): boolean {
    const expected = this.sign(id, text)
    if (expected === undefined || mac.length !== expected.length) return false
    return timingSafeEqual(Buffer.from(mac), Buffer.from(expected))
  }
}

/** A key's public id: 16 hex digits of a SHA-256 of it (domain-separated), safe to store and show. */
export function auditKeyId (key: string): string {
  return createHash('sha256').update('agent-host audit key id\0').update(key).digest('hex').slice(0, 16)
}

/** The keyring of the settings: AUDIT_KEY, and AUDIT_KEYS_RETIRED before a rotation. */
export function configuredKeyring (config: Pick<Config, 'AUDIT_KEY' | 'AUDIT_KEYS_RETIRED'>): AuditKeyring {
  return new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config))
}
