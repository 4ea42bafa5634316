import { fileURLToPath } from 'node:url'
import { resolve } from 'node:path'
import envSchema from 'env-schema'
import { Type, type Static } from 'typebox'
import { AH_ERR_CONFIG_INVALID } from './errors.js'
import { loadA2AAgents, type A2AAgentConfig } from './a2a-client/agents-file.js'
import { loadToolServers, type ToolServerSpec } from './tools/servers-file.js'

/**
 * Every setting of the server, read once at boot from the environment (and `.env` when present).
 * `.env.example` lists each key with its default; a test keeps the two in step.
 */
export const ConfigSchema = Type.Object({
  /** Interface to bind; `0.0.0.0` inside containers. */
  HOST: Type.String({ default: '127.0.0.1', minLength: 1 }),
  PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535 }),
  LOG_LEVEL: Type.Union(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)), { default: 'info' }),
  /** `json` (pino's lines, for machines) or `pretty` (pino-pretty, a dev dependency: `npm run dev` sets it). */
  LOG_FORMAT: Type.Union([Type.Literal('json'), Type.Literal('pretty')], { default: 'json' }),
  /** Where all runtime state lives (relative paths are resolved from the working directory). */
  DATA_DIR: Type.String({ default: 'data', minLength: 1 }),
  /**
   * `postgres://user:password@host:5432/database`: keep everything durable in PostgreSQL, shared by
   * every instance and worker given the same URL (runs, sessions, the audit chain, keys, limits,
   * tasks, the event bus). Empty: SQLite under DATA_DIR, for one machine.
   */
  DATABASE_URL: Type.String({ default: '' }),
  /** PostgreSQL: connections each process keeps open at most (runs' writes, followers' reads, the listener). */
  DB_POOL_MAX: Type.Integer({ default: 10, minimum: 2, maximum: 1000 }),
  /** Folder of drop-in agents; empty means the example agents shipped next to the code. */
  AGENTS_DIR: Type.String({ default: '' }),
  /** Largest accepted request body, in bytes. */
  BODY_LIMIT: Type.Integer({ default: 1048576, minimum: 1024 }),
  /** Deepest nesting of arrays and objects a JSON body may have; deeper is a 400 before the body is parsed. */
  MAX_BODY_DEPTH: Type.Integer({ default: 64, minimum: 8, maximum: 1000 }),
  /** Send a `: ping` comment after this long without output on an SSE response. */
  SSE_HEARTBEAT_MS: Type.Integer({ default: 15000, minimum: 10 }),
  /** Reconnection delay advertised with `retry:` at the start of each SSE response (0: none). */
  SSE_RETRY_MS: Type.Integer({ default: 3000, minimum: 0 }),
  /** Bytes queued for one slow SSE client before its run is ended with `slow_consumer`. */
  SSE_MAX_BUFFER_BYTES: Type.Integer({ default: 8388608, minimum: 65536 }),
  /** How long one SSE client may read nothing while its socket is full before its run goes on without it (`slow_consumer`). */
  SSE_STALL_TIMEOUT_MS: Type.Integer({ default: 30000, minimum: 100 }),
  /** How long a finished run's journal and answer are kept for resumes and retries. */
  JOURNAL_RETENTION_MS: Type.Integer({ default: 86400000, minimum: 1000 }),
  /** Longest a /v1/assist run may take before it is stopped with `run_timeout` (0: no limit); a request may ask for less. */
  RUN_TIMEOUT_MS: Type.Integer({ default: 600000, minimum: 0 }),
  /** Past this many bytes of packets a run is stopped with a FATAL `output_too_large` (what it produced so far is kept). */
  RUN_MAX_OUTPUT_BYTES: Type.Integer({ default: 16777216, minimum: 1024 }),
  /** How long a run's owner holds it without renewing (renewed every third of it); a run whose lease lapsed is recovered by any server on the DATA_DIR. */
  RUN_LEASE_MS: Type.Integer({ default: 15000, minimum: 100 }),
  /** How long a write may wait, without blocking the server, while another process holds the database's write lock; past it 503 `AH_ERR_STORAGE_BUSY`. */
  DB_WRITE_BUDGET_MS: Type.Integer({ default: 5000, minimum: 10 }),
  /** How long one write attempt blocks waiting for that lock before it is retried asynchronously (keep it short: it blocks the event loop). */
  DB_BUSY_TIMEOUT_MS: Type.Integer({ default: 20, minimum: 0, maximum: 1000 }),
  /** How often a worker thread copies the WAL into the database file (0: SQLite's own checkpoints, inside a commit every 1 000 pages, on the event loop). */
  DB_CHECKPOINT_INTERVAL_MS: Type.Integer({ default: 1000, minimum: 0, maximum: 3600000 }),
  /** SQLite's page cache per connection, in KiB. */
  DB_CACHE_KIB: Type.Integer({ default: 65536, minimum: 1024 }),
  /** The page size of a database this server creates (an existing one keeps its own): smaller pages, fewer bytes written per request, a little more CPU. */
  DB_PAGE_SIZE: Type.Union([Type.Literal(1024), Type.Literal(2048), Type.Literal(4096), Type.Literal(8192)], { default: 4096 }),
  /** What a run does when its last client goes away: go on (a re-POST picks it up) or be cancelled. */
  DISCONNECT_POLICY: Type.Union([Type.Literal('continue'), Type.Literal('cancel')], { default: 'continue' }),
  /** Where the task graph lives: `file` (DATA_DIR/tasks.graph.json, file-locked), `sqlite`, or `postgres` (DATABASE_URL; the default when it is set). */
  TASK_STORE: Type.Union([Type.Literal('file'), Type.Literal('sqlite'), Type.Literal('postgres')], { default: 'file' }),
  /** Worker loops per task agent in the server (0: the server runs none; use `agent-host worker`). */
  WORKERS_PER_TYPE: Type.Integer({ default: 1, minimum: 0, maximum: 64 }),
  /** How long a task claim lasts without a heartbeat; the reaper runs every half of it. */
  TASK_LEASE_MS: Type.Integer({ default: 30000, minimum: 200 }),
  /** File store: a lock on tasks.graph.json whose holder stopped refreshing it for this long is taken over (a dead or frozen holder delays others by at most this). */
  TASK_LOCK_STALE_MS: Type.Integer({ default: 5000, minimum: 500, maximum: 600000 }),
  /** How often a running task's lease is extended. */
  TASK_HEARTBEAT_MS: Type.Integer({ default: 10000, minimum: 50 }),
  /** How long an idle worker waits before looking for work again. */
  TASK_POLL_MS: Type.Integer({ default: 500, minimum: 10 }),
  /** Event bus: how often a process looks for deliveries that other processes published (its own wake it at once). */
  BUS_POLL_MS: Type.Integer({ default: 250, minimum: 10 }),
  /** Event bus: how long a delivery is leased to one process; a handler still running then is aborted and the event delivered again. */
  BUS_LEASE_MS: Type.Integer({ default: 60000, minimum: 100 }),
  /** Event bus: attempts of a delivery whose handler throws before it is dead-lettered. */
  BUS_MAX_ATTEMPTS: Type.Integer({ default: 5, minimum: 1, maximum: 100 }),
  /** Event bus: the wait before a failed delivery's second attempt, doubling after each (at most a minute). */
  BUS_RETRY_BACKOFF_MS: Type.Integer({ default: 1000, minimum: 0 }),
  /** A2A push notifications: how often a process looks for task updates to push (configs other processes made, runs other processes journal). */
  A2A_PUSH_POLL_MS: Type.Integer({ default: 500, minimum: 10 }),
  /** A2A push notifications: how long one POST to a receiver may take (to the end of its answer) before it counts as failed. */
  A2A_PUSH_TIMEOUT_MS: Type.Integer({ default: 10000, minimum: 100 }),
  /** A2A push notifications: the wait before a failed update's second attempt, doubling after each (at most five minutes). */
  A2A_PUSH_RETRY_BASE_MS: Type.Integer({ default: 1000, minimum: 0 }),
  /** A2A push notifications: attempts of one update before its config is marked `failed` (nothing more is pushed to it). */
  A2A_PUSH_MAX_ATTEMPTS: Type.Integer({ default: 12, minimum: 1, maximum: 100 }),
  /** A2A push notifications: allow URLs that resolve to loopback, private, link-local or other non-public addresses (off: refused, no SSRF). */
  A2A_PUSH_ALLOW_PRIVATE: Type.Boolean({ default: false }),
  /** Event-loop delay past which requests get 503 `AH_ERR_OVERLOADED` and `/health` says `degraded` (0: unchecked). */
  MAX_EVENT_LOOP_DELAY_MS: Type.Integer({ default: 1000, minimum: 0 }),
  /** Heap in use past which the same happens (0: unchecked). */
  MAX_HEAP_USED_BYTES: Type.Integer({ default: 0, minimum: 0 }),
  /** Resident memory past which the same happens (0: unchecked). */
  MAX_RSS_BYTES: Type.Integer({ default: 0, minimum: 0 }),
  /** How often the load is sampled. */
  PRESSURE_SAMPLE_MS: Type.Integer({ default: 1000, minimum: 10 }),
  /** How long shutdown may take before the process exits anyway. */
  CLOSE_GRACE_MS: Type.Integer({ default: 10000, minimum: 0 }),
  /** This instance's id in `/health`; empty means a new UUID at each boot. */
  INSTANCE_ID: Type.String({ default: '' }),
  /** `off`: anyone may do anything (loopback only, unless ALLOW_INSECURE); `apikey`: Bearer keys with scopes; `jwt`: Bearer JWTs (JWT_*). */
  AUTH_MODE: Type.Union([Type.Literal('off'), Type.Literal('apikey'), Type.Literal('jwt')], { default: 'off' }),
  /** Start with AUTH_MODE=off on a non-loopback HOST anyway (a private network you trust). */
  ALLOW_INSECURE: Type.Boolean({ default: false }),
  /** Keys from configuration, for simple deployments: `[{"name", "key" (24+ characters), "scopes": [...], "agents"?: [...]}]`. */
  API_KEYS: Type.String({ default: '' }),
  /** A first-run admin key: with AUTH_MODE=apikey, stored once as the key `bootstrap-admin` when no key of that name was ever made. */
  BOOTSTRAP_ADMIN_KEY: Type.String({ default: '' }),
  /** AUTH_MODE=jwt: the HS256 shared secret (32 or more characters); set this or JWT_JWKS_FILE. */
  JWT_SECRET: Type.String({ default: '' }),
  /** The audit chain's key (32+ characters): each row is an HMAC with it, so a rewrite needs it. Keep it outside DATA_DIR. Empty: a plain hash chain (accidents only). */
  AUDIT_KEY: Type.String({ default: '' }),
  /** Keys used before a rotation, comma-separated: rows and checkpoints they signed still verify. */
  AUDIT_KEYS_RETIRED: Type.String({ default: '' }),
  /** How often the audit log's signed checkpoint is appended to DATA_DIR/audit-checkpoints.jsonl when it grew (0: only at boot and shutdown). */
  AUDIT_CHECKPOINT_INTERVAL_MS: Type.Integer({ default: 60000, minimum: 0 }),
  /** AUTH_MODE=jwt: a JWKS file of public keys (each with a `kid`) for RS256, PS256, ES256 or EdDSA tokens. */
  JWT_JWKS_FILE: Type.String({ default: '' }),
  /** AUTH_MODE=jwt: the `iss` every token must carry. */
  JWT_ISSUER: Type.String({ default: '' }),
  /** AUTH_MODE=jwt: the `aud` every token must carry (one of its values). */
  JWT_AUDIENCE: Type.String({ default: '' }),
  /** AUTH_MODE=jwt: clock skew allowed on `exp`, `nbf` and `iat`. */
  JWT_CLOCK_TOLERANCE_MS: Type.Integer({ default: 5000, minimum: 0 }),
  /** Requests one caller (a key, a token's subject, or an address when auth is off) may make per RATE_LIMIT_WINDOW_MS (0: no limit). */
  RATE_LIMIT_MAX: Type.Integer({ default: 600, minimum: 0 }),
  /** New /v1/assist runs one agent may be given per RATE_LIMIT_WINDOW_MS, all callers together (0: no limit). */
  RATE_LIMIT_AGENT_MAX: Type.Integer({ default: 1200, minimum: 0 }),
  RATE_LIMIT_WINDOW_MS: Type.Integer({ default: 60000, minimum: 100 }),
  /** Failed authentications one client address may make per RATE_LIMIT_WINDOW_MS before it gets 429 (unaudited) instead of 401 (0: no limit). */
  AUTH_FAILURE_MAX: Type.Integer({ default: 20, minimum: 0 }),
  /** SSE responses open at once, all callers together (0: no limit). */
  MAX_STREAMS: Type.Integer({ default: 1000, minimum: 0 }),
  /** SSE responses one caller may hold open at once (0: no limit). */
  MAX_STREAMS_PER_CALLER: Type.Integer({ default: 20, minimum: 0 }),
  /** How long a client may take to send its request headers (slowloris guard). */
  HEADERS_TIMEOUT_MS: Type.Integer({ default: 10000, minimum: 100 }),
  /** How long a client may take to send its whole request, body included (not the response: SSE streams are not cut). */
  REQUEST_TIMEOUT_MS: Type.Integer({ default: 30000, minimum: 100 }),
  /** How long an idle keep-alive connection is kept; set it above your load balancer's idle timeout. */
  KEEP_ALIVE_TIMEOUT_MS: Type.Integer({ default: 72000, minimum: 100 }),
  /** Trust `X-Forwarded-*` headers from a reverse proxy. */
  TRUST_PROXY: Type.Boolean({ default: false }),
  /** Bound to loopback: more names (or addresses) the `Host` header may carry, comma-separated, without a port (`agents.internal,my-laptop.local`); besides localhost, 127.0.0.1, [::1], the bound address and the hosts of CORS_ORIGINS, every other Host is refused (DNS rebinding). */
  ALLOWED_HOSTS: Type.String({ default: '' }),
  /** Origins whose pages may call the API from a browser, comma-separated (`https://app.example.com,http://localhost:5173`), or `*` for any; empty: same origin only. */
  CORS_ORIGINS: Type.String({ default: '' }),
  /** Let those pages send cookies and HTTP auth with their calls (never with `*`). A Bearer key or token needs no credentials. */
  CORS_CREDENTIALS: Type.Boolean({ default: false }),
  /** Serve the playground page at `/playground`. */
  PLAYGROUND: Type.Boolean({ default: true }),
  /** `/mcp`: an MCP session unused for this long (no request open on it) is closed; its client must initialize again. */
  MCP_SESSION_IDLE_MS: Type.Integer({ default: 1800000, minimum: 1000 }),
  /** `/mcp`: MCP sessions one principal may hold open; initializing one more closes its least recently used. */
  MCP_MAX_SESSIONS: Type.Integer({ default: 32, minimum: 1 }),
  /** A JSON file of the external A2A agents agents may call (`host.a2a.call`): card URL, credentials, capabilities, callers, timeout (README: "Calling external A2A agents"); empty: none. */
  A2A_AGENTS_FILE: Type.String({ default: '' }),
  /** A JSON file of the MCP servers agents may call as tools (`host.tools.call`): how to reach each, which agents and actions, its scopes (README: "MCP tools for agents"); empty: no tools. */
  MCP_SERVERS_FILE: Type.String({ default: '' }),
  /** The provider behind the `llm` backend (what `llm-chat` uses). */
  LLM_PROVIDER: Type.Union([Type.Literal('openai'), Type.Literal('anthropic')], { default: 'openai' }),
  /** An OpenAI-compatible server (vLLM, Ollama, llama.cpp, ...); empty means api.openai.com. */
  OPENAI_BASE_URL: Type.String({ default: '' }),
  OPENAI_API_KEY: Type.String({ default: '' }),
  OPENAI_MODEL: Type.String({ default: 'gpt-4o-mini', minLength: 1 }),
  /** Empty means api.anthropic.com. */
  ANTHROPIC_BASE_URL: Type.String({ default: '' }),
  ANTHROPIC_API_KEY: Type.String({ default: '' }),
  ANTHROPIC_MODEL: Type.String({ default: 'claude-sonnet-4-5', minLength: 1 }),
  /** Largest answer a model call may produce, in tokens. */
  LLM_MAX_TOKENS: Type.Integer({ default: 1024, minimum: 1 }),
  /** How long a provider may send nothing (before its first byte or between chunks). */
  LLM_TIMEOUT_MS: Type.Integer({ default: 60000, minimum: 100 }),
  /** SDK retries of a call that failed before streaming (connection errors, 429, 5xx). */
  LLM_MAX_RETRIES: Type.Integer({ default: 2, minimum: 0, maximum: 10 }),
  /** Model calls per message before a tool-call loop is cut off. */
  LLM_MAX_TURNS: Type.Integer({ default: 8, minimum: 1, maximum: 100 }),
  /** Prices for cost metrics, USD per million tokens: `{"<model>": {"input": 0.15, "output": 0.6}}`. */
  LLM_PRICES: Type.String({ default: '{}' }),
  /** The local agent's command: a JSON array of argv, or words split on spaces; empty runs the bundled demo CLI. */
  CLI_AGENT_COMMAND: Type.String({ default: '' }),
  /** The local agent's workspace, a folder under DATA_DIR/workspaces (one subfolder per session). */
  CLI_AGENT_WORKSPACE: Type.String({ default: 'cli-agent', minLength: 1 }),
  /** How long the local agent may print nothing during a turn before its process group is killed. */
  CLI_AGENT_TIMEOUT_MS: Type.Integer({ default: 120000, minimum: 100 }),
  /** More environment variables the CLI agent's process gets, by name, comma-separated (besides SUBPROCESS_ENV_ALWAYS; nothing else of the server's environment reaches it). */
  CLI_AGENT_ENV: Type.String({ default: '', pattern: '^[A-Za-z0-9_, ]*$' })
})

/** What every subprocess gets of the server's environment: where programs are, the home folder, the locale and time zone. */
export const SUBPROCESS_ENV_ALWAYS = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'LC_CTYPE', 'TZ', 'TMPDIR'] as const

/** Every setting, validated, plus what is derived from the environment at load time. */
export type Config = Static<typeof ConfigSchema> & {
  /** The environment agents' subprocesses get: SUBPROCESS_ENV_ALWAYS and CLI_AGENT_ENV, never a secret setting. */
  SUBPROCESS_ENV: Readonly<Record<string, string>>
  /** A2A_AGENTS_FILE read and checked, its `${NAME}` references resolved from the environment. */
  A2A_AGENTS: readonly A2AAgentConfig[]
  /** MCP_SERVERS_FILE read and checked, its `${NAME}` references resolved from the environment and its paths made absolute. */
  MCP_SERVERS: readonly ToolServerSpec[]
}

/** The example agents that ship with the code: `agents/` beside `src/` (or `dist/agents` when built). */
export const BUNDLED_AGENTS_DIR = fileURLToPath(new URL('../agents/', import.meta.url))

// env-schema validates with one Ajv for the process, which keeps what it compiled by schema object:
// one copy (env-schema sets additionalProperties on it) is compiled once, where a copy per call was
// compiled every time, some 40 ms of each server's and each test app's start
const envSchemaCopy = structuredClone(ConfigSchema)

/**
 * Read and validate the configuration. Throws `AH_ERR_CONFIG_INVALID` naming the bad key.
 * @param env the variables to read (the server passes `process.env`)
 * @param dotenv also read `.env` from the working directory
 */
export function loadConfig (env: Record<string, string | undefined>, dotenv = false): Config {
  let raw: Static<typeof ConfigSchema>
  // STREAMING_LLM_DATA_DIR is the seed's name for DATA_DIR (seed 002, S35)
  const data = env.DATA_DIR === undefined && env.STREAMING_LLM_DATA_DIR !== undefined ? { ...env, DATA_DIR: env.STREAMING_LLM_DATA_DIR } : env
  try {
    raw = envSchema<Static<typeof ConfigSchema>>({ schema: envSchemaCopy, data, env: false, dotenv })
  } catch (err) {
    throw new AH_ERR_CONFIG_INVALID(settingErrors(err, data), { cause: err })
  }
  // with a shared database the task graph is shared too, unless a store is chosen
  if (data.TASK_STORE === undefined && raw.DATABASE_URL !== '') raw.TASK_STORE = 'postgres'
  if (raw.TASK_HEARTBEAT_MS >= raw.TASK_LEASE_MS) {
    throw new AH_ERR_CONFIG_INVALID('env/TASK_HEARTBEAT_MS must be shorter than TASK_LEASE_MS, or leases lapse between heartbeats')
  }
  if (raw.INSTANCE_ID !== '' && !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(raw.INSTANCE_ID)) {
    throw new AH_ERR_CONFIG_INVALID('env/INSTANCE_ID must be a UUID or empty')
  }
  if (raw.AUTH_MODE === 'off' && !raw.ALLOW_INSECURE && !isLoopback(raw.HOST)) {
    throw new AH_ERR_CONFIG_INVALID(`env/HOST is ${raw.HOST} but AUTH_MODE is off: anyone who can reach it may run every agent. Set AUTH_MODE=apikey, or ALLOW_INSECURE=true on a network you trust`)
  }
  if (raw.HEADERS_TIMEOUT_MS > raw.REQUEST_TIMEOUT_MS) {
    throw new AH_ERR_CONFIG_INVALID('env/HEADERS_TIMEOUT_MS must not be longer than REQUEST_TIMEOUT_MS')
  }
  if (raw.AUTH_MODE === 'jwt') checkJwtConfig(raw)
  for (const key of [raw.AUDIT_KEY, ...auditKeysRetired(raw)].filter((k) => k !== '')) {
    if (key.length < 32) throw new AH_ERR_CONFIG_INVALID('env/AUDIT_KEY and each of env/AUDIT_KEYS_RETIRED must be 32 or more characters (for example `openssl rand -hex 32`)')
  }
  if (raw.BOOTSTRAP_ADMIN_KEY !== '' && raw.BOOTSTRAP_ADMIN_KEY.length < 32) {
    throw new AH_ERR_CONFIG_INVALID('env/BOOTSTRAP_ADMIN_KEY must be 32 or more characters (for example `openssl rand -hex 32`)')
  }
  const origins = corsOrigins(raw.CORS_ORIGINS)
  allowedHosts(raw.ALLOWED_HOSTS)
  if (raw.CORS_CREDENTIALS && origins.includes('*')) {
    throw new AH_ERR_CONFIG_INVALID('env/CORS_CREDENTIALS cannot be true with CORS_ORIGINS=*: browsers refuse credentials for any origin; list the origins')
  }
  if (raw.DATABASE_URL !== '' && !/^postgres(ql)?:\/\//.test(raw.DATABASE_URL)) {
    throw new AH_ERR_CONFIG_INVALID('env/DATABASE_URL must be a postgres:// (or postgresql://) URL, or empty for SQLite under DATA_DIR')
  }
  if (raw.TASK_STORE === 'postgres' && raw.DATABASE_URL === '') {
    throw new AH_ERR_CONFIG_INVALID('env/TASK_STORE=postgres needs DATABASE_URL')
  }
  if (raw.TASK_STORE === 'sqlite' && raw.DATABASE_URL !== '') {
    throw new AH_ERR_CONFIG_INVALID('env/TASK_STORE=sqlite with DATABASE_URL would keep the task graph on this machine while everything else is shared: use TASK_STORE=postgres (the default with DATABASE_URL)')
  }
  parseApiKeys(raw.API_KEYS)
  parsePrices(raw.LLM_PRICES)
  parseCommand(raw.CLI_AGENT_COMMAND)
  return {
    ...raw,
    SUBPROCESS_ENV: subprocessEnv(raw.CLI_AGENT_ENV, env),
    A2A_AGENTS: loadA2AAgents(raw.A2A_AGENTS_FILE, env),
    MCP_SERVERS: loadToolServers(raw.MCP_SERVERS_FILE, env),
    DATA_DIR: resolve(raw.DATA_DIR),
    AGENTS_DIR: raw.AGENTS_DIR === '' ? BUNDLED_AGENTS_DIR : resolve(raw.AGENTS_DIR)
  }
}

/** The subprocess environment: the always-passed names and those CLI_AGENT_ENV lists, taken from `env` (the settings themselves are refused: they hold secrets). */
function subprocessEnv (names: string, env: Record<string, string | undefined>): Record<string, string> {
  const listed = names.split(',').map((n) => n.trim()).filter((n) => n !== '')
  const settings = listed.filter((n) => n in ConfigSchema.properties)
  if (settings.length > 0) throw new AH_ERR_CONFIG_INVALID(`env/CLI_AGENT_ENV names settings of this server (${settings.join(', ')}): they are not passed to subprocesses`)
  const out: Record<string, string> = {}
  for (const name of [...SUBPROCESS_ENV_ALWAYS, ...listed]) {
    const value = env[name]
    if (value !== undefined) out[name] = value
  }
  return out
}

/** The values a setting allows, when it is a choice among words (AUTH_MODE, TASK_STORE, LOG_LEVEL, ...). */
function choicesOf (schema: unknown): string[] | undefined {
  const anyOf = (schema as { anyOf?: Array<{ const?: unknown }> } | undefined)?.anyOf
  if (anyOf === undefined || !anyOf.every((s) => typeof s.const === 'string')) return undefined
  return anyOf.map((s) => s.const as string)
}

/**
 * One line per bad setting, naming it, the value given and what it must be (the allowed values of a
 * choice, once), instead of the validator's message per branch.
 */
function settingErrors (err: unknown, data: Record<string, string | undefined>): string {
  const errors = (err as { errors?: Array<{ instancePath: string, message?: string, params?: Record<string, unknown> }> }).errors
  if (!Array.isArray(errors) || errors.length === 0) return (err as Error).message
  const lines = new Map<string, string>()
  for (const e of errors) {
    const key = e.instancePath.replace(/^\//, '').split('/')[0] ?? ''
    if (key === '' || lines.has(key)) continue
    const choices = choicesOf((ConfigSchema.properties as Record<string, unknown>)[key])
    const given = `env/${key} is ${JSON.stringify(data[key] ?? '')}`
    lines.set(key, choices !== undefined ? `${given}: it must be one of ${choices.join(', ')}` : `${given}: it ${e.message ?? 'is invalid'}`)
  }
  return lines.size === 0 ? (err as Error).message : [...lines.values()].join('; ')
}

/** `AUDIT_KEYS_RETIRED` as a list. */
export function auditKeysRetired (config: Pick<Config, 'AUDIT_KEYS_RETIRED'>): string[] {
  return config.AUDIT_KEYS_RETIRED.split(',').map((k) => k.trim()).filter((k) => k !== '')
}

/** `LLM_PRICES` parsed: USD per million input and output tokens, by model. */
export function parsePrices (text: string): Record<string, { input: number, output: number }> {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (err) {
    throw new AH_ERR_CONFIG_INVALID(`env/LLM_PRICES is not JSON: ${(err as Error).message}`)
  }
  const ok = (n: unknown): boolean => typeof n === 'number' && Number.isFinite(n) && n >= 0
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) ||
    !Object.values(parsed).every((p) => typeof p === 'object' && p !== null && ok((p as { input?: unknown }).input) && ok((p as { output?: unknown }).output))) {
    throw new AH_ERR_CONFIG_INVALID('env/LLM_PRICES must be {"<model>": {"input": <usd per million>, "output": <usd per million>}}')
  }
  return parsed as Record<string, { input: number, output: number }>
}

/** `CLI_AGENT_COMMAND` as argv: a JSON array of strings, or the words of the string; [] when empty. */
export function parseCommand (text: string): string[] {
  if (text.trim() === '') return []
  if (!text.trim().startsWith('[')) return text.trim().split(/\s+/)
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (err) {
    throw new AH_ERR_CONFIG_INVALID(`env/CLI_AGENT_COMMAND is not a JSON array: ${(err as Error).message}`)
  }
  if (!Array.isArray(parsed) || parsed.length === 0 || !parsed.every((a) => typeof a === 'string' && a !== '')) {
    throw new AH_ERR_CONFIG_INVALID('env/CLI_AGENT_COMMAND must be a non-empty JSON array of strings')
  }
  return parsed as string[]
}

/** Whether `host` only accepts connections from this machine. */
export function isLoopback (host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
}

/** What an API_KEYS key's name may be: it is the key's identity (`config:<name>`), which owns what the key makes. */
const KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/**
 * `API_KEYS` parsed; [] when empty. A key's name is its identity (`config:<name>`: its sessions, runs
 * and audit rows), so names are required, unique and plain, and a key is listed once.
 */
export function parseApiKeys (text: string): Array<{ name: string, key: string, scopes: string[], agents?: string[] }> {
  if (text.trim() === '') return []
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (err) {
    throw new AH_ERR_CONFIG_INVALID(`env/API_KEYS is not JSON: ${(err as Error).message}`)
  }
  const strings = (v: unknown): boolean => Array.isArray(v) && v.every((x) => typeof x === 'string')
  const valid = Array.isArray(parsed) && parsed.every((k: { name?: unknown, key?: unknown, scopes?: unknown, agents?: unknown }) =>
    typeof k === 'object' && k !== null && typeof k.name === 'string' && KEY_NAME.test(k.name) && typeof k.key === 'string' && k.key.length >= 24 &&
    strings(k.scopes) && (k.agents === undefined || strings(k.agents)))
  if (!valid) throw new AH_ERR_CONFIG_INVALID('env/API_KEYS must be [{"name": "<1 to 64 of A-Z a-z 0-9 . _ -, unique>", "key": "<24 or more characters>", "scopes": ["..."], "agents"?: ["..."]}]')
  const keys = parsed as Array<{ name: string, key: string, scopes: string[], agents?: string[] }>
  const names = new Set<string>()
  const secrets = new Set<string>()
  for (const { name, key } of keys) {
    if (names.has(name)) throw new AH_ERR_CONFIG_INVALID(`env/API_KEYS: the name "${name}" is listed twice; a key's name is its identity, which owns its sessions and runs`)
    if (secrets.has(key)) throw new AH_ERR_CONFIG_INVALID(`env/API_KEYS: the same key is listed twice (the second time as "${name}")`)
    names.add(name)
    secrets.add(key)
  }
  return keys
}

function checkJwtConfig (raw: Static<typeof ConfigSchema>): void {
  if ((raw.JWT_SECRET === '') === (raw.JWT_JWKS_FILE === '')) {
    throw new AH_ERR_CONFIG_INVALID('AUTH_MODE=jwt needs exactly one of env/JWT_SECRET (HS256) and env/JWT_JWKS_FILE (public keys)')
  }
  if (raw.JWT_SECRET !== '' && raw.JWT_SECRET.length < 32) {
    throw new AH_ERR_CONFIG_INVALID('env/JWT_SECRET must be 32 or more characters')
  }
  if (raw.JWT_ISSUER === '' || raw.JWT_AUDIENCE === '') {
    throw new AH_ERR_CONFIG_INVALID('AUTH_MODE=jwt needs env/JWT_ISSUER and env/JWT_AUDIENCE: tokens minted for another service must not pass')
  }
}

/**
 * ALLOWED_HOSTS as a list of host names as the URL parser writes them (lower case, IPv6 in
 * brackets): each a name or an address, without scheme, port or path. Throws
 * `AH_ERR_CONFIG_INVALID` naming the first bad one.
 */
export function allowedHosts (text: string): string[] {
  return text.split(',').map((h) => h.trim()).filter((h) => h !== '').map((host) => {
    let url: URL | undefined
    try {
      url = /^[^/@?#\\\s]+$/.test(host) ? new URL(`http://${host.includes(':') && !host.startsWith('[') ? `[${host}]` : host}`) : undefined
    } catch {}
    if (url === undefined || url.port !== '' || !/^(\[[0-9a-f:.]+\]|[a-z0-9._-]+)$/.test(url.hostname)) {
      throw new AH_ERR_CONFIG_INVALID(`env/ALLOWED_HOSTS: "${host}" is not a host name; write names or addresses without scheme or port, e.g. agents.internal,10.0.0.7`)
    }
    return url.hostname
  })
}

/**
 * CORS_ORIGINS as a list: each an origin as browsers send it (`scheme://host[:port]`, no path or
 * trailing slash), or `*`. Throws `AH_ERR_CONFIG_INVALID` naming the first bad one.
 */
export function corsOrigins (text: string): string[] {
  const origins = text.split(',').map((o) => o.trim()).filter((o) => o !== '')
  for (const origin of origins) {
    if (origin === '*') continue
    let url: URL | undefined
    try {
      url = new URL(origin)
    } catch {}
    if (url === undefined || !['http:', 'https:'].includes(url.protocol) || url.origin !== origin) {
      throw new AH_ERR_CONFIG_INVALID(`env/CORS_ORIGINS: "${origin}" is not an origin; write it as scheme://host[:port], e.g. https://app.example.com or http://localhost:5173, or use *`)
    }
  }
  return origins
}
