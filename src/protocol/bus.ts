import { Type, type Static } from 'typebox'
import { DateTime, JsonObject } from './common.js'
import { EventVisibility } from './contract.js'

const closed = { additionalProperties: false } as const

/** An event of the bus as it is served: on the SSE feed (`event: bus.event`, `id: seq`), in pages and dead letters. */
export const BusEventRecord = Type.Object({
  /** Its place on the bus: the feed's cursor (`Last-Event-ID`, `after`). */
  seq: Type.Integer({ minimum: 1 }),
  id: Type.String({ format: 'uuid' }),
  type: Type.String(),
  /** One owner's events with the same key while one lives are one event (another caller's key is another event). */
  key: Type.String(),
  visibility: EventVisibility,
  priority: Type.Integer({ minimum: 1, maximum: 10 }),
  target_agents: Type.Union([Type.Array(Type.String()), Type.Null()]),
  data: Type.Unknown(),
  /** Who published it: `agent:<name>`, `api`. */
  source: Type.String(),
  trace_id: Type.Union([Type.String(), Type.Null()]),
  published_at: DateTime,
  /** After this it is no longer delivered nor served. */
  expires_at: DateTime
}, { ...closed, title: 'BusEvent' })
export type BusEventRecord = Static<typeof BusEventRecord>

/** `POST /v1/bus/events` answer: the event stored, or the caller's own live one with the same key (`duplicate`). */
export const BusPublished = Type.Object({
  event: BusEventRecord,
  duplicate: Type.Boolean()
}, { ...closed, title: 'BusPublished' })

/** A page of the feed; `next` is the cursor to go on from (it moves past events the caller may not see). */
export const BusEventPage = Type.Object({
  events: Type.Array(BusEventRecord),
  next: Type.Integer({ minimum: 0 })
}, { ...closed, title: 'BusEventPage' })

/** A durable subscription: its handler runs in any process that registers its id. */
export const BusSubscriptionRecord = Type.Object({
  id: Type.String(),
  agent: Type.Union([Type.String(), Type.Null()]),
  patterns: Type.Array(Type.String()),
  filter: Type.Union([JsonObject, Type.Null()]),
  max_attempts: Type.Integer({ minimum: 1 }),
  backoff_ms: Type.Integer({ minimum: 0 })
}, { ...closed, title: 'BusSubscription' })

/** A delivery whose handler failed `max_attempts` times, with its event. */
export const BusDeadLetter = Type.Object({
  id: Type.Integer({ minimum: 1 }),
  subscription_id: Type.String(),
  event: BusEventRecord,
  attempts: Type.Integer({ minimum: 1 }),
  /** The handler's last error message. */
  last_error: Type.String(),
  dead_at: DateTime
}, { ...closed, title: 'BusDeadLetter' })

export const BusDeadLetterPage = Type.Object({
  dead_letters: Type.Array(BusDeadLetter),
  next: Type.Optional(Type.Integer())
}, { ...closed, title: 'BusDeadLetterPage' })
