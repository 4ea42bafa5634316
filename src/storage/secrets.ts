import { AH_ERR_SECRETS_KEY_UNKNOWN, AH_ERR_SECRETS_KEY_UNSET } from '../errors.js'
import type { AuditInput } from './audit.js'
import type { Awaitable } from './awaitable.js'
import { isSealed, sealedKeyId, type SecretKeyring } from './secret-keyring.js'

/**
 * The key id recorded for values an earlier version stored in plain text (the migration that
 * brought sealing records it when there were any): they are sealed at the next boot.
 */
export const PLAIN_KID = 'plain'

/**
 * Every column that holds a secret, sealed: its table, the columns that name a row (the sealed
 * value's context, so a value copied into another row does not open) and the secret columns.
 * Both drivers read and rewrite exactly these; a new secret column is one more entry.
 */
export const SECRET_COLUMNS: ReadonlyArray<{ table: string, key: readonly string[], columns: readonly string[] }> = [
  { table: 'a2a_push_configs', key: ['run_key', 'id'], columns: ['token', 'auth_credentials'] }
]

/** What a secret stored in `table.column` of the row named `key` is sealed for (GCM's additional data). */
export function secretContext (table: string, column: string, key: readonly string[]): string {
  return `${table}.${column}:${JSON.stringify(key)}`
}

/**
 * One row of an entry of {@link SECRET_COLUMNS} after `change` (the rule both drivers apply): the
 * row's key values, its secret columns' values in order, and how many of them changed.
 */
export function resealRow (entry: (typeof SECRET_COLUMNS)[number], row: Record<string, string | null>, change: (value: string, context: string) => string | undefined): { ids: string[], values: Array<string | null>, changed: number } {
  const ids = entry.key.map((k) => String(row[k]))
  let changed = 0
  const values = entry.columns.map((column) => {
    const value = row[column] ?? null
    if (value === null) return null
    const next = change(value, secretContext(entry.table, column, ids)) ?? value
    if (next !== value) changed++
    return next
  })
  return { ids, values, changed }
}

/**
 * The secrets a driver stores (the {@link SECRET_COLUMNS}) and the ids of the keys in use, which a
 * boot compares with its keyring ({@link settleSecrets}), so a missing or wrong key stops the boot
 * instead of failing on first use. The seal and open of each value are the keyring's; the driver
 * only reads and rewrites the columns.
 */
export interface StoredSecrets {
  /** The keys this process seals and opens with (SECRETS_KEY, SECRETS_KEYS_RETIRED). */
  readonly keyring: SecretKeyring
  /** The key ids recorded as in use ({@link PLAIN_KID} while values of an earlier version wait to be sealed). */
  recorded: () => Awaitable<string[]>
  /** Record `kid` as in use (the current key, at boot: before it seals anything). */
  record: (kid: string) => Awaitable<void>
  /** Every stored secret, as stored (sealed, or plain from an earlier version). */
  values: () => Awaitable<string[]>
  /**
   * In one transaction: every stored secret is given to `change` with its context, and a string it
   * returns is stored in its place; then the recorded key ids become `recorded`, and the row `audit`
   * makes of the count of values changed is appended. When `change` throws nothing changes.
   * @returns how many values changed
   */
  reseal: (change: (value: string, context: string) => string | undefined, recorded: readonly string[], audit?: (changed: number) => AuditInput) => Awaitable<number>
}

/** The error for stored values sealed with keys `kids`, which `keyring` lacks. */
function unknownKeys (kids: readonly string[], keyring: SecretKeyring): Error {
  const held = keyring.ids.length === 0 ? 'no key' : keyring.ids.join(', ')
  return new AH_ERR_SECRETS_KEY_UNKNOWN(kids.join(', '), held,
    'start with the key they were sealed with as SECRETS_KEY (or SECRETS_KEY_FILE); to change keys, set the new one as SECRETS_KEY and the old one in SECRETS_KEYS_RETIRED, run `agent-host secrets rotate`, then drop SECRETS_KEYS_RETIRED')
}

/**
 * The boot's check of the stored secrets against the keyring, before anything is served:
 * 1. a stored value sealed with a key the keyring lacks stops the boot (`AH_ERR_SECRETS_KEY_UNKNOWN`,
 *    naming it and what to do): the values are looked at when a key recorded as in use is not held,
 *    or when there is no current key (none set, or DATA_DIR's key file not made yet, or lost);
 * 2. values an earlier version stored in plain text are sealed, in one transaction (once: after it
 *    none is left; a boot without a key refuses with `AH_ERR_SECRETS_KEY_UNSET`);
 * 3. the current key, when there is one, is recorded as in use (DATA_DIR's, made when the first
 *    secret is sealed, is recorded by the next boot).
 * @returns how many plain values it sealed
 */
export async function settleSecrets (secrets: StoredSecrets): Promise<number> {
  const keyring = secrets.keyring
  const recorded = await secrets.recorded()
  const unheld = recorded.filter((kid) => kid !== PLAIN_KID && !keyring.holds(kid))
  // without a current key (none set, or DATA_DIR's not made yet) the values say which keys they need: a key made and lost is found so
  if (unheld.length > 0 || keyring.current === undefined) {
    // a recorded key may have sealed nothing still stored (its values deleted, or none made yet)
    const used = new Set((await secrets.values()).map(sealedKeyId).filter((kid): kid is string => kid !== undefined && !keyring.holds(kid)))
    if (used.size > 0) throw unknownKeys([...used], keyring)
  }
  let sealed = 0
  if (recorded.includes(PLAIN_KID)) {
    const current = keyring.ensureCurrent()?.id
    const keep = recorded.filter((kid) => kid !== PLAIN_KID && kid !== current)
    sealed = await secrets.reseal((value, context) => isSealed(value) ? undefined : keyring.seal(value, context), current === undefined ? keep : [...keep, current])
  } else {
    const current = keyring.current?.id
    if (current !== undefined && !recorded.includes(current)) await secrets.record(current)
  }
  return sealed
}

/**
 * Every stored secret sealed again with the current key (values of retired keys opened first, plain
 * ones sealed), in one transaction with the audit row `audit` makes; then the current key is the
 * only one recorded, so the next boot needs it alone.
 * @returns how many values were sealed again
 * @throws AH_ERR_SECRETS_KEY_UNSET without a current key; AH_ERR_SECRETS_KEY_UNKNOWN when a value's
 * key is not held (nothing changed)
 */
export async function rotateSecrets (secrets: StoredSecrets, audit: (changed: number) => AuditInput): Promise<number> {
  const keyring = secrets.keyring
  const current = keyring.current
  if (current === undefined) throw new AH_ERR_SECRETS_KEY_UNSET('the rotated secrets')
  return await secrets.reseal((value, context) => {
    const kid = sealedKeyId(value)
    if (kid === current.id) return undefined
    if (kid !== undefined && !keyring.holds(kid)) throw unknownKeys([kid], keyring)
    return keyring.seal(kid === undefined ? value : keyring.open(value, context), context)
  }, [current.id], audit)
}
