import { Type, type Static } from 'typebox'
import { DateTime, JsonObject } from './common.js'

/**
 * A CloudEvents 1.0 event (JSON format), as agents `emit()` it. Extension attributes (lower-case
 * alphanumeric names) are allowed, as the CloudEvents spec says.
 */
export const CloudEvent = Type.Object({
  specversion: Type.Literal('1.0'),
  id: Type.String({ minLength: 1 }),
  source: Type.String({ minLength: 1 }),
  type: Type.String({ minLength: 1 }),
  time: Type.Optional(DateTime),
  datacontenttype: Type.Optional(Type.String({ minLength: 1 })),
  dataschema: Type.Optional(Type.String({ minLength: 1 })),
  subject: Type.Optional(Type.String({ minLength: 1 })),
  data: Type.Optional(Type.Unknown()),
  /** W3C trace context. */
  traceparent: Type.Optional(Type.String({ pattern: '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' }))
}, { additionalProperties: false, patternProperties: { '^[a-z0-9]{1,20}$': {} }, title: 'CloudEvent' })
export type CloudEvent = Static<typeof CloudEvent>

/** A graph execution event: `NODE_START`, `NODE_DONE`, `EDGE_TAKEN`, ... */
export const GraphEvent = Type.Object({
  event_type: Type.String({ pattern: '^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$' }),
  run_id: Type.String({ minLength: 1 }),
  node_id: Type.String({ minLength: 1 }),
  timestamp: DateTime,
  payload: JsonObject
}, { additionalProperties: false, title: 'GraphEvent' })
export type GraphEvent = Static<typeof GraphEvent>

/** An event as stored and served by `GET /v1/events`. */
export const StoredEvent = Type.Object({
  /** Position in the event log: the cursor for `after` and `Last-Event-ID`. */
  seq: Type.Integer({ minimum: 1 }),
  kind: Type.Union([Type.Literal('cloudevent'), Type.Literal('graph'), Type.Literal('task')]),
  type: Type.String(),
  time: DateTime,
  visibility: Type.Union([Type.Literal('internal'), Type.Literal('user')]),
  session_id: Type.Optional(Type.String()),
  request_id: Type.Optional(Type.String()),
  trace_id: Type.Optional(Type.String()),
  /** The event as emitted. */
  event: JsonObject
}, { additionalProperties: false, title: 'StoredEvent' })
export type StoredEvent = Static<typeof StoredEvent>
