import type { Awaitable } from './awaitable.js'

/** One MCP session as every instance sees it: who owns it, how its client initialized it, and its settings. */
export interface McpSessionRecord {
  /** The `Mcp-Session-Id`. */
  id: string
  /** The principal (key or token subject) that initialized it: nobody else may use it. */
  owner: string
  /** The CAP session of its tool calls' runs. */
  capSessionId: string
  /** The client's `initialize` params (protocol version, capabilities, client info): replayed to restore the session on another instance. */
  initialize: Record<string, unknown>
  /** `logging/setLevel`'s level; null until the client sets one. */
  level: string | null
  /** When a request last used it (epoch ms), kept to about a tenth of the idle expiry. */
  lastSeen: number
}

/** One stored server-to-client message of a session's SSE stream (`id:` of its SSE event). */
export interface McpStoredEvent {
  id: string
  /** The JSON-RPC message as sent; `{}` for the stream's priming event, `''` where its request ended without an answer (cancelled). */
  message: string
}

/**
 * What instances tell each other about MCP sessions: a session closed (deleted, expired, past its
 * owner's limit), a request's cancellation that reached another instance than the one running it,
 * a client's answer to a server request (elicitation, sampling) for the instance that asked, a
 * stream's new event for the instances following it.
 */
export type McpSignal =
  | { kind: 'closed', session: string }
  | { kind: 'cancelled', session: string, request: string | number, reason?: string }
  | { kind: 'answer', session: string, instance: string, message: string }
  | { kind: 'event', session: string, stream: string }

/**
 * MCP sessions shared by every instance of a deployment (PostgreSQL), or by one process's restarts
 * (SQLite): the sessions, their SSE streams' events for resumption (`Last-Event-ID`), and the
 * signals instances exchange. Events are kept for `retentionMs` (the store's setting) and while
 * their session lives.
 */
export interface McpSessionStore {
  /** Record a new session; the owner's sessions past `maxPerOwner` (least recently used first, never this one) are removed and returned. */
  create: (record: McpSessionRecord, maxPerOwner: number) => Awaitable<string[]>
  get: (id: string) => Awaitable<McpSessionRecord | undefined>
  /** A request used the session at `now`. */
  touch: (id: string, now: number) => Awaitable<void>
  setLevel: (id: string, level: string) => Awaitable<void>
  /** Remove sessions and their events; returns those that existed. Every instance is told (`closed`). */
  remove: (ids: readonly string[]) => Awaitable<string[]>
  /** Sessions no request used since `before` (epoch ms). */
  idle: (before: number) => Awaitable<string[]>
  /**
   * Store one event of `stream` (the SDK's stream id, unique within the session); its id. With
   * `tell`, followers on every instance are told (`event`): a stream whose client is connected gets
   * its events live, and needs no signal.
   */
  append: (session: string, stream: string, message: string, tell: boolean) => Awaitable<string>
  /**
   * The stream of event `from` (which must be the session's) and its events from that one on, in
   * order (`from` first); undefined when the session has no such event (another session's, pruned,
   * or not an id).
   */
  eventsFrom: (session: string, from: string) => Awaitable<{ stream: string, events: McpStoredEvent[] } | undefined>
  /** Remove events older than `before` (epoch ms); how many went. */
  prune: (before: number) => Awaitable<number>
  /** Tell every instance (this one too). */
  signal: (signal: McpSignal) => Awaitable<void>
  /** Be told of every signal, from any instance; returns the function that stops it. */
  onSignal: (listener: (signal: McpSignal) => void) => () => void
}

/** A session row as both drivers store it. */
export interface McpSessionRow {
  id: string
  owner: string
  cap_session_id: string
  initialize: string
  level: string | null
  last_seen: number | string
}

/** The record of a stored row. */
export function mcpSessionOf (row: McpSessionRow): McpSessionRecord {
  return { id: row.id, owner: row.owner, capSessionId: row.cap_session_id, initialize: JSON.parse(row.initialize) as Record<string, unknown>, level: row.level, lastSeen: Number(row.last_seen) }
}

/** A signal as one notification payload (base64url JSON: no commas, which the channel's payloads are split on). */
export function encodeSignal (signal: McpSignal): string {
  return Buffer.from(JSON.stringify(signal)).toString('base64url')
}

/** The signal of a payload, or undefined for one this version does not know. */
export function decodeSignal (payload: string): McpSignal | undefined {
  try {
    const signal = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as McpSignal
    return ['closed', 'cancelled', 'answer', 'event'].includes(signal.kind) ? signal : undefined
  } catch {
    return undefined
  }
}
