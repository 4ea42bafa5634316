import { STATUS_CODES } from 'node:http'
import createError, { type FastifyErrorConstructor } from '@fastify/error'

/**
 * The whole error catalogue. Every error the host raises comes from here and carries a stable
 * `AH_ERR_<AREA>_<WHAT>` code; `npm run docs` writes the error reference (docs/reference/errors.md)
 * from it, and a test fails when that page is stale.
 */

/** One catalogue entry, as the error reference shows it. */
export interface ErrorEntry {
  /** `AH_ERR_<AREA>_<WHAT>`, also the name of the export. */
  code: string
  /** The status the error carries. */
  statusCode: number
  /** The other status some answers with this code carry (AH_ERR_TOO_MANY_STREAMS: 429 for one caller's streams, 503 for the server's). */
  otherStatusCode?: number
  /** An HTTP error answer may carry this code; false: it is raised at boot or to agent code, never answered. */
  http: boolean
  /** What it means, for users: the error reference's text. */
  description: string
}

const catalogue: ErrorEntry[] = []

function define (code: string, statusCode: number, message: string, description: string, options: { otherStatusCode?: number, http?: boolean } = {}): FastifyErrorConstructor {
  catalogue.push({ code, statusCode, ...(options.otherStatusCode !== undefined ? { otherStatusCode: options.otherStatusCode } : {}), http: options.http ?? true, description })
  return createError(code, message, statusCode)
}

/** An error raised at boot or to agent code, never as an HTTP answer (its status only classes it). */
function defineInternal (code: string, statusCode: number, message: string, description: string): FastifyErrorConstructor {
  return define(code, statusCode, message, description, { http: false })
}

// HTTP: the request
export const AH_ERR_VALIDATION = define('AH_ERR_VALIDATION', 400, '%s',
  'The envelope, a path parameter or the agent input failed validation; `details.errors` lists each failing path.')
export const AH_ERR_BODY_MALFORMED = define('AH_ERR_BODY_MALFORMED', 400, 'Request body is not valid JSON: %s',
  'The body could not be parsed as JSON, nests arrays or objects deeper than `MAX_BODY_DEPTH`, or carried a prototype-pollution key (`__proto__`, `constructor.prototype`).')
export const AH_ERR_REQUEST_INVALID = define('AH_ERR_REQUEST_INVALID', 400, 'Bad request: %s',
  'The HTTP request itself is malformed (for example a bad Content-Length).')
export const AH_ERR_PUSH_ADDRESS_REFUSED = define('AH_ERR_PUSH_ADDRESS_REFUSED', 400, '%s resolves to %s (%s), which push notifications may not reach unless A2A_PUSH_ALLOW_PRIVATE=true',
  'An A2A push notification URL resolves to a loopback, private (RFC 1918, CGNAT), link-local, unique-local or other non-public address: the config is refused as A2A invalid params (JSON-RPC -32602, HTTP+JSON 400) with this message, and a delivery whose name resolves to one now is not sent (its `last_error`). `A2A_PUSH_ALLOW_PRIVATE=true` allows them.')
export const AH_ERR_AUTH_REQUIRED = define('AH_ERR_AUTH_REQUIRED', 401, 'Authentication required: %s',
  'No valid credentials: with `AUTH_MODE=apikey` the key is missing, unknown, expired or revoked; with `AUTH_MODE=jwt` the token is missing, badly signed, expired, not yet valid, or for another issuer or audience (the message says which). Also: the agent requires auth and `AUTH_MODE` is off.')
export const AH_ERR_FORBIDDEN = define('AH_ERR_FORBIDDEN', 403, 'Forbidden: %s',
  'The key lacks the route\'s scope (the message names it), or may not invoke this agent.')
export const AH_ERR_HOST_REFUSED = define('AH_ERR_HOST_REFUSED', 403, 'Refused by the DNS-rebinding guard: %s',
  'Refused by the DNS-rebinding guard. Bound to loopback (`HOST`), or anywhere with `ALLOWED_HOSTS` set, on every route: the `Host` header is not a name of this server (`localhost`, `127.0.0.1`, `[::1]`, the bound address, an `ALLOWED_HOSTS` name or the host of a `CORS_ORIGINS` entry), or the `Origin` header is neither the request\'s own nor in `CORS_ORIGINS`. On any `HOST`, `/mcp` refuses such an `Origin`.')
export const AH_ERR_AGENT_NOT_FOUND = define('AH_ERR_AGENT_NOT_FOUND', 404, 'No agent is registered with id or name "%s"',
  '`context.agent_id` (or the `:id` path parameter) names no registered agent.')
export const AH_ERR_ROUTE_NOT_FOUND = define('AH_ERR_ROUTE_NOT_FOUND', 404, 'Route %s %s not found',
  'No route matches the method and path.')
export const AH_ERR_SESSION_NOT_FOUND = define('AH_ERR_SESSION_NOT_FOUND', 404, 'No session with id "%s"',
  'The session id names no stored session (never used, or erased).')
export const AH_ERR_RUN_NOT_FOUND = define('AH_ERR_RUN_NOT_FOUND', 404, 'No running request with id "%s"',
  'Cancel: the request id names no run that is still going.')
export const AH_ERR_METHOD_NOT_ALLOWED = define('AH_ERR_METHOD_NOT_ALLOWED', 405, 'Method %s is not allowed on %s: this path takes %s',
  'The path exists, but not with this method (`GET /v1/assist`, say); the `Allow` header and the message list the methods it takes.')
export const AH_ERR_REQUEST_CONFLICT = define('AH_ERR_REQUEST_CONFLICT', 409, 'Request id "%s" was already used with a different envelope',
  'The envelope\'s `request_id` was already used with a different envelope (a retry must resend the same one).')
export const AH_ERR_INTERRUPT_NOT_FOUND = define('AH_ERR_INTERRUPT_NOT_FOUND', 404, 'No interrupt "%s" waits in this session',
  'A resume names an interrupt that no run of this session asked, or that is another caller\'s (only the run\'s owner, or an admin, may answer it).')
export const AH_ERR_INTERRUPT_ANSWER_INVALID = define('AH_ERR_INTERRUPT_ANSWER_INVALID', 400, 'The answer to interrupt "%s" is not valid: %s',
  'A resume\'s `value` does not match what the interrupt asked: the `schema` of an `input`, or `{ approved: boolean, comment?: string }` for an `approval` (`details.errors` lists where). The interrupt stays open.')
export const AH_ERR_INTERRUPT_CLOSED = define('AH_ERR_INTERRUPT_CLOSED', 409, 'Interrupt "%s" is closed: %s',
  'The interrupt was answered already (by another request), or its run went on or ended: an interrupt takes one answer.')
export const AH_ERR_INTERRUPT_EXPIRED = define('AH_ERR_INTERRUPT_EXPIRED', 410, 'Interrupt "%s" expired at %s',
  'The interrupt was not answered before its `expires_at`: the run it belongs to ended (its other interrupts too) and takes no answer.')
export const AH_ERR_NOT_ACCEPTABLE = define('AH_ERR_NOT_ACCEPTABLE', 406, 'Accept header "%s" allows neither application/json nor text/event-stream',
  'The `Accept` header admits neither `application/json` nor `text/event-stream`.')
export const AH_ERR_BODY_TOO_LARGE = define('AH_ERR_BODY_TOO_LARGE', 413, 'Request body is larger than %s bytes',
  'The body is larger than `BODY_LIMIT`.')
export const AH_ERR_RATE_LIMITED = define('AH_ERR_RATE_LIMITED', 429, 'Rate limit reached: %s',
  'The caller (`RATE_LIMIT_MAX`) or the agent (`RATE_LIMIT_AGENT_MAX`) used up its requests for the window, or the client address failed to authenticate `AUTH_FAILURE_MAX` times; `Retry-After` says when to come back, `details.limit` which limit it was.')
export const AH_ERR_TOO_MANY_STREAMS = define('AH_ERR_TOO_MANY_STREAMS', 429, 'Too many open streams: %s',
  'The caller already holds `MAX_STREAMS_PER_CALLER` SSE responses (429), or the server holds `MAX_STREAMS` (503); `Retry-After` is set, and `details.limit` says which (`caller_streams` or `total_streams`): close a stream, or come back later.',
  { otherStatusCode: 503 })
/**
 * A model budget (BUDGETS_FILE) is used up: the tenant's or the key's tokens or cost for the day or
 * the month. Raised before the run starts (429, with `details`), and to agent code by a backend
 * call it refuses: an agent that lets it propagate ends its response with ERROR `budget_exceeded`
 * (TRANSIENT: the budget comes back when its period resets, `details.resets_at`).
 */
export const AH_ERR_BUDGET_EXCEEDED = class BudgetExceededError extends define('AH_ERR_BUDGET_EXCEEDED', 429, 'Budget exceeded: %s',
  'A model budget of `BUDGETS_FILE` is used up: the tenant\'s or the key\'s tokens or cost (`LLM_PRICES`) for the day or the month (UTC). A new run of an agent that calls a model backend is refused before it starts; a backend call of a running run is refused, and a run that does not catch it ends with ERROR `budget_exceeded`. `details` names the limit (`subject`, `period`, `measure`, `limit`, `used`) and `resets_at`; `Retry-After` is the seconds until then.') {
  readonly expose = true
  readonly streamCode = 'budget_exceeded'
  readonly severity = 'TRANSIENT'
  readonly details: Record<string, unknown>
  /** Seconds until the period resets: the answer's `Retry-After`. */
  readonly retryAfter: number
  constructor (message: string, details: Record<string, unknown> & { resets_at: string }, retryAfter: number) {
    super(message)
    this.name = 'BudgetExceededError'
    this.details = details
    this.retryAfter = retryAfter
  }
}
export const AH_ERR_MEDIA_TYPE_UNSUPPORTED = define('AH_ERR_MEDIA_TYPE_UNSUPPORTED', 415, 'Content-Type "%s" is not supported: send application/json',
  'The body is not `application/json`.')
export const AH_ERR_INTERNAL = define('AH_ERR_INTERNAL', 500, 'Internal server error',
  'An unexpected failure inside the host; the cause is in the server log, never in the response.')
export const AH_ERR_AGENT_FAILED = define('AH_ERR_AGENT_FAILED', 502, 'The agent failed before producing any output',
  'JSON mode: the agent failed fatally and produced nothing; `details.error` is its StreamError.')
export const AH_ERR_TASK_INVALID = define('AH_ERR_TASK_INVALID', 400, 'Invalid task graph: %s',
  'A task to create is malformed, repeats an id, depends on an unknown task, or the graph has a cycle.')
export const AH_ERR_TASK_NOT_FOUND = define('AH_ERR_TASK_NOT_FOUND', 404, 'No task with id "%s"',
  'The task id names no task.')
export const AH_ERR_PLAN_NOT_FOUND = define('AH_ERR_PLAN_NOT_FOUND', 404, 'No plan with id "%s"',
  'No task of the graph belongs to a plan with this id (`POST /v1/plans` makes them).')
export const AH_ERR_BUS_EVENT_INVALID = define('AH_ERR_BUS_EVENT_INVALID', 400, '%s',
  'A publication to the event bus failed validation: its shape (`EventPublication`), or the `data` of one of the typed common events (`research.complete`, `plan.ready`, ...). `details.errors` lists each failing path.')
export const AH_ERR_BUS_DEAD_LETTER_NOT_FOUND = define('AH_ERR_BUS_DEAD_LETTER_NOT_FOUND', 404, 'No dead letter %s',
  'No dead letter has this id, or it is not the caller\'s (`GET /v1/bus/dead-letters` lists them).')
export const AH_ERR_BUS_REDRIVE_REFUSED = define('AH_ERR_BUS_REDRIVE_REFUSED', 409, 'Dead letter %s cannot be delivered again: %s',
  'A dead letter cannot be delivered again: its event is past its time to live (it would never be delivered), or its subscription was removed. The letter stays.')
export const AH_ERR_TASK_STALE_CLAIM = define('AH_ERR_TASK_STALE_CLAIM', 409, 'Task "%s" is no longer held by %s at attempt %s',
  'A worker presented a claim (owner, attempt) that is no longer current: its lease expired and the task moved on. Nothing was changed.')
export const AH_ERR_TASK_APPROVAL_NOT_FOUND = define('AH_ERR_TASK_APPROVAL_NOT_FOUND', 404, 'Task "%s" asked for no approval "%s"',
  'The approval id names no question the task\'s agent asked (`metadata.approvals` of `GET /v1/tasks/{id}` lists them).')
export const AH_ERR_TASK_STATE = define('AH_ERR_TASK_STATE', 409, 'Task "%s" is %s: cannot %s',
  'The task is not in a state that allows the operation (for example cancelling a completed task).')
export const AH_ERR_POLICY_VIOLATION = define('AH_ERR_POLICY_VIOLATION', 422, 'Refused by the narrator-only policy: %s',
  'An agent event tried to speak to the user (a truthy `render_to_user`, or `visibility: "user"` from anyone but the narrator). Nothing was stored.')
export const AH_ERR_BACKEND_UNAVAILABLE = define('AH_ERR_BACKEND_UNAVAILABLE', 503, 'The agent\'s backend is not available: %s',
  'The agent needs a backend (`GET /v1/backends`) that is not configured or cannot run here; the message names the settings to set.')
export const AH_ERR_RUN_TIMEOUT = define('AH_ERR_RUN_TIMEOUT', 504, 'The run took longer than its timeout and produced nothing',
  'JSON mode: the run went past its timeout (`RUN_TIMEOUT_MS` or `payload.metadata.timeout_ms`) before producing anything; `details.error` is the `run_timeout` StreamError.')
export const AH_ERR_OVERLOADED = define('AH_ERR_OVERLOADED', 503, 'The server is overloaded (%s); retry later',
  'The event loop or memory is past its limit (`MAX_EVENT_LOOP_DELAY_MS`, `MAX_HEAP_USED_BYTES`, `MAX_RSS_BYTES`); `Retry-After` is set and `/health` says `degraded`.')
export const AH_ERR_STORAGE_BUSY = define('AH_ERR_STORAGE_BUSY', 503, 'The database stayed locked by another process for %s ms; retry later',
  'Another process held the database\'s write lock for longer than `DB_WRITE_BUDGET_MS`; nothing was started or changed. `Retry-After` is set.')
export const AH_ERR_STORAGE_UNAVAILABLE = define('AH_ERR_STORAGE_UNAVAILABLE', 503, 'The database cannot be reached; retry later',
  'PostgreSQL (`DATABASE_URL`) refused or dropped the connection (it is down, restarting, or out of connections); nothing was acknowledged that is not stored. `Retry-After` is set and `/health` says `degraded` while it lasts.')
export const AH_ERR_SECRETS_KEY_UNSET = define('AH_ERR_SECRETS_KEY_UNSET', 503, 'No secrets key is set, so %s cannot be stored sealed: set SECRETS_KEY or SECRETS_KEY_FILE (the same key on every instance; make one with openssl rand -base64 32)',
  'A secret (an A2A push config\'s token or credentials) would be stored, and the server holds no key to seal it with: with `DATABASE_URL` there is no default key (every instance must use the same one), so set `SECRETS_KEY` or `SECRETS_KEY_FILE`. Nothing is stored in plain text. Also at boot, when secrets an earlier version stored in plain text wait to be sealed.')
export const AH_ERR_SHUTTING_DOWN = define('AH_ERR_SHUTTING_DOWN', 503, 'The server is shutting down',
  'The server is draining; retry against another instance (`Retry-After` is set).')
export const AH_ERR_PLAYGROUND_UNBUILT = define('AH_ERR_PLAYGROUND_UNBUILT', 503, 'The playground is not built: run npm run build',
  'The playground page is served but what it runs on was not built: the TypeScript client (`client/dist`), or the chat page\'s bundle (`dist/playground/chat.js`); `npm run build` (or `npm start`) builds both.')
export const AH_ERR_MCP_SESSION_NOT_FOUND = define('AH_ERR_MCP_SESSION_NOT_FOUND', 404, 'No MCP session with id "%s"',
  '`/mcp`: the `Mcp-Session-Id` names no open MCP session of this caller (never made, closed, expired after `MCP_SESSION_IDLE_MS`, or another key\'s); initialize a new one.')
export const AH_ERR_MCP_EVENT_NOT_FOUND = define('AH_ERR_MCP_EVENT_NOT_FOUND', 404, 'No event "%s" in this MCP session',
  '`GET /mcp` with `Last-Event-ID`: the id names no stored event of the session\'s streams (another session\'s, or older than the events are kept: `MCP_SESSION_IDLE_MS`, at least an hour); the stream cannot be resumed.')
export const AH_ERR_MCP_STREAM_ENDED = define('AH_ERR_MCP_STREAM_ENDED', 404, 'The MCP stream of event "%s" has ended',
  '`GET /mcp` with `Last-Event-ID`: the stream was delivered to its end (its response is at or before that event) or its request was cancelled: there is nothing more to resume.')

// Agents: authoring and runtime (raised to agent code or at boot)
export const AH_ERR_AGENT_INVALID = defineInternal('AH_ERR_AGENT_INVALID', 500, 'Invalid agent at %s: %s',
  'Boot: an agent folder does not default-export a valid agent (bad export, failed import, invalid manifest).')
export const AH_ERR_AGENT_DUPLICATE = defineInternal('AH_ERR_AGENT_DUPLICATE', 500, 'Duplicate agent at %s: %s',
  'Boot: two agents share a manifest id or name.')
export const AH_ERR_AGENT_STARTUP = defineInternal('AH_ERR_AGENT_STARTUP', 500, 'Agent "%s" failed in startup(): %s',
  'Boot: an agent\'s `startup()` hook threw (the agents already started are shut down).')
export const AH_ERR_STREAM_CLOSED = defineInternal('AH_ERR_STREAM_CLOSED', 500, 'Stream %s is already %s',
  'Raised to the agent: it wrote to a stream, or called the response handler, after it ended (closed or aborted).')
export const AH_ERR_EVENT_INVALID = defineInternal('AH_ERR_EVENT_INVALID', 500, 'Invalid event: %s',
  'Raised to the agent: an emitted event or presentation payload does not match its schema; it is not sent or stored.')
export const AH_ERR_SESSION_VALUE_INVALID = defineInternal('AH_ERR_SESSION_VALUE_INVALID', 500, 'Session value "%s" must be %s (got %s bytes)',
  'Raised to the agent: `session.store()` got something that is not JSON, or more than 1 MiB of it.')
export const AH_ERR_TOOL_CALL_INVALID = defineInternal('AH_ERR_TOOL_CALL_INVALID', 500, 'Invalid tool call: %s',
  'Raised to the agent: `host.tools.call()` got something that is not a ToolCall (`tool`, `action`, `args`, `timeout` in seconds, `retry_on_failure`). A refused or failed call is not an error: it answers `success: false`.')

// Boot
export const AH_ERR_AUDIT_KEY_MISSING = defineInternal('AH_ERR_AUDIT_KEY_MISSING', 500, 'The audit log is signed with audit key %s, and AUDIT_KEY is not set: set it (the same key, or a new one to rotate to) before starting',
  'At boot: the audit log\'s rows are signed (HMAC) with an audit key and this process has none, so its rows would break the chain. Set `AUDIT_KEY`.')
export const AH_ERR_STORAGE_SCHEMA_TOO_NEW = defineInternal('AH_ERR_STORAGE_SCHEMA_TOO_NEW', 500, 'Database %s has schema version %s but this code knows only up to %s: upgrade agent-host',
  'Boot: the database was written by a newer agent-host; this one refuses to open it.')
export const AH_ERR_CONFIG_INVALID = defineInternal('AH_ERR_CONFIG_INVALID', 500, 'Invalid configuration: %s',
  'Boot: an environment setting is missing or malformed; the message names it.')
export const AH_ERR_SECRETS_KEY_UNKNOWN = defineInternal('AH_ERR_SECRETS_KEY_UNKNOWN', 500, 'Stored secrets are sealed with key %s, which this server does not hold (it holds %s): %s',
  'At boot (or `agent-host secrets rotate`): stored secrets are sealed with a key that is neither `SECRETS_KEY` (or `SECRETS_KEY_FILE`, or on SQLite `DATA_DIR/secrets.key`) nor in `SECRETS_KEYS_RETIRED`. Start with the key they were sealed with; to change keys, set the new one as `SECRETS_KEY`, the old one in `SECRETS_KEYS_RETIRED`, and run `agent-host secrets rotate`.')
export const AH_ERR_SECRET_UNREADABLE = defineInternal('AH_ERR_SECRET_UNREADABLE', 500, 'A stored secret sealed with key %s cannot be opened: %s',
  'A stored secret did not open: its key is not held, or it does not authenticate (it was changed, or copied from another row). Nothing falls back to plain text.')

/** Why an agent's signal fired (`signal.reason.kind`). */
export type AbortKind = 'client_disconnected' | 'slow_consumer' | 'cancelled' | 'shutdown' | 'timeout' | 'agent_error' | 'agent_failed' |
  'contract_violation' | 'output_too_large' | 'storage_busy' | 'lease_lost' | 'interrupted'

/** The `signal.reason` of an aborted run: `name` is `AbortError`, as for any aborted fetch. */
export const AH_ERR_RUN_ABORTED = class RunAbortedError extends defineInternal('AH_ERR_RUN_ABORTED', 500, 'The run was aborted: %s',
  'Raised to the agent as `signal.reason`: its run was aborted (`name` is `AbortError`); `kind` says why (client gone, cancelled, shutdown, timeout, lease lost, ...).') {
  readonly kind: AbortKind
  constructor (kind: AbortKind) {
    super(kind)
    this.name = 'AbortError'
    this.kind = kind
  }
}

// Agents and their backends: raised by agent code, or to it
/**
 * An error whose message may be shown to the client. Agents throw it (or any error with
 * `expose: true`) when the message is meant for the user; other errors are reported as "The agent
 * failed" so that internals never leak. Agents import it as `SafeAgentError`.
 */
export const AH_ERR_AGENT_SAFE = class SafeAgentError extends defineInternal('AH_ERR_AGENT_SAFE', 500, '%s',
  'Thrown by an agent (`SafeAgentError`): its message and `details` are shown to the client in the `agent_failed` StreamError.') {
  readonly expose = true
  readonly details: Record<string, unknown> | undefined
  constructor (message: string, details?: Record<string, unknown>) {
    super(message)
    this.name = 'SafeAgentError'
    this.details = details
  }
}

/** The stream error codes a backend failure carries (see STREAM_ERROR_CODES). */
export type BackendStreamCode = 'backend_unavailable' | 'backend_timeout' | 'backend_failed'

/**
 * A backend failed: the provider answered with an error, stalled, or the local agent died. Its
 * message is safe to show (`expose`), and an agent that lets it propagate ends its response with
 * ERROR `{ code: streamCode, severity }`: TRANSIENT when a retry may help, else FATAL. Agents
 * import it as `BackendError`.
 */
export const AH_ERR_BACKEND_FAILED = class BackendError extends defineInternal('AH_ERR_BACKEND_FAILED', 502, '%s',
  'Raised to agent code (`BackendError`): a backend failed (provider error, stall, local agent crash); an agent that lets it propagate ends its response with the backend stream error.') {
  readonly expose = true
  readonly streamCode: BackendStreamCode
  readonly severity: 'FATAL' | 'TRANSIENT'
  readonly details?: Record<string, unknown>
  constructor (streamCode: BackendStreamCode, message: string, severity: 'FATAL' | 'TRANSIENT', details?: Record<string, unknown>) {
    super(message)
    this.name = 'BackendError'
    this.streamCode = streamCode
    this.severity = severity
    if (details !== undefined) this.details = details
  }
}
export const AH_ERR_BACKEND_CONFIG = defineInternal('AH_ERR_BACKEND_CONFIG', 500, '%s',
  'Raised to agent code: a local agent setting is unusable (a workspace outside `DATA_DIR/workspaces`, a bad session id).')
export const AH_ERR_REMOTE_CALL_INVALID = defineInternal('AH_ERR_REMOTE_CALL_INVALID', 500, 'Invalid A2A call: %s',
  'Raised to the agent: `host.a2a.call()` was called with something that is not a call (an agent or capability that is not a name, a payload that is not an object, a timeout that is not 1 to 86400 seconds, a bad `callback_url`, `signal` or `onUpdate`); refusals of a well-formed call are `failure` answers instead.')
export const AH_ERR_REMOTE_CARD_UNVERIFIED = defineInternal('AH_ERR_REMOTE_CARD_UNVERIFIED', 502, 'its card at %s carries no valid signature by its card_key (AH_ERR_REMOTE_CARD_UNVERIFIED): %s',
  'An external agent of `A2A_AGENTS_FILE` has a `card_key`, and the card fetched from its `card_url` is unsigned, or none of its `signatures` is a valid JWS by that key over the card as received (RFC 8785, without `signatures`): the card is not used, and the call is a `failure` answer whose `metadata.error` says so (docs/a2a.md, "Signed agent cards").')

/** A failure a task agent reports on purpose (seed S34): why, and whether trying again may help. Agents import it as `AgentError`. */
export const AH_ERR_TASK_AGENT_FAILED = class AgentError extends defineInternal('AH_ERR_TASK_AGENT_FAILED', 500, '%s',
  'Thrown by a task agent (`AgentError`): the task failed for `reason`; `retryable` says whether another attempt may help.') {
  readonly reason: string
  readonly retryable: boolean
  readonly details: Record<string, unknown> | undefined
  constructor (reason: string, options: { retryable?: boolean, details?: Record<string, unknown>, cause?: unknown } = {}) {
    super(reason, ...(options.cause !== undefined ? [{ cause: options.cause }] : []))
    this.name = 'AgentError'
    this.reason = reason
    this.retryable = options.retryable ?? false
    this.details = options.details
  }
}
/** The question a task's agent asked, as {@link AH_ERR_TASK_APPROVAL_REQUIRED} carries it. */
export interface TaskQuestion {
  id: string
  message: string
  call: Record<string, unknown>
}

/**
 * Raised to a task agent by its host when it calls an action marked `require_approval` that no person
 * has answered yet (`assist/task-host.ts`); `BaseAgent.executeOnce` catches it and the task waits
 * (WAITING) instead of failing. An agent that catches it should let it go on.
 */
export const AH_ERR_TASK_APPROVAL_REQUIRED = class TaskApprovalRequiredError extends defineInternal('AH_ERR_TASK_APPROVAL_REQUIRED', 500, 'Task "%s" waits for a person\'s approval: %s',
  'Raised to a task agent by `host.tools.call` or `host.a2a.call` of an action an operator marked `require_approval` that no one has answered yet: the worker stores the question and the task waits (WAITING) for `POST /v1/tasks/{id}/approvals/{approval_id}`, then runs again with its earlier host calls replayed. An agent that catches it should throw it on.') {
  readonly taskId: string
  readonly question: TaskQuestion
  /** What the task keeps while it waits (`storage/tasks/task.ts:TaskWait`), once none of its host calls is in flight. */
  readonly waiting: () => Promise<Record<string, unknown>>
  constructor (taskId: string, question: TaskQuestion, waiting: () => Promise<Record<string, unknown>>) {
    super(taskId, question.message)
    this.name = 'TaskApprovalRequiredError'
    this.taskId = taskId
    this.question = question
    this.waiting = waiting
  }
}
export const AH_ERR_TASK_LOCK_COMPROMISED = defineInternal('AH_ERR_TASK_LOCK_COMPROMISED', 500, 'the lock on %s was compromised; the change was not written',
  'The task graph file\'s lock was taken by another process while held (it judged it stale): the write was not made.')

// API keys (the command line's `keys`)
export const AH_ERR_KEY_NAME_TAKEN = defineInternal('AH_ERR_KEY_NAME_TAKEN', 409, 'A key named "%s" already exists and is not revoked (id %s): revoke it first, or choose another name',
  '`agent-host keys create`: a key that is not revoked (expired or not) already has that name; a name is one key\'s, so that `keys revoke NAME` revokes only it. Nothing was made.')
export const AH_ERR_KEY_NAME_AMBIGUOUS = defineInternal('AH_ERR_KEY_NAME_AMBIGUOUS', 409, 'The name "%s" is shared by %s keys that are not revoked (ids %s): revoke one by its id',
  '`agent-host keys revoke NAME`: in a database from before names were unique, more than one key that is not revoked has that name. Nothing was revoked; give the id of the key to revoke (`keys list` shows them).')

// Authentication internals
export const AH_ERR_AUTH_UNKNOWN_KEY = defineInternal('AH_ERR_AUTH_UNKNOWN_KEY', 401, 'the token\'s key id (kid) %s is not one of ours',
  '`AUTH_MODE=jwt`: a token names a key id the JWKS file does not hold (answered as 401 `AH_ERR_AUTH_REQUIRED`, audited as `unknown_key`).')

/** Instance types of the errors agent code meets, by the names agents know them by. */
export type SafeAgentError = InstanceType<typeof AH_ERR_AGENT_SAFE>
export type BackendError = InstanceType<typeof AH_ERR_BACKEND_FAILED>
export type AgentError = InstanceType<typeof AH_ERR_TASK_AGENT_FAILED>

/** Every host error code with its HTTP status and meaning. */
export const ERROR_CATALOGUE: readonly ErrorEntry[] = catalogue

/**
 * Stable snake_case codes carried in `StreamError.code` (ERROR packets and the JSON transcript), each
 * with its meaning for users (the error reference's stream table).
 */
export const STREAM_ERROR_CODES = {
  agent_error: 'The agent reported an error with `response.error()`: WARNING when recoverable, else FATAL and every stream closes `"aborted"`.',
  agent_failed: 'The agent threw (FATAL). The message is "The agent failed" unless the error is marked safe (`expose: true`, as `SafeAgentError` is).',
  agent_contract_violation: 'The agent broke its own manifest: `result()` did not match the capability\'s `outputs` schema (FATAL).',
  stream_aborted: 'The agent aborted one of its streams with `stream.abort(reason)` (FATAL for that stream only).',
  shutting_down: 'The server is shutting down (TRANSIENT: retry, elsewhere or once it is back).',
  run_interrupted: 'The server running the request stopped (or froze past `RUN_LEASE_MS`) before it finished; a re-POST gets the journal up to there, then this (FATAL).',
  resume_gap: 'A `Last-Event-ID` for a request the journal no longer holds (older than `JOURNAL_RETENTION_MS`) (FATAL).',
  slow_consumer: 'The client stopped reading: its backlog passed `SSE_MAX_BUFFER_BYTES`, or its socket stayed full for `SSE_STALL_TIMEOUT_MS` (TRANSIENT; recorded in the transcript, since the client is gone).',
  output_too_large: 'The run produced more than `RUN_MAX_OUTPUT_BYTES` (the packets\' JSON, journaled); it was stopped, and what it produced up to there is kept and answered (FATAL).',
  storage_busy: 'The run could not write its journal within `DB_WRITE_BUDGET_MS` because another process held the database\'s write lock; it was stopped (TRANSIENT: retry).',
  run_timeout: 'The run passed its timeout (`RUN_TIMEOUT_MS`, or the shorter `payload.metadata.timeout_ms` the request asked for) and was stopped; the agent\'s signal fires with kind `timeout` (TRANSIENT).',
  backend_unavailable: 'The agent\'s backend (LLM provider or local agent) is not configured or cannot be reached (FATAL).',
  backend_timeout: 'The backend sent nothing for `LLM_TIMEOUT_MS` / `CLI_AGENT_TIMEOUT_MS`; the provider request or the subprocess was stopped (TRANSIENT).',
  budget_exceeded: 'A backend call was refused because a model budget (`BUDGETS_FILE`) is used up; `details` names the limit and when it resets (TRANSIENT: the budget comes back then).',
  backend_failed: 'The provider answered with an error or the local agent died mid-stream: TRANSIENT when a retry may help (429, 5xx, a crash), else FATAL (`details` has the status or exit code).'
} as const
export type StreamErrorCode = keyof typeof STREAM_ERROR_CODES

/** The JSON body of an error answer (CAP.md §6). */
export function errorBody (error: { statusCode?: number, code: string, message: string, details?: Record<string, unknown> }): {
  statusCode: number
  code: string
  error: string
  message: string
  details?: Record<string, unknown>
} {
  const statusCode = error.statusCode ?? 500
  const body = { statusCode, code: error.code, error: STATUS_CODES[statusCode] ?? 'Error', message: error.message }
  return error.details === undefined ? body : { ...body, details: error.details }
}

/** Attach structured details (for example failing paths) to a host error. */
export function withDetails<E extends Error> (error: E, details: Record<string, unknown>): E & { details: Record<string, unknown> } {
  return Object.assign(error, { details })
}
