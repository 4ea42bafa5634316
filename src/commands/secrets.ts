import { userInfo } from 'node:os'
import { loadConfig } from '../config.js'
import { AH_ERR_SECRETS_KEY_UNKNOWN, AH_ERR_SECRET_UNREADABLE } from '../errors.js'
import { rotateSecrets } from '../storage/secrets.js'
import type { Stores } from '../storage/stores.js'
import { openCommandStores, type CommandIo } from './shared.js'
import { USAGE } from './usage.js'

/**
 * `secrets rotate`: every stored secret (A2A push tokens and credentials) of DATABASE_URL's database
 * when it is set, else of DATA_DIR's, sealed again with SECRETS_KEY, the values of the keys in
 * SECRETS_KEYS_RETIRED opened first, in one transaction with its audit row (`secrets.rotate`); then
 * SECRETS_KEY is the only key in use, and the server boots with it alone.
 * @returns 0 when done, 1 when a value could not be opened (nothing changed), 2 when refused (no SECRETS_KEY)
 */
export async function secrets (sub: string | undefined, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  if (sub !== 'rotate') { io.err(`secrets needs rotate\n\n${USAGE}`); return 2 }
  const config = loadConfig(env)
  if (config.SECRETS_KEY === '' && config.SECRETS_KEY_FILE === '') {
    io.err('secrets rotate seals the stored secrets with SECRETS_KEY (or the key in SECRETS_KEY_FILE): set it to the new key, and SECRETS_KEYS_RETIRED to the old one (make a key with openssl rand -base64 32)')
    return 2
  }
  // who ran the command on this machine, as for `keys`
  const actor = `cli:${userInfo().username}`
  let stores: Stores | undefined
  try {
    stores = await openCommandStores(config, 'secrets', io)
    const kid = stores.secrets.keyring.current?.id as string
    const retired = stores.secrets.keyring.ids.filter((id) => id !== kid)
    const resealed = await rotateSecrets(stores.secrets, (changed) => ({ actor, action: 'secrets.rotate', resource: kid, success: true, details: { resealed: changed, retired } }))
    io.out(`re-sealed ${resealed} secret${resealed === 1 ? '' : 's'} with key ${kid}; it is now the only key in use: SECRETS_KEYS_RETIRED may be dropped`)
    return 0
  } catch (err) {
    // a value whose key is given neither as SECRETS_KEY nor in SECRETS_KEYS_RETIRED (the boot's own check, or met while rotating), or one that does not authenticate
    if (!(err instanceof AH_ERR_SECRET_UNREADABLE || err instanceof AH_ERR_SECRETS_KEY_UNKNOWN)) throw err
    io.err(`nothing changed: ${(err as Error).message}`)
    return 1
  } finally {
    await stores?.close()
  }
}
