import { EventEmitter } from 'node:events'
import { AH_ERR_POLICY_VIOLATION } from '../errors.js'
import type { StoredEvent } from '../protocol/events.js'
import type { Awaitable } from './awaitable.js'
import type { Viewer } from './tenants.js'

/** An event to append, with what ties it to a request. */
export interface EventInput {
  kind: StoredEvent['kind']
  id: string
  type: string
  source: string
  time: string
  visibility?: StoredEvent['visibility']
  session_id?: string | undefined
  request_id?: string | undefined
  trace_id?: string | undefined
  /** The task a task-runtime event is about (its events are found by it). */
  task_id?: string | undefined
  /** Whose it is: the principal that called its run or created its task (only they and admins see it); absent: the host's own. */
  owner_key?: string | null | undefined
  event: Record<string, unknown>
}

export interface EventQuery {
  session_id?: string
  request_id?: string
  task_id?: string
  type?: string
  kind?: StoredEvent['kind']
  visibility?: StoredEvent['visibility']
  /** Only this principal's events (null: only the host's own, whose is none). */
  owner_key?: string | null
  /** Only the events this viewer sees (by `owner_key`: `storage/tenants.ts`). */
  viewer?: Viewer
  /** Events whose time is at or after this. */
  since?: string
  /** Events after this seq (cursor). */
  after?: number
  limit?: number
}

/** An event as both stores keep it. */
export interface EventRow {
  seq: number
  kind: StoredEvent['kind']
  type: string
  time: string
  visibility: StoredEvent['visibility']
  session_id: string | null
  request_id: string | null
  trace_id: string | null
  body: string
}

/** A stored event as the log gives it. */
export function toStored (row: EventRow): StoredEvent {
  const stored: StoredEvent = { seq: row.seq, kind: row.kind, type: row.type, time: row.time, visibility: row.visibility, event: JSON.parse(row.body) }
  if (row.session_id !== null) stored.session_id = row.session_id
  if (row.request_id !== null) stored.request_id = row.request_id
  if (row.trace_id !== null) stored.trace_id = row.trace_id
  return stored
}

/** Event types that agents' task work produces: always stored internal (seed S36). */
export const INTERNAL_ONLY_TYPES: ReadonlySet<string> = new Set(['AGENT_UPDATE', 'AGENT_RESULT'])

/** The path of the first truthy `render_to_user` in `value`, at any depth. */
export function findRenderToUser (value: unknown, path = ''): string | undefined {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findRenderToUser(value[i], `${path}/${i}`)
      if (found !== undefined) return found
    }
    return undefined
  }
  if (value === null || typeof value !== 'object') return undefined
  for (const [key, child] of Object.entries(value)) {
    if (key === 'render_to_user' && Boolean(child)) return `${path}/${key}`
    const found = findRenderToUser(child, `${path}/${key}`)
    if (found !== undefined) return found
  }
  return undefined
}

/** Who writes an event: `narrator` is the only author allowed `visibility: "user"`. */
export type EventAuthor = 'agent' | 'host' | 'narrator'

/** What `appended` tells of each event this process stored. */
export interface AppendedEvent {
  seq: number
  type: string
  session_id: string | undefined
  owner_key: string | null
  event: Record<string, unknown>
}

/** An event as it is written: the policy applied, the time in UTC, the body as JSON text. */
export interface EventWrite {
  id: string
  kind: StoredEvent['kind']
  type: string
  source: string
  time: string
  visibility: StoredEvent['visibility']
  session_id: string | null
  request_id: string | null
  trace_id: string | null
  task_id: string | null
  owner_key: string | null
  body: string
}

/**
 * What is written for `input` by `author`. The narrator-only policy (seed S36), enforced where every
 * path ends: AGENT_UPDATE and AGENT_RESULT are stored internal whatever they ask; a truthy
 * `render_to_user` anywhere in the event is refused; only the narrator may store `visibility: "user"`.
 * @throws `AH_ERR_POLICY_VIOLATION` (with `policy_error: true`)
 */
export function eventWrite (input: EventInput, author: EventAuthor): EventWrite {
  const flagged = findRenderToUser(input.event)
  if (flagged !== undefined) throw Object.assign(new AH_ERR_POLICY_VIOLATION(`render_to_user at ${flagged}`), { policy_error: true })
  let visibility = input.visibility ?? 'internal'
  if (INTERNAL_ONLY_TYPES.has(input.type)) visibility = 'internal'
  if (visibility === 'user' && author !== 'narrator') {
    throw Object.assign(new AH_ERR_POLICY_VIOLATION(`only the narrator may write visibility "user" (${author} tried, type ${input.type})`), { policy_error: true })
  }
  return {
    id: input.id,
    kind: input.kind,
    type: input.type,
    source: input.source,
    time: new Date(input.time).toISOString(),
    visibility,
    session_id: input.session_id ?? null,
    request_id: input.request_id ?? null,
    trace_id: input.trace_id ?? null,
    task_id: input.task_id ?? null,
    owner_key: input.owner_key ?? null,
    body: JSON.stringify(input.event)
  }
}

/** The columns {@link EventQuery} filters on by equality (null: IS NULL). */
export const EVENT_FILTERS = ['session_id', 'request_id', 'task_id', 'type', 'kind', 'visibility', 'owner_key'] as const

/** What `appended` tells of `input`, stored as `seq`. */
export function appendedEvent (seq: number, input: EventInput): AppendedEvent {
  return { seq, type: input.type, session_id: input.session_id, owner_key: input.owner_key ?? null, event: input.event }
}

/**
 * The event log, as the engine, the runtime and the routes use it. {@link SqliteEventStore} (SQLite)
 * answers at once; the PostgreSQL store (`postgres/events.ts`) answers with promises: callers
 * `await` every call. On both, `seq` grows in commit order, so a follower that lists `after` the
 * last seq it saw never skips an event.
 */
export interface EventLog {
  /**
   * Append one event, under the narrator-only policy (see {@link eventWrite}).
   * @returns its seq
   * @throws `AH_ERR_POLICY_VIOLATION` (with `policy_error: true`); nothing is stored
   */
  append(input: EventInput, author?: EventAuthor): Awaitable<number>
  /** Events matching `query`, oldest first. */
  list(query?: EventQuery): Awaitable<StoredEvent[]>
  /** Delete a session's events (session erasure); how many there were. */
  eraseSession(sessionId: string): Awaitable<number>
  /**
   * Emits `event` ({@link AppendedEvent}) for each event this process appended (SQLite: at the
   * append, PostgreSQL: once it is committed). Followers also poll, for other processes' events.
   */
  readonly appended: EventEmitter
}
