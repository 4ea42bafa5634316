import { fileURLToPath } from 'node:url'
import { resolve } from 'node:path'
import envSchema from 'env-schema'
import { Type, type Static } from 'typebox'
import { AH_ERR_CONFIG_INVALID } from './errors.js'

/** What every subprocess gets of the server's environment: where programs are, the home folder, the locale and time zone. */
export const SUBPROCESS_ENV_ALWAYS = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'LC_CTYPE', 'TZ', 'TMPDIR'] as const

/**
 * Every setting of the server, read once at boot from the environment (and `.env` when present).
 * Each key's `description` is what users read about it: `npm run docs` writes them, with the
 * defaults and allowed values, to docs/reference/configuration.md. `.env.example` lists each key
 * with its default; tests keep both in step.
 */
export const ConfigSchema = Type.Object({
  HOST: Type.String({ default: '127.0.0.1', minLength: 1, description: 'interface to bind (`0.0.0.0` in containers)' }),
  PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535, description: 'TCP port to listen on' }),
  LOG_LEVEL: Type.Union(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)), { default: 'info', description: 'the least severe lines logged: `fatal` logs the fewest, `trace` the most, `silent` none' }),
  LOG_FORMAT: Type.Union([Type.Literal('json'), Type.Literal('pretty')], { default: 'json', description: '`json` (pino\'s lines, for machines) or `pretty` (pino-pretty, a dev dependency: `npm run dev` sets it; refused with a clear message where it is not installed)' }),
  LOG_BOOT: Type.Union([Type.Literal('full'), Type.Literal('changes')], { default: 'full', description: '`full`: every start logs its whole start-up log (the agents, the warnings, the URLs); `changes`: a restart by the same parent process on the same DATA_DIR (`npm run dev`\'s watcher, which sets it) logs only the start-up lines that differ from the last start\'s, then one line saying what it left out' }),
  DATA_DIR: Type.String({ default: 'data', minLength: 1, description: 'where all runtime state lives (a relative path is resolved from the working directory)' }),
  DATABASE_URL: Type.String({ default: '', description: '`postgres://user:password@host:5432/database`: everything durable in PostgreSQL (runs, sessions, the audit chain, keys, limits, tasks, the event bus), shared by every instance and worker given the same URL; empty: SQLite under `DATA_DIR`, for one machine' }),
  DB_POOL_MAX: Type.Integer({ default: 10, minimum: 2, maximum: 1000, description: 'PostgreSQL: connections each process keeps open at most (runs\' writes, followers\' reads, the listener)' }),
  AGENTS_DIR: Type.String({ default: '', description: 'folder of drop-in agents; empty means the agents shipped with the server (`agents/`, built to `dist/agents`)' }),
  BODY_LIMIT: Type.Integer({ default: 1048576, minimum: 1024, description: 'largest request body, in bytes (413 `AH_ERR_BODY_TOO_LARGE` above)' }),
  MAX_BODY_DEPTH: Type.Integer({ default: 64, minimum: 8, maximum: 1000, description: 'deepest nesting of arrays and objects a JSON body may have; deeper is a 400 `AH_ERR_BODY_MALFORMED`, refused before the body is parsed (so nothing recursive ever walks it)' }),
  SSE_HEARTBEAT_MS: Type.Integer({ default: 15000, minimum: 10, description: '`: ping` after this long without output on an SSE response' }),
  SSE_RETRY_MS: Type.Integer({ default: 3000, minimum: 0, description: 'reconnection delay sent as `retry:` at the start of each SSE response (0: none)' }),
  SSE_MAX_BUFFER_BYTES: Type.Integer({ default: 8388608, minimum: 65536, description: 'unread bytes one SSE response may queue before its client is cut off (`slow_consumer`)' }),
  SSE_STALL_TIMEOUT_MS: Type.Integer({ default: 30000, minimum: 100, description: 'how long one SSE client may read nothing while its socket is full before it is cut off (`slow_consumer`); the run goes on without it (or is cancelled, per `DISCONNECT_POLICY`)' }),
  JOURNAL_RETENTION_MS: Type.Integer({ default: 86400000, minimum: 1000, description: 'how long a finished run\'s journal and JSON answer are kept for resumes and retries (24 h)' }),
  RUN_TIMEOUT_MS: Type.Integer({ default: 600000, minimum: 0, description: 'longest a `/v1/assist` run may take before it is stopped with `run_timeout` (0: no limit); a request may ask for less with `payload.metadata.timeout_ms`' }),
  INTERRUPT_EXPIRES_S: Type.Integer({ default: 86400, minimum: 1, maximum: 31622400, description: 'how long a question a run asks (`response.interrupt()`, a tool call waiting for approval) waits for its answer when the agent gives no `expires_in_s`; past it the run ends and an answer gets 410 `AH_ERR_INTERRUPT_EXPIRED`' }),
  RUN_MAX_OUTPUT_BYTES: Type.Integer({ default: 16777216, minimum: 1024, description: 'past this many bytes of packets a run is stopped with a FATAL `output_too_large`; what it produced up to there is journaled and answered' }),
  RUN_LEASE_MS: Type.Integer({ default: 15000, minimum: 100, description: 'how long a run\'s owner holds it without renewing (it renews every third of it); a run whose lease lapsed (its server died or froze) is recovered by any server on the same `DATA_DIR`, whatever its PID or `INSTANCE_ID`' }),
  SESSION_SEARCH: Type.Union([Type.Literal('all'), Type.Literal('values')], { default: 'all', description: 'what an agent\'s `session.recall()` searches: `all`, every interaction (its input and answer) and stored value; `values`, stored values only, and an interaction is kept in the session\'s history without being indexed (less CPU and disk per request: see BENCHMARKS.md). On SQLite, turned back to `all`, the interactions recorded meanwhile are indexed in the background; on PostgreSQL they stay unsearchable' }),
  DISCONNECT_POLICY: Type.Union([Type.Literal('continue'), Type.Literal('cancel')], { default: 'continue', description: 'what a run does when its last SSE client leaves: `continue` (a re-POST picks it up) or `cancel`; a request may choose with `payload.metadata.on_disconnect`' }),
  DB_WRITE_BUDGET_MS: Type.Integer({ default: 5000, minimum: 10, description: 'how long a write may wait, without blocking the server, while another process holds the database\'s write lock; past it 503 `AH_ERR_STORAGE_BUSY` (a running run ends with `storage_busy`)' }),
  DB_BUSY_TIMEOUT_MS: Type.Integer({ default: 20, minimum: 0, maximum: 1000, description: 'how long one write attempt blocks the event loop waiting for that lock before it is retried asynchronously (keep it short)' }),
  DB_CHECKPOINT_INTERVAL_MS: Type.Integer({ default: 1000, minimum: 0, maximum: 3600000, description: 'how often a worker thread copies the write-ahead log into the database file (off the event loop; a page written by many commits in between is copied once); `0`: SQLite\'s own checkpoints, on the event loop, inside whichever commit crosses 1 000 pages' }),
  DB_CACHE_KIB: Type.Integer({ default: 65536, minimum: 1024, description: 'SQLite\'s page cache per connection, in KiB' }),
  DB_PAGE_SIZE: Type.Union([Type.Literal(1024), Type.Literal(2048), Type.Literal(4096), Type.Literal(8192)], { default: 4096, description: 'page size of a database this server creates (an existing one keeps its own); `1024` writes ~0.67× the bytes per request for ~14 % more CPU (see BENCHMARKS.md)' }),
  TASK_STORE: Type.Union([Type.Literal('file'), Type.Literal('sqlite'), Type.Literal('postgres')], { default: 'file', description: 'where the task graph lives: `file` (`DATA_DIR/tasks.graph.json`, file-locked), `sqlite`, or `postgres` (needs `DATABASE_URL`; the default when it is set)' }),
  WORKERS_PER_TYPE: Type.Integer({ default: 1, minimum: 0, maximum: 64, description: 'worker loops per task agent inside the server (0: none; run `agent-host worker` instead)' }),
  TASK_LEASE_MS: Type.Integer({ default: 30000, minimum: 200, description: 'how long a task claim lasts without a heartbeat; the reaper runs every half of it' }),
  TASK_LOCK_STALE_MS: Type.Integer({ default: 5000, minimum: 500, maximum: 600000, description: 'file store: a lock on `tasks.graph.json` whose holder stopped refreshing it (refreshed every fifth of this) for this long is taken over; a dead or frozen holder delays others by at most this' }),
  TASK_HEARTBEAT_MS: Type.Integer({ default: 10000, minimum: 50, description: 'how often a running task\'s lease is extended (shorter than `TASK_LEASE_MS`, or the boot is refused)' }),
  TASK_POLL_MS: Type.Integer({ default: 500, minimum: 10, description: 'how long an idle worker waits before looking for work again' }),
  BUS_POLL_MS: Type.Integer({ default: 250, minimum: 10, description: 'event bus: how often a process looks for deliveries other processes published (its own publications wake it at once)' }),
  BUS_LEASE_MS: Type.Integer({ default: 60000, minimum: 100, description: 'event bus: how long a delivery is leased to one process; a handler still running then is aborted and the event delivered again' }),
  BUS_MAX_ATTEMPTS: Type.Integer({ default: 5, minimum: 1, maximum: 100, description: 'event bus: attempts of a delivery whose handler throws before it goes to the dead letters (`GET /v1/bus/dead-letters`)' }),
  BUS_RETRY_BACKOFF_MS: Type.Integer({ default: 1000, minimum: 0, description: 'event bus: the wait before a failed delivery\'s second attempt, doubling after each (at most a minute)' }),
  A2A_PUSH_POLL_MS: Type.Integer({ default: 500, minimum: 10, description: 'A2A push notifications: how often a process looks for task updates to push (configs other processes made, runs other processes journal; a config made here wakes it at once)' }),
  A2A_PUSH_TIMEOUT_MS: Type.Integer({ default: 10000, minimum: 100, description: 'A2A push notifications: how long one POST may take, to the end of the receiver\'s answer, before it counts as a failed attempt' }),
  A2A_PUSH_RETRY_BASE_MS: Type.Integer({ default: 1000, minimum: 0, description: 'A2A push notifications: the wait before a failed update\'s second attempt, doubling after each (at most five minutes)' }),
  A2A_PUSH_MAX_ATTEMPTS: Type.Integer({ default: 12, minimum: 1, maximum: 100, description: 'A2A push notifications: attempts of one update before its config is marked `failed` and nothing more is pushed to it (see `GET /v1/a2a/push-deliveries`)' }),
  A2A_PUSH_ALLOW_PRIVATE: Type.Boolean({ default: false, description: 'A2A push notifications: allow URLs that resolve to loopback, private (RFC 1918, CGNAT), link-local, unique-local or other non-public addresses; off, they are refused when the config is made and at every delivery (no SSRF)' }),
  A2A_CARD_SIGNING_KEY_FILE: Type.String({ default: '', description: 'a private key (PEM, or a JWK file) that signs every A2A agent card this server serves (a JWS in the card\'s `signatures`, A2A v1.0 §8.4): EC P-256 signs ES256, Ed25519 EdDSA, RSA RS256; a file that cannot be read or used stops the boot (docs/a2a.md, "Signed agent cards"); empty: cards are not signed' }),
  A2A_CARD_SIGNING_KID: Type.String({ default: '', description: 'the `kid` of the card signatures; empty: the key\'s JWK thumbprint (RFC 7638)' }),
  MAX_EVENT_LOOP_DELAY_MS: Type.Integer({ default: 1000, minimum: 0, description: 'event-loop delay past which requests get 503 `AH_ERR_OVERLOADED` (with `Retry-After`) and `/health` says `degraded` (0: unchecked)' }),
  MAX_HEAP_USED_BYTES: Type.Integer({ default: 0, minimum: 0, description: 'heap in use, in bytes, past which the same happens (0: unchecked)' }),
  MAX_RSS_BYTES: Type.Integer({ default: 0, minimum: 0, description: 'resident memory, in bytes, past which the same happens (0: unchecked)' }),
  PRESSURE_SAMPLE_MS: Type.Integer({ default: 1000, minimum: 10, description: 'how often the load is sampled' }),
  CLOSE_GRACE_MS: Type.Integer({ default: 10000, minimum: 0, description: 'how long shutdown may take before the process exits anyway' }),
  INSTANCE_ID: Type.String({ default: '', description: 'this instance\'s id in `/health`, a UUID; empty means a new UUID at each boot' }),
  AUTH_MODE: Type.Union([Type.Literal('off'), Type.Literal('apikey'), Type.Literal('jwt')], { default: 'off', description: '`off`: every caller may do anything (refused on a non-loopback `HOST` unless `ALLOW_INSECURE=true`); `apikey`: `Authorization: Bearer <key>` with scopes; `jwt`: `Authorization: Bearer <JWT>` (the `JWT_*` settings)' }),
  ALLOW_INSECURE: Type.Boolean({ default: false, description: 'start with `AUTH_MODE=off` on a non-loopback `HOST` anyway (a private network you trust)' }),
  API_KEYS: Type.String({ default: '', description: 'keys from configuration: `[{"name", "key" (24+ characters), "scopes": [...], "agents"?: [...]}]`; a key\'s name (1–64 of `A-Z a-z 0-9 . _ -`, unique) is its identity, `config:<name>`, which owns its sessions and runs; or make them with `agent-host keys create`' }),
  BOOTSTRAP_ADMIN_KEY: Type.String({ default: '', description: 'a first-run admin key you choose (32+ characters, e.g. `openssl rand -hex 32`): with `AUTH_MODE=apikey`, stored once as the key `bootstrap-admin` (scope `admin`) if no key of that name was ever made; revoking it is final. Make your own keys with it, revoke it, unset it' }),
  JWT_SECRET: Type.String({ default: '', description: '`AUTH_MODE=jwt`: the HS256 shared secret (32+ characters); set this or `JWT_JWKS_FILE`' }),
  JWT_JWKS_FILE: Type.String({ default: '', description: '`AUTH_MODE=jwt`: a JWKS file of public keys, each with a `kid` (RS256, PS256, ES256, EdDSA); re-read when a token names a new `kid`' }),
  JWT_ISSUER: Type.String({ default: '', description: '`AUTH_MODE=jwt`: the `iss` every token must carry (required)' }),
  JWT_AUDIENCE: Type.String({ default: '', description: '`AUTH_MODE=jwt`: the `aud` every token must carry, one of its values (required)' }),
  JWT_TENANT_CLAIM: Type.String({ default: 'tenant', minLength: 1, description: '`AUTH_MODE=jwt`: the claim that names the caller\'s tenant (1–63 of `a-z 0-9 -`); a token without it belongs to the `default` tenant' }),
  JWT_CLOCK_TOLERANCE_MS: Type.Integer({ default: 5000, minimum: 0, description: '`AUTH_MODE=jwt`: clock skew allowed on `exp`, `nbf` and `iat`' }),
  AUDIT_KEY: Type.String({ default: '', description: 'the audit chain\'s key (32+ characters, e.g. `openssl rand -hex 32`): every row is an HMAC with it, so nobody without it can rewrite the log unseen. Keep it outside `DATA_DIR`. Empty: a plain hash chain that shows accidental damage only (the server warns at boot)' }),
  AUDIT_KEYS_RETIRED: Type.String({ default: '', description: 'audit keys used before a rotation, comma-separated: the rows and checkpoints they signed still verify' }),
  SECRETS_KEY: Type.String({ default: '', description: 'the key that seals stored secrets (A2A push tokens and credentials) with AES-256-GCM: 32 random bytes as base64 (`openssl rand -base64 32`), base64url or 64 hex digits. Keep it outside `DATA_DIR` and its backups. Empty, with no `SECRETS_KEY_FILE`: on SQLite the server makes `DATA_DIR/secrets.key` when it first stores a secret (mode 0600; used after); with `DATABASE_URL` there is none (instances must share one), and storing a secret is refused' }),
  SECRETS_KEY_FILE: Type.String({ default: '', description: 'a file holding the secrets key (as `SECRETS_KEY` takes it), read at boot: a mounted secret; set this or `SECRETS_KEY`, not both' }),
  SECRETS_KEYS_RETIRED: Type.String({ default: '', description: 'secrets keys used before a rotation, comma-separated: values they sealed still open, until `agent-host secrets rotate` seals them again with `SECRETS_KEY`' }),
  AUDIT_RUNS: Type.Union([Type.Literal('all'), Type.Literal('failed')], { default: 'all', description: 'which runs get an `assist` row in the audit chain: `all` (who called which agent, and how it ended, for every run); `failed`, only the runs that did not end `done` (errors, cancellations, timeouts, and runs that stopped to ask a person), for a deployment whose successful calls are read-only and need no record (less CPU and disk per request: see BENCHMARKS.md). Denials, cancel requests, keys, erasures and the rest are always audited' }),
  AUDIT_CHECKPOINT_INTERVAL_MS: Type.Integer({ default: 60000, minimum: 0, description: 'how often the audit log\'s signed checkpoint (rows and head) is appended to `DATA_DIR/audit-checkpoints.jsonl` when the log grew (0: at boot and shutdown only)' }),
  RATE_LIMIT_MAX: Type.Integer({ default: 600, minimum: 0, description: 'requests one caller (a key, a token\'s subject, or an address when auth is off) may make per `RATE_LIMIT_WINDOW_MS`; then 429 `AH_ERR_RATE_LIMITED` (0: no limit)' }),
  RATE_LIMIT_AGENT_MAX: Type.Integer({ default: 1200, minimum: 0, description: 'new `/v1/assist` runs one agent may be given per `RATE_LIMIT_WINDOW_MS`, all callers together (0: no limit)' }),
  RATE_LIMIT_WINDOW_MS: Type.Integer({ default: 60000, minimum: 100, description: 'the rate-limit window' }),
  AUTH_FAILURE_MAX: Type.Integer({ default: 20, minimum: 0, description: 'failed authentications one client address may make per `RATE_LIMIT_WINDOW_MS`; past it the answer is 429 `AH_ERR_RATE_LIMITED` instead of 401, and is not audited, so a flood of bad credentials cannot flood the audit log; valid credentials still pass (0: no limit)' }),
  MAX_STREAMS: Type.Integer({ default: 1000, minimum: 0, description: 'SSE responses open at once, all callers together; then 503 `AH_ERR_TOO_MANY_STREAMS` (0: no limit)' }),
  MAX_STREAMS_PER_CALLER: Type.Integer({ default: 20, minimum: 0, description: 'SSE responses one caller may hold open at once; then 429 `AH_ERR_TOO_MANY_STREAMS` (0: no limit)' }),
  HEADERS_TIMEOUT_MS: Type.Integer({ default: 10000, minimum: 100, description: 'how long a client may take to send its request headers (slowloris guard; then 408 and the connection closes); no longer than `REQUEST_TIMEOUT_MS`' }),
  REQUEST_TIMEOUT_MS: Type.Integer({ default: 30000, minimum: 100, description: 'how long a client may take to send its whole request, body included; SSE responses are not cut by it' }),
  KEEP_ALIVE_TIMEOUT_MS: Type.Integer({ default: 72000, minimum: 100, description: 'how long an idle keep-alive connection is kept; set it above your load balancer\'s idle timeout' }),
  TRUST_PROXY: Type.Boolean({ default: false, description: 'trust `X-Forwarded-*` headers from a reverse proxy' }),
  ALLOWED_HOSTS: Type.String({ default: '', description: 'bound to loopback (the default `HOST`): more names or addresses the `Host` header may carry, comma-separated, without a port (`agents.internal,my-laptop.local`); every route refuses any other `Host` than these, `localhost`, `127.0.0.1`, `[::1]`, the bound address and the hosts of `CORS_ORIGINS` (403 `AH_ERR_HOST_REFUSED`: DNS rebinding). On another `HOST`, setting it turns the same check on (without it any `Host` passes there)' }),
  CORS_ORIGINS: Type.String({ default: '', description: 'origins whose pages may call the API from a browser, comma-separated (`https://app.example.com,http://localhost:5173`), or `*` for any; empty: same origin only (no CORS headers at all)' }),
  CORS_CREDENTIALS: Type.Boolean({ default: false, description: 'let those pages send cookies and HTTP auth with their calls (not with `*`); a Bearer key or token needs no credentials' }),
  PLAYGROUND: Type.Boolean({ default: true, description: 'serve the playground page at `/playground`' }),
  MCP_SESSION_IDLE_MS: Type.Integer({ default: 1800000, minimum: 1000, description: '`/mcp`: an MCP session with no request open on it for this long (30 min) is closed; its client gets 404 `AH_ERR_MCP_SESSION_NOT_FOUND` and initializes again' }),
  MCP_MAX_SESSIONS: Type.Integer({ default: 32, minimum: 1, description: '`/mcp`: MCP sessions one principal (a key, a token\'s subject, or everyone when `AUTH_MODE=off`) may hold open; initializing one more closes its least recently used' }),
  A2A_AGENTS_FILE: Type.String({ default: '', description: 'a JSON file of the external A2A agents agents may call with `host.a2a.call` (card URL, credentials with `${NAME}` from the environment, capabilities, callers, timeout), read and checked at boot (docs/a2a.md, "Calling external A2A agents"); empty: none' }), // eslint-disable-line no-template-curly-in-string -- the files' own syntax
  MCP_SERVERS_FILE: Type.String({ default: '', description: 'a JSON file (`{"mcpServers": {...}}`) of the MCP servers agents may call as tools with `host.tools.call`: a stdio command or a Streamable HTTP URL each (secrets as `${NAME}` from the environment), the agents and actions allowed, path and branch scopes, timeout and retries; read and checked at boot, one line per problem (docs/mcp.md, "MCP tools for agents"); empty: no tools' }), // eslint-disable-line no-template-curly-in-string -- the files' own syntax
  LLM_PROVIDER: Type.Union([Type.Literal('openai'), Type.Literal('anthropic')], { default: 'openai', description: 'the provider behind the `llm` backend (what `llm-chat` uses)' }),
  OPENAI_BASE_URL: Type.String({ default: '', description: 'an OpenAI-compatible server (vLLM, Ollama, llama.cpp server, a hosted API); empty means `api.openai.com`' }),
  OPENAI_API_KEY: Type.String({ default: '', description: 'needed for `api.openai.com`; local servers usually take none' }),
  OPENAI_MODEL: Type.String({ default: 'gpt-4o-mini', minLength: 1, description: 'model for the OpenAI-compatible backend' }),
  ANTHROPIC_BASE_URL: Type.String({ default: '', description: 'empty means `api.anthropic.com`' }),
  ANTHROPIC_API_KEY: Type.String({ default: '', description: 'needed for the Anthropic backend' }),
  ANTHROPIC_MODEL: Type.String({ default: 'claude-sonnet-5-5', minLength: 1, description: 'model for the Anthropic backend' }),
  LLM_MAX_TOKENS: Type.Integer({ default: 1024, minimum: 1, description: 'largest answer one model call may produce, in tokens' }),
  LLM_TIMEOUT_MS: Type.Integer({ default: 60000, minimum: 100, description: 'how long a provider may send nothing (before its first byte or between chunks); then TRANSIENT `backend_timeout`' }),
  LLM_MAX_RETRIES: Type.Integer({ default: 2, minimum: 0, maximum: 10, description: 'SDK retries of a call that failed before streaming (connection errors, 429, 5xx)' }),
  LLM_MAX_TURNS: Type.Integer({ default: 8, minimum: 1, maximum: 100, description: 'model calls per message before a tool-call loop is cut off' }),
  LLM_PRICES: Type.String({ default: '{}', description: 'prices for the cost metric, USD per million tokens: `{"gpt-4o-mini": {"input": 0.15, "output": 0.6}}`' }),
  BUDGETS_FILE: Type.String({ default: '', description: 'a JSON file of model budgets: tokens (input + output) and cost in USD (priced from `LLM_PRICES`) per day and per month (UTC), for each tenant, a `default` for the tenants it does not list, and for single keys; read and checked at boot. A run of an agent that calls a model backend is refused (429 `AH_ERR_BUDGET_EXCEEDED`) once its caller\'s tenant or key used a budget up, and each backend call reserves against every budget that applies before it is made (docs/security.md, "Budgets"); empty: no budgets' }),
  BUDGET_CALL_ESTIMATE_TOKENS: Type.Integer({ default: 4096, minimum: 1, description: 'what one backend call is reserved as against the budgets when the call names no `maxTokens` of its own: tokens, and their cost at the model\'s `LLM_PRICES` (the dearest price of the table when the model is not known); near a limit only one call at a time is let through, so the estimate bounds how many calls run at once, not what they may use' }),
  BUDGET_RESERVATION_MS: Type.Integer({ default: 600000, minimum: 1000, description: 'how long a backend call\'s reservation against the budgets holds (a lease): a call still running past it no longer counts as reserved, and an instance that died mid-call holds nothing after it; what the call used is counted when it ends either way' }),
  CLI_AGENT_COMMAND: Type.String({ default: '', description: 'the local agent (`cli-agent`): a JSON array of argv, or words split on spaces; empty runs the bundled demo `agents/cli-agent/demo-cli.mjs`' }),
  CLI_AGENT_WORKSPACE: Type.String({ default: 'cli-agent', minLength: 1, description: 'the local agent\'s workspace, a folder under `DATA_DIR/workspaces` (one subfolder per session); `..` is refused' }),
  CLI_AGENT_TIMEOUT_MS: Type.Integer({ default: 120000, minimum: 100, description: 'how long the local agent may print nothing during a turn before its process group is killed' }),
  CLI_AGENT_ENV: Type.String({ default: '', pattern: '^[A-Za-z0-9_, ]*$', description: `more environment variables the CLI agent's process gets, by name, comma-separated; it always gets ${SUBPROCESS_ENV_ALWAYS.map((n) => `\`${n}\``).join(', ')} and nothing else of the server's environment (never a setting: they hold secrets)` })
})

/** Every setting, validated, plus what is derived from the environment at load time. */
export type Config = Static<typeof ConfigSchema> & {
  /** The environment agents' subprocesses get: SUBPROCESS_ENV_ALWAYS and CLI_AGENT_ENV, never a secret setting. */
  SUBPROCESS_ENV: Readonly<Record<string, string>>
  /**
   * The environment the settings were read from (a copy): what the `${NAME}` references of
   * A2A_AGENTS_FILE and MCP_SERVERS_FILE resolve against when their plugins read the files at boot.
   */
  ENV: Readonly<Record<string, string | undefined>>
}

/**
 * Other names a setting is read under when it is not set itself: `STREAMING_LLM_DATA_DIR` is the
 * seed's name for DATA_DIR (seed 002, S35).
 */
export const SETTING_ALIASES: Readonly<Record<string, keyof Static<typeof ConfigSchema>>> = { STREAMING_LLM_DATA_DIR: 'DATA_DIR' }

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
  const data = { ...env }
  for (const [alias, key] of Object.entries(SETTING_ALIASES)) {
    if (data[key] === undefined && data[alias] !== undefined) data[key] = data[alias]
  }
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
  checkSecretKeys(raw)
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
    ENV: Object.freeze({ ...env }),
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

/** How to make a secrets key, for the messages that refuse one. */
export const SECRET_KEY_HOWTO = 'a secrets key is 32 random bytes as base64 (make one with `openssl rand -base64 32`), base64url, or 64 hex digits'

/** The 32 bytes of a secrets key written as 64 hex digits, base64 or base64url; undefined for anything else. */
export function secretKeyBytes (text: string): Buffer | undefined {
  if (/^[0-9a-fA-F]{64}$/.test(text)) return Buffer.from(text, 'hex')
  if (!/^[A-Za-z0-9+/_-]{43}=?$/.test(text)) return undefined
  const key = Buffer.from(text, 'base64')
  return key.length === 32 ? key : undefined
}

/** `SECRETS_KEYS_RETIRED` as a list. */
export function secretKeysRetired (config: Pick<Config, 'SECRETS_KEYS_RETIRED'>): string[] {
  return config.SECRETS_KEYS_RETIRED.split(',').map((k) => k.trim()).filter((k) => k !== '')
}

/** SECRETS_KEY and SECRETS_KEYS_RETIRED hold keys, and at most one of SECRETS_KEY and SECRETS_KEY_FILE is set. */
function checkSecretKeys (raw: Pick<Config, 'SECRETS_KEY' | 'SECRETS_KEY_FILE' | 'SECRETS_KEYS_RETIRED'>): void {
  if (raw.SECRETS_KEY !== '' && raw.SECRETS_KEY_FILE !== '') throw new AH_ERR_CONFIG_INVALID('env/SECRETS_KEY and env/SECRETS_KEY_FILE are both set: set one of them')
  if (raw.SECRETS_KEY !== '' && secretKeyBytes(raw.SECRETS_KEY) === undefined) throw new AH_ERR_CONFIG_INVALID(`env/SECRETS_KEY is not a key: ${SECRET_KEY_HOWTO}`)
  if (secretKeysRetired(raw).some((k) => secretKeyBytes(k) === undefined)) throw new AH_ERR_CONFIG_INVALID(`env/SECRETS_KEYS_RETIRED holds something that is not a key: ${SECRET_KEY_HOWTO}; separate keys with commas`)
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

/** What a tenant's name may be: 1–63 of `a-z 0-9 -`, starting with a letter or digit. */
export const TENANT_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/

/** What an API_KEYS key's name may be: it is the key's identity (`config:<name>`), which owns what the key makes. */
const KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/**
 * `API_KEYS` parsed; [] when empty. A key's name is its identity (`config:<name>`: its sessions, runs
 * and audit rows), so names are required, unique and plain, and a key is listed once.
 */
export function parseApiKeys (text: string): Array<{ name: string, key: string, scopes: string[], agents?: string[], tenant?: string }> {
  if (text.trim() === '') return []
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (err) {
    throw new AH_ERR_CONFIG_INVALID(`env/API_KEYS is not JSON: ${(err as Error).message}`)
  }
  const strings = (v: unknown): boolean => Array.isArray(v) && v.every((x) => typeof x === 'string')
  const valid = Array.isArray(parsed) && parsed.every((k: { name?: unknown, key?: unknown, scopes?: unknown, agents?: unknown, tenant?: unknown }) =>
    typeof k === 'object' && k !== null && typeof k.name === 'string' && KEY_NAME.test(k.name) && typeof k.key === 'string' && k.key.length >= 24 &&
    strings(k.scopes) && (k.agents === undefined || strings(k.agents)) && (k.tenant === undefined || (typeof k.tenant === 'string' && TENANT_NAME.test(k.tenant))))
  if (!valid) throw new AH_ERR_CONFIG_INVALID('env/API_KEYS must be [{"name": "<1 to 64 of A-Z a-z 0-9 . _ -, unique>", "key": "<24 or more characters>", "scopes": ["..."], "agents"?: ["..."], "tenant"?: "<1 to 63 of a-z 0-9 ->"}]')
  const keys = parsed as Array<{ name: string, key: string, scopes: string[], agents?: string[], tenant?: string }>
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
