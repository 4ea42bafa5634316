import { Type, type Static } from 'typebox'
import { DateTime, JsonObject, Uuid } from './common.js'
import { EventPayload, StreamError } from './packets.js'
import { Interrupt } from './interrupts.js'

const closed = { additionalProperties: false } as const

/** One stream opened with `create_stream()`, as the JSON transcript reports it. */
export const TranscriptStream = Type.Object({
  stream_id: Uuid,
  title: Type.Optional(Type.String()),
  /** Every chunk written to the stream, concatenated. */
  text: Type.String(),
  state: Type.Union([Type.Literal('closed'), Type.Literal('aborted')]),
  /** Why the stream was aborted, or the non-`done` close reason. */
  reason: Type.Optional(Type.String())
}, closed)
export type TranscriptStream = Static<typeof TranscriptStream>

/** Everything an agent emitted, when it did not call `result()` (CAP.md §4). Nothing is lost. */
export const Transcript = Type.Object({
  /** All markdown and stream text, in emission order. */
  text: Type.String(),
  /** Every EVENT payload, in order. */
  events: Type.Array(EventPayload),
  streams: Type.Array(TranscriptStream),
  errors: Type.Array(StreamError)
}, { ...closed, title: 'Transcript' })
export type Transcript = Static<typeof Transcript>

/** Token usage, when a backend reports it. */
export const Usage = Type.Object({
  input_tokens: Type.Integer({ minimum: 0 }),
  output_tokens: Type.Integer({ minimum: 0 })
}, closed)

/** Cost and size figures of one response. */
export const ResponseMetrics = Type.Object({
  /** Time from request to response, in milliseconds. */
  latency_ms: Type.Number({ minimum: 0 }),
  /** Packets the run produced (as they would have been streamed). */
  packets: Type.Integer({ minimum: 0 }),
  usage: Type.Optional(Usage),
  cost: Type.Optional(Type.Number({ minimum: 0 }))
}, closed)
export type ResponseMetrics = Static<typeof ResponseMetrics>

/** The JSON response of `POST /v1/assist` (CAP.md §4). */
export const ServiceResponse = Type.Object({
  request_id: Uuid,
  created_at: DateTime,
  /** Exactly the object passed to `result()`, or else the {@link Transcript}. */
  output: JsonObject,
  /** The run stopped to ask: its open interrupts. Answer them with a new request in the same session (`payload.resume`). */
  interrupts: Type.Optional(Type.Array(Interrupt, { minItems: 1 })),
  metrics: Type.Optional(ResponseMetrics)
}, { ...closed, title: 'ServiceResponse' })
export type ServiceResponse = Static<typeof ServiceResponse>

/** `GET /health` (CAP.md §1). */
export const HealthCheckResponse = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('degraded'), Type.Literal('maintenance')]),
  /** This server process's id, made at boot (or `INSTANCE_ID`): which instance answered, behind a load balancer. */
  instance_id: Uuid,
  /** The host's version (semver). */
  version: Type.String(),
  uptime_seconds: Type.Number({ minimum: 0 })
}, { ...closed, title: 'HealthCheckResponse' })
export type HealthCheckResponse = Static<typeof HealthCheckResponse>

/** The body of every error answered before a stream starts (CAP.md §6). */
export const ErrorBody = Type.Object({
  statusCode: Type.Integer({ minimum: 400, maximum: 599 }),
  /** Stable code from the catalogue, for example `AH_ERR_VALIDATION`. */
  code: Type.String({ pattern: '^AH_ERR_[A-Z0-9_]+$' }),
  /** The HTTP reason phrase. */
  error: Type.String(),
  message: Type.String(),
  /** For validation errors: `{ errors: [{ path, message }] }`. */
  details: Type.Optional(JsonObject)
}, { ...closed, title: 'ErrorBody' })
export type ErrorBody = Static<typeof ErrorBody>
