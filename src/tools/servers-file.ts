import { readFileSync, realpathSync, statSync } from 'node:fs'
import { dirname, isAbsolute, resolve } from 'node:path'
import type { ErrorObject } from 'ajv'
import { Type, type Static } from 'typebox'
import { createAjv, lazySchema, toIssues } from '../agents/json-schema.js'
import { AH_ERR_CONFIG_INVALID } from '../errors.js'

/** The arguments that hold paths, when a path scope does not name its own. */
export const DEFAULT_PATH_ARGUMENTS = ['path', 'paths', 'source', 'destination'] as const
/** The arguments that hold a branch, when a branch scope does not name its own. */
export const DEFAULT_BRANCH_ARGUMENTS = ['branch'] as const
/** A call's timeout when neither the call nor the server's entry gives one (the seed's `ToolCall.timeout`), in seconds. */
export const DEFAULT_TIMEOUT_S = 30
/** Retries of a call that failed in transport (a crashed server, a connection lost), when the entry does not say. */
export const DEFAULT_RETRIES = 1
/** How long a server may take to start and answer `initialize`, when the entry does not say, in seconds. */
export const DEFAULT_STARTUP_TIMEOUT_S = 30

const closed = { additionalProperties: false } as const
const GRANTS = 'client_credentials (the client\'s own id and secret) or refresh_token (a refresh token the client was given)'
const Names = Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { minItems: 1 })
const ACTIONS = 'a list of the server\'s tool names (["read_text_file", ...]), or an object of action → tool name ({"read": "read_text_file", ...}), each name 1 to 128 characters'
const REQUIRE_APPROVAL = 'true (every action waits for a person\'s approval), false, or a list of the actions that do (["write", ...])'

/**
 * Streamable HTTP: how the host gets its access token from the authorization server that the server's
 * protected resource metadata names. Secrets (`client_secret`, `refresh_token`) are a `${NAME}`
 * reference or a file (`*_file`, relative to the servers file's folder), never written in the file.
 */
const OAuthSchema = Type.Object({
  grant: Type.Union([Type.Literal('client_credentials'), Type.Literal('refresh_token')], { description: GRANTS }),
  client_id: Type.String({ minLength: 1 }),
  client_secret: Type.Optional(Type.String({ minLength: 1 })),
  client_secret_file: Type.Optional(Type.String({ minLength: 1 })),
  refresh_token: Type.Optional(Type.String({ minLength: 1 })),
  refresh_token_file: Type.Optional(Type.String({ minLength: 1 })),
  /** The scope to ask for (space-separated); absent: the authorization server's default. */
  scope: Type.Optional(Type.String({ minLength: 1 })),
  /** The resource indicator (RFC 8707) to ask a token for, instead of the one the server's metadata names. */
  resource: Type.Optional(Type.String({ minLength: 1 })),
  /** The issuer URL of the authorization server the client is registered with: the credentials go to no other. */
  authorization_server: Type.Optional(Type.String({ minLength: 1 }))
}, closed)
type OAuthEntry = Static<typeof OAuthSchema>

/** One server's entry in the MCP servers file. */
const ServerEntrySchema = Type.Object({
  /** stdio: the program to start (looked up on PATH), and its arguments. */
  command: Type.Optional(Type.String({ minLength: 1 })),
  args: Type.Optional(Type.Array(Type.String())),
  /** stdio: environment variables of its own; `${NAME}` in a value is the host's variable NAME. */
  env: Type.Optional(Type.Record(Type.String(), Type.String())),
  /** stdio: its working folder (relative: to the servers file's folder). */
  cwd: Type.Optional(Type.String({ minLength: 1 })),
  /** Streamable HTTP: the endpoint. */
  url: Type.Optional(Type.String({ minLength: 1 })),
  /** Streamable HTTP: headers of every request; `${NAME}` in a value is the host's variable NAME. */
  headers: Type.Optional(Type.Record(Type.String(), Type.String())),
  /** Streamable HTTP: an access token got by OAuth, sent as the `Authorization` of every request. */
  oauth: Type.Optional(OAuthSchema),
  /** The agents (manifest names) that may use it; absent: every agent. */
  agents: Type.Optional(Names),
  actions: Type.Union([
    Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { minItems: 1 }),
    Type.Record(Type.String({ minLength: 1, maxLength: 128 }), Type.String({ minLength: 1, maxLength: 128 }), { minProperties: 1 })
  ], { description: ACTIONS }),
  timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600 })),
  retries: Type.Optional(Type.Integer({ minimum: 0, maximum: 5 })),
  startup_timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: 600 })),
  /** Calls that wait for a person's approval (an `approval` interrupt of the run) before the server sees them: true for every action, or a list of actions. */
  require_approval: Type.Optional(Type.Union([Type.Boolean(), Names], { description: REQUIRE_APPROVAL })),
  scope: Type.Optional(Type.Object({
    root: Type.Optional(Type.String({ minLength: 1 })),
    paths: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 1024 }), { minItems: 1 })),
    path_arguments: Type.Optional(Names),
    branch_pattern: Type.Optional(Type.String({ minLength: 1, maxLength: 1024 })),
    branch_arguments: Type.Optional(Names)
  }, closed))
}, closed)
type ServerEntry = Static<typeof ServerEntrySchema>

/** The MCP servers file (`MCP_SERVERS_FILE`): the same `mcpServers` object MCP clients such as Claude Desktop read, with the host's rules beside each. */
const ServersFile = Type.Object({ mcpServers: Type.Record(Type.String(), ServerEntrySchema) }, closed)

/** How the host reaches a server. */
export type ToolTransport =
  | { kind: 'stdio', command: string, args: readonly string[], env: Readonly<Record<string, string>>, cwd?: string }
  | { kind: 'streamable_http', url: URL, headers: Readonly<Record<string, string>>, oauth?: OAuthSpec }

/**
 * How the host gets an access token for a Streamable HTTP server, its secrets read: the
 * client credentials grant, or the refresh token grant of a client registered beforehand (a public
 * client has no secret). The server's protected resource metadata names the authorization server.
 */
export type OAuthSpec = {
  clientId: string
  /** The scope asked for; undefined: the authorization server's default. */
  scope?: string
  /** The resource indicator asked for instead of the one the server's metadata names. */
  resource?: URL
  /** The only authorization server the credentials are presented to; undefined: the first that the server names and that accepts them. */
  authorizationServer?: string
} & (
  | { grant: 'client_credentials', clientSecret: string }
  | { grant: 'refresh_token', clientSecret?: string, refreshToken: string }
)

/** A path scope: every path-valued argument must resolve, by real path, under `root` and match one of `patterns`. */
export interface PathScopeSpec {
  /** The real path of the folder the globs are relative to. */
  root: string
  patterns: readonly string[]
  arguments: readonly string[]
}

/** A branch scope: every branch-valued argument must match `pattern`. */
export interface BranchScopeSpec {
  pattern: string
  arguments: readonly string[]
}

/** One MCP server as the operator registered it, validated, its `${NAME}` references resolved and its paths absolute. */
export interface ToolServerSpec {
  /** What agents call it (`ToolCall.tool`). */
  name: string
  transport: ToolTransport
  /** The agents that may use it; undefined: every agent. */
  agents?: readonly string[]
  /** The actions agents may call → the server's tool behind each. */
  actions: ReadonlyMap<string, string>
  timeoutS: number
  retries: number
  startupTimeoutS: number
  paths?: PathScopeSpec
  branches?: BranchScopeSpec
  /** The actions whose calls wait for a person's approval: `true` every action; undefined: none. */
  requireApproval?: true | readonly string[]
}

/** Whether a call of `action` of the server `spec` waits for a person's approval (its `require_approval`). */
export function requiresApproval (spec: Pick<ToolServerSpec, 'requireApproval'>, action: string): boolean {
  const rule = spec.requireApproval
  return rule === true || (rule !== undefined && rule.includes(action))
}

const validate = lazySchema<Static<typeof ServersFile>>(ServersFile, () => createAjv({ coerceTypes: false, useDefaults: false, verbose: true }))
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/
const REFERENCE = /\$\{([^}]*)\}/g
const ONE_REFERENCE = /^\$\{[^}]*\}$/

/**
 * Read, validate and resolve the MCP servers file. Relative `cwd`, `scope.root` and `oauth`'s
 * secret files are taken from the file's folder (the secrets are read now); `${NAME}` in `env`,
 * `headers` and `oauth` values is `env[NAME]`.
 * @param file the path (empty: no servers)
 * @param env the host's environment, whose variables `${NAME}` may name
 * @throws AH_ERR_CONFIG_INVALID with one line per problem, each naming its place in the file
 */
export function loadToolServers (file: string, env: Readonly<Record<string, string | undefined>>): ToolServerSpec[] {
  if (file === '') return []
  const path = resolve(file)
  const fail = (lines: string[]): never => {
    throw new AH_ERR_CONFIG_INVALID(`env/MCP_SERVERS_FILE (${path}) is not a valid MCP servers file:\n  ${lines.join('\n  ')}`)
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'))
  } catch (err) {
    fail([(err as { code?: unknown }).code !== undefined ? `it cannot be read: ${(err as Error).message}` : `it is not JSON: ${(err as Error).message}`])
  }
  if (!validate(parsed)) fail(schemaProblems(validate.errors ?? []))
  const servers: ToolServerSpec[] = []
  const problems: string[] = []
  for (const [name, entry] of Object.entries((parsed as Static<typeof ServersFile>).mcpServers)) {
    const spec = serverSpec(name, entry, dirname(path), env, (line) => problems.push(`/mcpServers/${name}${line}`))
    if (spec !== undefined) servers.push(spec)
  }
  if (problems.length > 0) fail(problems)
  return servers
}

/** One line per failing place: the message of a choice (`anyOf`) once, instead of one per branch. */
function schemaProblems (errors: ErrorObject[]): string[] {
  const choices = errors.filter((e) => e.keyword === 'anyOf')
  const lines = new Map<string, string>()
  for (const e of errors) {
    const choice = choices.find((c) => e.instancePath === c.instancePath || e.instancePath.startsWith(`${c.instancePath}/`))
    if (choice !== undefined) {
      lines.set(choice.instancePath, `${choice.instancePath} must be ${String((choice.parentSchema as { description?: string }).description)}`)
      continue
    }
    const [issue] = toIssues([e])
    if (issue !== undefined && !lines.has(issue.path)) lines.set(issue.path, `${issue.path} ${e.keyword === 'required' ? 'is required' : issue.message}`)
  }
  return [...lines.values()]
}

/** `value` with each `${NAME}` replaced by the host's variable; a name that is not set is a problem. */
function substitute (value: string, env: Readonly<Record<string, string | undefined>>, problem: (message: string) => void): string {
  return value.replace(REFERENCE, (whole, name: string) => {
    if (!ENV_NAME.test(name)) { problem(`${whole} is not a variable reference: write \${NAME}, NAME of letters, digits and _`); return whole }
    const found = env[name]
    if (found === undefined) { problem(`${whole} names a variable that is not set in the server's environment`); return whole }
    return found
  })
}

function substituteAll (values: Record<string, string> | undefined, where: string, env: Readonly<Record<string, string | undefined>>, problem: (line: string) => void): Record<string, string> {
  return Object.fromEntries(Object.entries(values ?? {}).map(([key, value]) => [key, substitute(value, env, (m) => { problem(`/${where}/${key}: ${m}`) })]))
}

/** The folder `root` names, by real path; a problem when it is not one. */
function realFolder (root: string, problem: (message: string) => void): string | undefined {
  try {
    const real = realpathSync(root)
    if (statSync(real).isDirectory()) return real
    problem(`${root} is not a folder`)
  } catch (err) {
    problem(`${root} cannot be used: ${(err as Error).message}`)
  }
  return undefined
}

function serverSpec (name: string, entry: ServerEntry, base: string, env: Readonly<Record<string, string | undefined>>, problem: (line: string) => void): ToolServerSpec | undefined {
  let count = 0
  const report = (line: string): void => { count++; problem(line) }
  if (!TOOL_NAME.test(name)) report(': the tool name must be 1 to 64 letters, digits, _ or - (agents call it by this name; "." separates it from the action in the audit log)')
  const transport = transportOf(entry, base, env, report)
  const actions = new Map<string, string>(Array.isArray(entry.actions) ? entry.actions.map((a) => [a, a]) : Object.entries(entry.actions))
  const scope = entry.scope ?? {}
  let paths: PathScopeSpec | undefined
  if (scope.paths !== undefined || scope.path_arguments !== undefined) {
    if (scope.root === undefined || scope.paths === undefined) report('/scope: a path scope needs both root (a folder) and paths (globs relative to it)')
    else {
      for (const [i, glob] of scope.paths.entries()) {
        if (isAbsolute(glob) || glob.split('/').includes('..')) report(`/scope/paths/${i}: ${glob} must be relative to root, without ..`)
      }
      const root = realFolder(resolve(base, scope.root), (m) => { report(`/scope/root: ${m}`) })
      if (root !== undefined) paths = { root, patterns: scope.paths, arguments: scope.path_arguments ?? DEFAULT_PATH_ARGUMENTS }
    }
  } else if (scope.root !== undefined) report('/scope: root without paths: give the globs the tool may touch under it (["**"] for all of it)')
  let branches: BranchScopeSpec | undefined
  if (scope.branch_pattern !== undefined) branches = { pattern: scope.branch_pattern, arguments: scope.branch_arguments ?? DEFAULT_BRANCH_ARGUMENTS }
  else if (scope.branch_arguments !== undefined) report('/scope: branch_arguments without branch_pattern')
  for (const [i, action] of (Array.isArray(entry.require_approval) ? entry.require_approval : []).entries()) {
    if (!actions.has(action)) report(`/require_approval/${i}: "${action}" is not an action of this server (its actions: ${[...actions.keys()].join(', ')})`)
  }
  if (count > 0 || transport === undefined) return undefined
  const requireApproval = entry.require_approval === true ? true : Array.isArray(entry.require_approval) ? entry.require_approval : undefined
  return {
    name,
    transport,
    ...(entry.agents !== undefined ? { agents: entry.agents } : {}),
    actions,
    timeoutS: entry.timeout ?? DEFAULT_TIMEOUT_S,
    retries: entry.retries ?? DEFAULT_RETRIES,
    startupTimeoutS: entry.startup_timeout ?? DEFAULT_STARTUP_TIMEOUT_S,
    ...(paths !== undefined ? { paths } : {}),
    ...(branches !== undefined ? { branches } : {}),
    ...(requireApproval !== undefined ? { requireApproval } : {})
  }
}

function transportOf (entry: ServerEntry, base: string, env: Readonly<Record<string, string | undefined>>, report: (line: string) => void): ToolTransport | undefined {
  if ((entry.command === undefined) === (entry.url === undefined)) {
    report(': give either command (a server started over stdio) or url (a Streamable HTTP server), not both or neither')
    return undefined
  }
  if (entry.command !== undefined) {
    if (entry.headers !== undefined) report('/headers: only a url server takes headers')
    if (entry.oauth !== undefined) report('/oauth: only a url server takes oauth (a stdio server gets its secrets in env)')
    for (const key of Object.keys(entry.env ?? {})) if (!ENV_NAME.test(key)) report(`/env/${key}: not a variable name (letters, digits and _)`)
    const environment = substituteAll(entry.env, 'env', env, report)
    return { kind: 'stdio', command: entry.command, args: entry.args ?? [], env: environment, ...(entry.cwd !== undefined ? { cwd: resolve(base, entry.cwd) } : {}) }
  }
  for (const key of ['args', 'env', 'cwd'] as const) if (entry[key] !== undefined) report(`/${key}: only a command server takes ${key}`)
  let url: URL | undefined
  try {
    url = new URL(entry.url as string)
  } catch {}
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    report(`/url: ${String(entry.url)} must be an http:// or https:// URL`)
    return undefined
  }
  const headers = substituteAll(entry.headers, 'headers', env, report)
  if (entry.oauth === undefined) return { kind: 'streamable_http', url, headers }
  for (const key of Object.keys(headers)) {
    if (key.toLowerCase() === 'authorization') report(`/headers/${key}: a server with oauth gets its Authorization from its access token`)
  }
  const oauth = oauthOf(entry.oauth, base, env, (line) => { report(`/oauth${line}`) })
  return oauth !== undefined ? { kind: 'streamable_http', url, headers, oauth } : undefined
}

/** An entry's `oauth`, its secrets read; undefined after a problem. */
function oauthOf (entry: OAuthEntry, base: string, env: Readonly<Record<string, string | undefined>>, report: (line: string) => void): OAuthSpec | undefined {
  let count = 0
  const problem = (line: string): void => { count++; report(line) }
  const clientId = substitute(entry.client_id, env, (m) => { problem(`/client_id: ${m}`) })
  const clientSecret = secretOf(entry, 'client_secret', base, env, problem)
  const url = (key: 'resource' | 'authorization_server'): URL | undefined => {
    const value = entry[key]
    if (value === undefined) return undefined
    const parsed = URL.canParse(value) ? new URL(value) : undefined
    if (parsed?.protocol === 'http:' || parsed?.protocol === 'https:') return parsed
    problem(`/${key}: ${value} must be an http:// or https:// URL`)
    return undefined
  }
  const resource = url('resource')
  const authorizationServer = url('authorization_server') !== undefined ? entry.authorization_server : undefined
  const common = {
    clientId,
    ...(entry.scope !== undefined ? { scope: entry.scope } : {}),
    ...(resource !== undefined ? { resource } : {}),
    ...(authorizationServer !== undefined ? { authorizationServer } : {})
  }
  if (entry.grant === 'client_credentials') {
    if (entry.refresh_token !== undefined || entry.refresh_token_file !== undefined) problem(`/${entry.refresh_token !== undefined ? 'refresh_token' : 'refresh_token_file'}: only the refresh_token grant takes a refresh token`)
    if (entry.client_secret === undefined && entry.client_secret_file === undefined) problem(`: the ${entry.grant} grant needs client_secret (\${NAME}) or client_secret_file`)
    return count === 0 && clientSecret !== undefined ? { ...common, grant: 'client_credentials', clientSecret } : undefined
  }
  const refreshToken = secretOf(entry, 'refresh_token', base, env, problem)
  if (entry.refresh_token === undefined && entry.refresh_token_file === undefined) problem(`: the ${entry.grant} grant needs refresh_token (\${NAME}) or refresh_token_file`)
  if (count > 0 || refreshToken === undefined) return undefined
  return { ...common, grant: 'refresh_token', refreshToken, ...(clientSecret !== undefined ? { clientSecret } : {}) }
}

/**
 * The secret `key` of an `oauth` entry: `${NAME}` (nothing else: a secret is never written in the
 * file), or the trimmed text of `<key>_file` (relative to the file's folder). The problems name
 * where it should come from, never what was written.
 */
function secretOf (entry: OAuthEntry, key: 'client_secret' | 'refresh_token', base: string, env: Readonly<Record<string, string | undefined>>, problem: (line: string) => void): string | undefined {
  const value = entry[key]
  const file = entry[`${key}_file`]
  if (value !== undefined && file !== undefined) { problem(`: give ${key} or ${key}_file, not both`); return undefined }
  if (value !== undefined) {
    if (!ONE_REFERENCE.test(value)) { problem(`/${key}: a secret is not written in the servers file: give \${NAME} (the host's variable NAME holds it) or ${key}_file`); return undefined }
    let ok = true
    const secret = substitute(value, env, (m) => { ok = false; problem(`/${key}: ${m}`) })
    if (ok && secret === '') problem(`/${key}: ${value} is set but empty`)
    return ok && secret !== '' ? secret : undefined
  }
  if (file === undefined) return undefined
  const path = resolve(base, file)
  try {
    const secret = readFileSync(path, 'utf8').trim()
    if (secret !== '') return secret
    problem(`/${key}_file: ${path} is empty`)
  } catch (err) {
    problem(`/${key}_file: ${path} cannot be read: ${(err as Error).message}`)
  }
  return undefined
}
