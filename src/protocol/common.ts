import { Type } from 'typebox'

/** An RFC 4122 UUID string. */
export const Uuid = Type.String({ format: 'uuid', description: 'RFC 4122 UUID' })

/** An RFC 3339 date-time. We accept any offset and fraction; we emit UTC with `Z` and milliseconds. */
export const DateTime = Type.String({ format: 'date-time', description: 'RFC 3339 date-time' })

/** Any JSON object, kept exactly as sent (agent arguments, metadata, JSON Schemas). */
export const JsonObject = Type.Unsafe<Record<string, unknown>>({ type: 'object', additionalProperties: true })

/** A JSON Schema document, carried as an opaque object. */
export const JsonSchema = Type.Unsafe<Record<string, unknown>>({
  type: 'object',
  additionalProperties: true,
  description: 'A JSON Schema (draft 2020-12 or draft-07)'
})
