import { Type, type Static } from 'typebox'
import { DateTime, JsonObject, Uuid } from './common.js'
import { StoredEvent } from './events.js'

const closed = { additionalProperties: false } as const

/** One exchange of a session, as `GET /v1/sessions/:id/history` lists it. */
export const Interaction = Type.Object({
  request_id: Uuid,
  agent_id: Uuid,
  agent_request_id: Uuid,
  root_request_id: Uuid,
  parent_request_id: Type.Optional(Uuid),
  timestamp: DateTime,
  /** How the run ended: done, aborted, cancelled, shutdown or interrupted. */
  status: Type.String(),
  input: JsonObject,
  /** The result() object or the transcript. */
  output: JsonObject
}, { ...closed, title: 'Interaction' })
export type Interaction = Static<typeof Interaction>

/** A page of a session's history, oldest first. */
export const HistoryPage = Type.Object({
  session_id: Uuid,
  /** All interactions of the session. */
  total: Type.Integer({ minimum: 0 }),
  interactions: Type.Array(Interaction)
}, { ...closed, title: 'HistoryPage' })

/** A row of the audit log. */
export const AuditRow = Type.Object({
  audit_id: Type.Integer({ minimum: 1 }),
  timestamp: DateTime,
  /** Who acted: the authenticated principal (an API key's id, `jwt:<sub>`), `anonymous` when auth is off, or `agent-host`. */
  actor: Type.String(),
  action: Type.String(),
  resource: Type.String(),
  success: Type.Boolean(),
  /** The user the request says it is for (`context.user.user_id`): a claim, not an identity (at most 256 characters). */
  claimed_user: Type.Union([Type.String({ maxLength: 256 }), Type.Null()]),
  request_id: Type.Union([Type.String(), Type.Null()]),
  root_request_id: Type.Union([Type.String(), Type.Null()]),
  trace_id: Type.Union([Type.String(), Type.Null()]),
  details: Type.Union([JsonObject, Type.Null()]),
  /** The audit key that signed the row (its id, not the key); null: a plain SHA-256 link. */
  key_id: Type.Union([Type.String({ pattern: '^[0-9a-f]{16}$' }), Type.Null()]),
  previous_hash: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  /** HMAC-SHA256 with the audit key (SHA-256 without one) of the canonical JSON (RFC 8785) of the row without this field. */
  integrity_hash: Type.String({ pattern: '^[0-9a-f]{64}$' })
}, { ...closed, title: 'AuditRow' })

/** A page of audit rows, oldest first; `next` is the `after` cursor of the next page. */
export const AuditPage = Type.Object({
  rows: Type.Array(AuditRow),
  next: Type.Optional(Type.Integer())
}, { ...closed, title: 'AuditPage' })

const MissingRows = Type.Object({ from: Type.Integer({ minimum: 1 }), to: Type.Integer({ minimum: 1 }) }, closed)

/** The result of checking the whole audit log against its checkpoints. */
export const AuditVerification = Type.Object({
  ok: Type.Boolean(),
  /** Rows from the first up to the first bad one, all found good (every row when `ok`). */
  rows: Type.Integer({ minimum: 0 }),
  /** Of them, rows signed with an audit key. */
  keyed_rows: Type.Integer({ minimum: 0 }),
  /** Rows read, good or bad. */
  rows_read: Type.Integer({ minimum: 0 }),
  /** The audit_id where the log first goes wrong. */
  first_bad_row: Type.Optional(Type.Integer({ minimum: 1 })),
  /** Rows that should be there and are not (the first fault's). */
  missing: Type.Optional(MissingRows),
  /** The first fault. */
  reason: Type.Optional(Type.String()),
  /** Every fault found, in the order found (at most 100: `fault_count` counts them all); the walk goes on past a bad row. */
  faults: Type.Optional(Type.Array(Type.Object({
    /** The audit_id where it is seen; absent for a fault of the whole log. */
    row: Type.Optional(Type.Integer({ minimum: 1 })),
    missing: Type.Optional(MissingRows),
    reason: Type.String()
  }, closed), { maxItems: 100 })),
  fault_count: Type.Optional(Type.Integer({ minimum: 1 })),
  /** Checkpoints the log was held against. */
  checkpoints_checked: Type.Integer({ minimum: 0 }),
  seconds: Type.Number({ minimum: 0 }),
  rows_per_second: Type.Number({ minimum: 0 })
}, { ...closed, title: 'AuditVerification' })

/** The audit log's size and head at a moment, signed with the audit key: keep copies outside this server. */
export const AuditCheckpoint = Type.Object({
  rows: Type.Integer({ minimum: 0 }),
  /** The last row's integrity_hash. */
  head: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  at: DateTime,
  /** The key that signed it; null: unsigned (no AUDIT_KEY). */
  key_id: Type.Union([Type.String({ pattern: '^[0-9a-f]{16}$' }), Type.Null()]),
  /** HMAC-SHA256 of the canonical JSON of `{ rows, head, at, key_id }`; null when unsigned. */
  signature: Type.Union([Type.String({ pattern: '^[0-9a-f]{64}$' }), Type.Null()])
}, { ...closed, title: 'AuditCheckpoint' })

/** A page of events, oldest first; `next` is the `after` cursor of the next page. */
export const EventPage = Type.Object({
  events: Type.Array(StoredEvent),
  next: Type.Optional(Type.Integer())
}, { ...closed, title: 'EventPage' })

/** Pagination and filters shared by the list routes. */
export const PageQuery = {
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
  /** Return rows after this cursor (the previous page's `next`). */
  after: Type.Optional(Type.Integer({ minimum: 0 })),
  /** Only rows at or after this time. */
  since: Type.Optional(DateTime)
}
