import { Type, type Static } from 'typebox'
import { InterruptEvent } from './interrupts.js'
import { DateTime, JsonObject, Uuid } from './common.js'

const closed = { additionalProperties: false } as const

/** The four stream operations (CAP.md §5), upper case on the wire. */
export const StreamOpCode = Type.Union([
  Type.Literal('DELTA'), Type.Literal('EVENT'), Type.Literal('ERROR'), Type.Literal('CLOSE')
])
export type StreamOpCode = Static<typeof StreamOpCode>

/** How bad a stream error is: FATAL (stream dead, do not retry), TRANSIENT (retry with backoff), WARNING (goes on). */
export const StreamErrorSeverity = Type.Union([
  Type.Literal('FATAL'), Type.Literal('TRANSIENT'), Type.Literal('WARNING')
])
export type StreamErrorSeverity = Static<typeof StreamErrorSeverity>

/** The `p` of an ERROR packet, and an entry of the JSON transcript's `errors`. */
export const StreamError = Type.Object({
  /** Stable snake_case code, for example `agent_failed`. */
  code: Type.String({ pattern: '^[a-z][a-z0-9_]*$' }),
  message: Type.String(),
  severity: StreamErrorSeverity,
  details: Type.Optional(JsonObject)
}, { ...closed, title: 'StreamError' })
export type StreamError = Static<typeof StreamError>

/** Why a stream ended: the `p` of a CLOSE packet. */
export const CloseReason = Type.Union([
  Type.Literal('done'), Type.Literal('aborted'), Type.Literal('cancelled'), Type.Literal('shutdown'), Type.Literal('input_required')
], { description: '`input_required`: the run stopped to ask (its last EVENT is an `INTERRUPT`); it goes on in a new request that answers (see the protocol guide)' })
export type CloseReason = Static<typeof CloseReason>

function presentationEvent<T extends string, D extends ReturnType<typeof Type.Object>> (type: T, data: D) {
  return Type.Object({
    id: Uuid,
    timestamp: DateTime,
    type: Type.Literal(type),
    data
  }, { ...closed, title: type })
}

/** A thinking step: `response.thought(content, status)`. */
export const ThoughtTraceEvent = presentationEvent('THOUGHT_TRACE', Type.Object({
  thought: Type.String(),
  status: Type.String()
}, closed))

/** A block of markdown: `response.markdown(content)`. */
export const MarkdownBlockEvent = presentationEvent('MARKDOWN_BLOCK', Type.Object({
  content: Type.String()
}, closed))

/** One cited source. */
export const Citation = Type.Object({
  source_id: Type.String(),
  uri: Type.String(),
  title: Type.String(),
  snippet: Type.Optional(Type.String()),
  /** How sure the agent is that the source supports the claim, 0..1. */
  confidence: Type.Number({ minimum: 0, maximum: 1 })
}, closed)
export type Citation = Static<typeof Citation>

/** Sources behind an answer: `response.citations(list)`. */
export const CitationBlockEvent = presentationEvent('CITATION_BLOCK', Type.Object({
  citations: Type.Array(Citation)
}, closed))

/** Progress of a long step: `response.progress(label, status, percent?)`. */
export const ProgressIndicatorEvent = presentationEvent('PROGRESS_INDICATOR', Type.Object({
  label: Type.String(),
  status: Type.Union([Type.Literal('running'), Type.Literal('complete'), Type.Literal('failed')]),
  /** Fraction done, 0..1. */
  progress_percent: Type.Optional(Type.Number({ minimum: 0, maximum: 1 }))
}, closed))

/** One image or other media item. */
export const MediaItem = Type.Object({
  url: Type.String(),
  mime_type: Type.String(),
  alt_text: Type.Optional(Type.String())
}, closed)
export type MediaItem = Static<typeof MediaItem>

/** A set of media items: `response.media(items)`. */
export const MediaCarouselEvent = presentationEvent('MEDIA_CAROUSEL', Type.Object({
  items: Type.Array(MediaItem)
}, closed))

/** The five presentation event types a CAP front end renders. */
export const PresentationEvent = Type.Union([
  ThoughtTraceEvent, MarkdownBlockEvent, CitationBlockEvent, ProgressIndicatorEvent, MediaCarouselEvent
], { title: 'PresentationEvent' })
export type PresentationEvent = Static<typeof PresentationEvent>
export type PresentationEventType = PresentationEvent['type']

/** The type names of {@link PresentationEvent}. */
export const PRESENTATION_EVENT_TYPES: readonly PresentationEventType[] = [
  'THOUGHT_TRACE', 'MARKDOWN_BLOCK', 'CITATION_BLOCK', 'PROGRESS_INDICATOR', 'MEDIA_CAROUSEL'
]

/** Structured data: `response.data(data, title?, view_hint)`. */
export const DataEvent = Type.Object({
  type: Type.Literal('DATA'),
  id: Uuid,
  timestamp: DateTime,
  title: Type.Optional(Type.String()),
  view_hint: Type.String(),
  data: JsonObject
}, { ...closed, title: 'DATA' })
export type DataEvent = Static<typeof DataEvent>

/** The agent's final result: `response.result(obj)` (our extension). */
export const ResultEvent = Type.Object({
  type: Type.Literal('RESULT'),
  data: JsonObject
}, { ...closed, title: 'RESULT' })
export type ResultEvent = Static<typeof ResultEvent>

/** The first packet of every stream made by `create_stream()`. */
export const StreamStartEvent = Type.Object({
  type: Type.Literal('STREAM_START'),
  title: Type.Optional(Type.String()),
  metadata: Type.Optional(JsonObject)
}, { ...closed, title: 'STREAM_START' })
export type StreamStartEvent = Static<typeof StreamStartEvent>

/** Tokens a backend used and their cost: `response.usage()` (our extension). */
export const UsageEvent = Type.Object({
  type: Type.Literal('USAGE'),
  data: Type.Object({
    input_tokens: Type.Integer({ minimum: 0 }),
    output_tokens: Type.Integer({ minimum: 0 }),
    /** USD, from the configured price table. */
    cost: Type.Optional(Type.Number({ minimum: 0 }))
  }, closed)
}, { ...closed, title: 'USAGE' })
export type UsageEvent = Static<typeof UsageEvent>

/** A run's usage so far: `total` (none yet: zero) with one USAGE event's added (the projections of a run show the sum). */
export function addUsage (total: UsageEvent['data'] | undefined, usage: UsageEvent['data']): UsageEvent['data'] {
  const cost = usage.cost === undefined ? total?.cost : (total?.cost ?? 0) + usage.cost
  return { input_tokens: (total?.input_tokens ?? 0) + usage.input_tokens, output_tokens: (total?.output_tokens ?? 0) + usage.output_tokens, ...(cost !== undefined ? { cost } : {}) }
}

/** Everything this server ever puts in the `p` of an EVENT packet. */
export const EventPayload = Type.Union([PresentationEvent, DataEvent, ResultEvent, StreamStartEvent, UsageEvent, InterruptEvent])
export type EventPayload = Static<typeof EventPayload>

const packetHead = {
  /** The logical stream this packet belongs to. */
  stream_id: Uuid,
  /** 1 for a stream's first packet, +1 for each next one, no gaps. */
  seq: Type.Integer({ minimum: 1 }),
  /** Emission time, UTC with `Z`. */
  t: DateTime
}

/** A text chunk. */
export const DeltaPacket = Type.Object({ ...packetHead, op: Type.Literal('DELTA'), p: Type.String() }, { ...closed, title: 'DELTA' })
/** An event (presentation event, data, result or stream start). */
export const EventPacket = Type.Object({ ...packetHead, op: Type.Literal('EVENT'), p: EventPayload }, { ...closed, title: 'EVENT' })
/** An error on a stream. */
export const ErrorPacket = Type.Object({ ...packetHead, op: Type.Literal('ERROR'), p: StreamError }, { ...closed, title: 'ERROR' })
/** The end of a stream; exactly one per stream. */
export const ClosePacket = Type.Object({ ...packetHead, op: Type.Literal('CLOSE'), p: CloseReason }, { ...closed, title: 'CLOSE' })

/**
 * One frame of the SSE response (CAP.md §5). No other keys, ever; `p` always matches `op`.
 */
export const StreamPacket = Type.Union([DeltaPacket, EventPacket, ErrorPacket, ClosePacket], { title: 'StreamPacket' })
export type StreamPacket = Static<typeof StreamPacket>

/** The SSE event name every packet is sent under. */
export const SSE_EVENT_NAME = 'stream.packet'
