import { userInfo } from 'node:os'
import { loadConfig } from '../config.js'
import { USAGE } from './usage.js'
import { openCommandStores, table, type CommandIo } from './shared.js'
import { loadAgents } from '../agents/loader.js'
import { type ApiKeyRecord } from '../storage/api-keys.js'
import { SCOPES } from '../auth/scopes.js'
import { DEFAULT_TENANT, TENANT_NAME } from '../storage/tenants.js'
import { AH_ERR_KEY_NAME_AMBIGUOUS, AH_ERR_KEY_NAME_TAKEN } from '../errors.js'

/** Whether a key works at `now`: revoked (whatever its expiry), expired, or active. */
function keyState (k: ApiKeyRecord, now: Date): 'active' | 'expired' | 'revoked' {
  if (k.revoked_at !== null) return 'revoked'
  return k.expires_at !== null && Date.parse(k.expires_at) <= now.getTime() ? 'expired' : 'active'
}

/** A key as `keys list --json` prints it: the record's fields, named, and its state, never its hash. */
function keyJson (k: ApiKeyRecord, now: Date): Pick<ApiKeyRecord, 'id' | 'name' | 'tenant' | 'scopes' | 'agents' | 'created_at' | 'expires_at' | 'revoked_at'> & { state: ReturnType<typeof keyState> } {
  return { id: k.id, name: k.name, tenant: k.tenant, scopes: k.scopes, agents: k.agents, created_at: k.created_at, expires_at: k.expires_at, revoked_at: k.revoked_at, state: keyState(k, now) }
}

/** `30d`, `12h`, `45m` from now, or an ISO date. */
function expiry (text: string): Date | undefined {
  const relative = /^(\d+)([dhm])$/.exec(text)
  if (relative !== null) return new Date(Date.now() + Number(relative[1]) * { d: 86_400_000, h: 3_600_000, m: 60_000 }[relative[2] as 'd' | 'h' | 'm'])
  const date = new Date(text)
  return /^\d{4}-\d\d-\d\d/.test(text) && !Number.isNaN(date.getTime()) ? date : undefined
}

/**
 * `keys create|list|revoke`: the keys of DATABASE_URL's PostgreSQL database when it is set (shared
 * by every instance), else of DATA_DIR's SQLite database; each change is audited. `--tenant` makes
 * a key of that tenant (create) or lists only that tenant's keys (list).
 */
export async function keys (sub: string | undefined, target: string | undefined, values: { name?: string, scopes?: string, agents?: string, expires?: string, tenant?: string, json?: boolean }, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  const list = (v: string | undefined): string[] => (v ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '')
  if (sub !== 'create' && sub !== 'list' && sub !== 'revoke') { io.err(`keys needs create, list or revoke\n\n${USAGE}`); return 2 }
  let expiresAt: Date | undefined
  if (values.tenant !== undefined && !TENANT_NAME.test(values.tenant)) { io.err(`--tenant "${values.tenant}" is not a tenant's name: 1 to 63 of a-z 0-9 -, starting with a letter or digit`); return 2 }
  if (sub === 'create') {
    const unknown = list(values.scopes).filter((s) => !(SCOPES as readonly string[]).includes(s))
    if (values.name === undefined || values.name === '' || list(values.scopes).length === 0) { io.err('keys create needs --name and --scopes'); return 2 }
    if (unknown.length > 0) { io.err(`unknown scope(s): ${unknown.join(', ')} (known: ${SCOPES.join(', ')})`); return 2 }
    if (values.expires !== undefined) {
      expiresAt = expiry(values.expires)
      if (expiresAt === undefined) { io.err('--expires must be like 30d, 12h, 45m or an ISO date'); return 2 }
      if (expiresAt.getTime() <= Date.now()) { io.err(`--expires ${values.expires} is in the past: the key would never work`); return 2 }
    }
  }
  const config = loadConfig(env)
  const agents = list(values.agents)
  if (sub === 'create' && agents.length > 0) {
    const { registry } = await loadAgents(config.AGENTS_DIR)
    const unknown = agents.filter((a) => registry.get(a) === undefined)
    if (unknown.length > 0) { io.err(`no agent ${unknown.map((a) => `"${a}"`).join(', ')} in ${config.AGENTS_DIR} (known: ${registry.list().map((h) => h.manifest.metadata.name).join(', ')})`); return 2 }
  }
  // who ran the command on this machine: the operating-system user (keys are made outside the HTTP API)
  const actor = `cli:${userInfo().username}`
  // the stored keys only: those of API_KEYS live in the environment, and are neither listed nor revoked here
  const stores = await openCommandStores({ ...config, API_KEYS: '' }, 'keys', io)
  const store = stores.keys
  try {
    if (sub === 'create') {
      const { key, record } = await store.create({ name: values.name as string, scopes: list(values.scopes), ...(agents.length > 0 ? { agents } : {}), ...(values.tenant !== undefined ? { tenant: values.tenant } : {}), ...(expiresAt !== undefined ? { expiresAt } : {}) }, actor)
      io.out(key)
      io.err(`key ${record.id} "${record.name}"${record.tenant === DEFAULT_TENANT ? '' : ` of tenant ${record.tenant}`} made; it is shown only now`)
      return 0
    }
    if (sub === 'list') {
      const listed = (await store.list()).filter((k) => values.tenant === undefined || k.tenant === values.tenant)
      const now = new Date()
      if (values.json === true) { io.out(JSON.stringify(listed.map((k) => keyJson(k, now)))); return 0 }
      table(['ID', 'NAME', 'TENANT', 'SCOPES', 'AGENTS', 'CREATED', 'EXPIRES', 'STATE'], listed.map((k) => [
        k.id, k.name, k.tenant, k.scopes.join(','), k.agents?.join(',') ?? '*', k.created_at, k.expires_at ?? 'never', k.revoked_at === null ? keyState(k, now) : `revoked ${k.revoked_at}`
      ]), io)
      return 0
    }
    const revoked = target === undefined ? 0 : await store.revoke(target, actor)
    if (revoked === 0) { io.err(`no active key with id or name "${target ?? ''}"`); return 1 }
    io.out(`revoked ${revoked} key(s)`)
    return 0
  } catch (err) {
    // a name already taken, or shared by keys made before names were unique: nothing changed, and the message says what to do
    if (err instanceof AH_ERR_KEY_NAME_TAKEN || err instanceof AH_ERR_KEY_NAME_AMBIGUOUS) { io.err((err as Error).message); return 1 }
    throw err
  } finally {
    await stores.close()
  }
}
