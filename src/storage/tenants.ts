export { TENANT_NAME } from '../config.js'

/** The tenant of every key and token that names none: a single-team setup has only this one. */
export const DEFAULT_TENANT = 'default'

/** What every principal id of a tenant other than the default starts with: `tenant:<name>/`. */
const PREFIX = 'tenant:'

/**
 * The principal id of `id` (a key's id, `config:<name>`, `jwt:<sub>`) in `tenant`: the id itself in
 * the default tenant (so a single-team deployment's ids, and what they own, are as they always were),
 * else `tenant:<tenant>/<id>`. Everything a caller makes is stored under this id, so its tenant is
 * read from the id alone ({@link tenantOf}), in every store, with no column of its own.
 */
export function principalId (tenant: string, id: string): string {
  return tenant === DEFAULT_TENANT ? id : `${PREFIX}${tenant}/${id}`
}

/**
 * The tenant of a principal id (an owner, an actor). No id of the default tenant starts with
 * `tenant:` (key ids are hex, the others start with `config:`, `jwt:` or are `anonymous`).
 */
export function tenantOf (owner: string): string {
  if (!owner.startsWith(PREFIX)) return DEFAULT_TENANT
  const slash = owner.indexOf('/', PREFIX.length)
  return slash < 0 ? DEFAULT_TENANT : owner.slice(PREFIX.length, slash)
}

/**
 * Whether an audit row's `actor` names a principal (a key, a token's subject, the anonymous caller),
 * not the host's own work (`agent-host`, `cli:<user>`, `bootstrap`, `unauthenticated`, a task agent).
 */
export function isPrincipal (actor: string): boolean {
  return actor.startsWith(PREFIX) || /^[0-9a-f]{16}$/.test(actor) || actor.startsWith('config:') || actor.startsWith('jwt:') || actor === 'anonymous'
}

/** Whether `viewer` sees an audit row by `actor`: the host's own rows only everyone's viewer does. */
export function seesActor (viewer: Viewer, actor: string): boolean {
  return 'all' in viewer || (isPrincipal(actor) && sees(viewer, actor))
}

/**
 * Whose things a caller sees: everyone's (the host's `admin`), one tenant's (a `tenant-admin`), or
 * one principal's (everyone else). Another's thing is, for the caller, not there: 404, never 403.
 */
export type Viewer = { all: true } | { tenant: string } | { owner: string }

/** Whether `viewer` sees what `owner` owns (a thing of nobody, null, is the host's: only `all` sees it). */
export function sees (viewer: Viewer, owner: string | null | undefined): boolean {
  if ('all' in viewer) return true
  if (owner === null || owner === undefined) return false
  if ('owner' in viewer) return owner === viewer.owner
  return tenantOf(owner) === viewer.tenant
}

/**
 * {@link viewerSql} with its value, if it has one, as the named parameter `@viewer` (better-sqlite3's
 * form): the condition, and the parameters to bind beside the statement's others.
 */
export function namedViewerSql (viewer: Viewer, column: string): { sql: string, params: { viewer?: string } } {
  const params: { viewer?: string } = {}
  const sql = viewerSql(viewer, column, (value) => { params.viewer = value; return '@viewer' })
  return { sql, params }
}

/**
 * `viewer` as a SQL condition on the column `column` (both drivers: `substr` and `<>` mean the same
 * in SQLite and PostgreSQL), with its values, each placed by `param` (which returns the driver's
 * placeholder for the value it is given). `TRUE` for everyone's.
 */
export function viewerSql (viewer: Viewer, column: string, param: (value: string) => string): string {
  if ('all' in viewer) return 'TRUE'
  if ('owner' in viewer) return `${column} = ${param(viewer.owner)}`
  if (viewer.tenant === DEFAULT_TENANT) return `substr(${column}, 1, ${PREFIX.length}) <> ${param(PREFIX)}`
  const prefix = `${PREFIX}${viewer.tenant}/`
  return `substr(${column}, 1, ${prefix.length}) = ${param(prefix)}`
}
