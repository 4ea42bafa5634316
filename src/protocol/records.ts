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
  actor: Type.String(),
  action: Type.String(),
  resource: Type.String(),
  success: Type.Boolean(),
  request_id: Type.Union([Type.String(), Type.Null()]),
  root_request_id: Type.Union([Type.String(), Type.Null()]),
  trace_id: Type.Union([Type.String(), Type.Null()]),
  details: Type.Union([JsonObject, Type.Null()]),
  previous_hash: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  /** SHA-256 of the canonical JSON (RFC 8785) of the row without this field. */
  integrity_hash: Type.String({ pattern: '^[0-9a-f]{64}$' })
}, { ...closed, title: 'AuditRow' })

/** A page of audit rows, oldest first; `next` is the `after` cursor of the next page. */
export const AuditPage = Type.Object({
  rows: Type.Array(AuditRow),
  next: Type.Optional(Type.Integer())
}, { ...closed, title: 'AuditPage' })

/** The result of checking the whole audit chain. */
export const AuditVerification = Type.Object({
  ok: Type.Boolean(),
  /** Rows checked and found good. */
  rows: Type.Integer({ minimum: 0 }),
  /** The audit_id where the chain first breaks. */
  first_bad_row: Type.Optional(Type.Integer({ minimum: 1 })),
  reason: Type.Optional(Type.String())
}, { ...closed, title: 'AuditVerification' })

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
