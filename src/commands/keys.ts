import { userInfo } from 'node:os'
import type pg from 'pg'
import { auditKeysRetired, loadConfig } from '../config.js'
import { USAGE } from './usage.js'
import { openData, table, type CommandIo } from './shared.js'
import { AuditKeyring } from '../storage/audit-key.js'
import { SqliteAuditLog } from '../storage/sqlite/audit.js'
import { PgAuditLog } from '../storage/postgres/audit.js'
import { PgKeyStore } from '../storage/postgres/keys.js'
import { inTransaction, openPostgres } from '../storage/postgres/database.js'
import { loadAgents } from '../agents/loader.js'
import { SqliteKeyStore } from '../storage/sqlite/keys.js'
import { type ApiKeyRecord, type NewKey } from '../storage/api-keys.js'
import { SCOPES } from '../auth/scopes.js'
import { AH_ERR_KEY_NAME_AMBIGUOUS, AH_ERR_KEY_NAME_TAKEN } from '../errors.js'

/** Whether a key works at `now`: revoked (whatever its expiry), expired, or active. */
function keyState (k: ApiKeyRecord, now: Date): 'active' | 'expired' | 'revoked' {
  if (k.revoked_at !== null) return 'revoked'
  return k.expires_at !== null && Date.parse(k.expires_at) <= now.getTime() ? 'expired' : 'active'
}

/** A key as `keys list --json` prints it: the record's fields, named, and its state, never its hash. */
function keyJson (k: ApiKeyRecord, now: Date): Pick<ApiKeyRecord, 'id' | 'name' | 'scopes' | 'agents' | 'created_at' | 'expires_at' | 'revoked_at'> & { state: ReturnType<typeof keyState> } {
  return { id: k.id, name: k.name, scopes: k.scopes, agents: k.agents, created_at: k.created_at, expires_at: k.expires_at, revoked_at: k.revoked_at, state: keyState(k, now) }
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
 * by every instance), else of DATA_DIR's SQLite database; each change is audited.
 */
export async function keys (sub: string | undefined, target: string | undefined, values: { name?: string, scopes?: string, agents?: string, expires?: string, json?: boolean }, env: Record<string, string | undefined>, io: CommandIo): Promise<number> {
  const list = (v: string | undefined): string[] => (v ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '')
  if (sub !== 'create' && sub !== 'list' && sub !== 'revoke') { io.err(`keys needs create, list or revoke\n\n${USAGE}`); return 2 }
  let expiresAt: Date | undefined
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
  const keyring = new AuditKeyring(config.AUDIT_KEY, auditKeysRetired(config))
  const store = config.DATABASE_URL !== '' ? await pgKeys(config.DATABASE_URL, keyring, actor, io) : sqliteKeys(config.DATA_DIR, keyring, actor, io)
  try {
    if (sub === 'create') {
      const { key, record } = await store.create({ name: values.name as string, scopes: list(values.scopes), ...(agents.length > 0 ? { agents } : {}), ...(expiresAt !== undefined ? { expiresAt } : {}) })
      io.out(key)
      io.err(`key ${record.id} "${record.name}" made; it is shown only now`)
      return 0
    }
    if (sub === 'list') {
      const listed = await store.list()
      const now = new Date()
      if (values.json === true) { io.out(JSON.stringify(listed.map((k) => keyJson(k, now)))); return 0 }
      table(['ID', 'NAME', 'SCOPES', 'AGENTS', 'CREATED', 'EXPIRES', 'STATE'], listed.map((k) => [
        k.id, k.name, k.scopes.join(','), k.agents?.join(',') ?? '*', k.created_at, k.expires_at ?? 'never', k.revoked_at === null ? keyState(k, now) : `revoked ${k.revoked_at}`
      ]), io)
      return 0
    }
    const revoked = target === undefined ? 0 : await store.revoke(target)
    if (revoked === 0) { io.err(`no active key with id or name "${target ?? ''}"`); return 1 }
    io.out(`revoked ${revoked} key(s)`)
    return 0
  } catch (err) {
    // a name already taken, or shared by keys made before names were unique: nothing changed, and the message says what to do
    if (err instanceof AH_ERR_KEY_NAME_TAKEN || err instanceof AH_ERR_KEY_NAME_AMBIGUOUS) { io.err((err as Error).message); return 1 }
    throw err
  } finally {
    await store.close()
  }
}

/** The keys as `agent-host keys` changes them: each change with its audit row. */
interface KeysCommandStore {
  create: (options: NewKey) => Promise<{ key: string, record: ApiKeyRecord }>
  list: () => Promise<ApiKeyRecord[]>
  /** Revoke by id or name; audited when something was revoked. */
  revoke: (target: string) => Promise<number>
  close: () => Promise<void>
}

function keyCreated (record: ApiKeyRecord): Record<string, unknown> {
  return { name: record.name, scopes: record.scopes, agents: record.agents, expires_at: record.expires_at }
}

/** The keys of DATA_DIR's SQLite database. */
function sqliteKeys (dataDir: string, keyring: AuditKeyring, actor: string, io: CommandIo): KeysCommandStore {
  const db = openData(dataDir, io)
  const store = new SqliteKeyStore(db)
  const audit = (action: string, resource: string, details: Record<string, unknown>): void => {
    new SqliteAuditLog(db, keyring).append({ actor, action, resource, success: true, details })
  }
  return {
    create: async (options) => {
      const made = store.create(options)
      audit('key.create', made.record.id, keyCreated(made.record))
      return made
    },
    list: async () => store.list(),
    revoke: async (target) => {
      const revoked = store.revoke(target)
      if (revoked > 0) audit('key.revoke', target, { keys: revoked })
      return revoked
    },
    close: async () => { db.close() }
  }
}

/** The keys of DATABASE_URL's PostgreSQL database (migrated first): a key and its audit row are committed together. */
async function pgKeys (url: string, keyring: AuditKeyring, actor: string, io: CommandIo): Promise<KeysCommandStore> {
  const progress = io.progress
  let pool: pg.Pool
  try {
    pool = await openPostgres(url, { max: 2, applicationName: 'agent-host keys', ...(progress !== undefined ? { onMigration: (step, index, pending) => { progress.update(index, pending, `migrating the database (${step.version}: ${step.description})`) } } : {}) })
  } finally {
    progress?.end()
  }
  const opened = pool
  const store = new PgKeyStore(opened)
  let audit: PgAuditLog
  try {
    audit = await PgAuditLog.open(opened, keyring)
  } catch (err) {
    await opened.end()
    throw err
  }
  return {
    create: async (options) => await inTransaction(opened, async (client) => {
      const made = await store.createIn(client, options)
      await audit.appendIn(client, { actor, action: 'key.create', resource: made.record.id, success: true, details: keyCreated(made.record) })
      return made
    }),
    list: async () => await store.list(),
    revoke: async (target) => await inTransaction(opened, async (client) => {
      const revoked = await store.revokeIn(client, target)
      if (revoked > 0) await audit.appendIn(client, { actor, action: 'key.revoke', resource: target, success: true, details: { keys: revoked } })
      return revoked
    }),
    close: async () => { await opened.end() }
  }
}
