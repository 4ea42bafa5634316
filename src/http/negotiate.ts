import type { DeliveryMode } from '../protocol/manifest.js'

const JSON_TYPE = 'application/json'
const SSE_TYPE = 'text/event-stream'

/** Media ranges of an `Accept` header that the client accepts (q > 0), lower-cased, without parameters. */
function acceptedRanges (accept: string): Set<string> {
  const ranges = new Set<string>()
  for (const part of accept.split(',')) {
    const [range, ...params] = part.split(';').map((s) => s.trim().toLowerCase())
    if (range === undefined || range === '') continue
    const q = params.find((p) => p.startsWith('q='))
    if (q !== undefined && !(Number(q.slice(2)) > 0)) continue
    ranges.add(range)
  }
  return ranges
}

/**
 * Pick the delivery mode (CAP.md §3): the capability's `delivery_mode`, unless `Accept` names exactly
 * one of `application/json` and `text/event-stream`. Wildcards admit what they cover. Returns
 * `undefined` when the client accepts neither (406).
 */
export function chooseDeliveryMode (accept: string | undefined, preferred: DeliveryMode): DeliveryMode | undefined {
  if (accept === undefined || accept.trim() === '') return preferred
  const ranges = acceptedRanges(accept)
  const json = ranges.has(JSON_TYPE)
  const sse = ranges.has(SSE_TYPE)
  if (json !== sse) return json ? 'request_response' : 'server_sent_events'
  if (json && sse) return preferred
  if (ranges.has('*/*')) return preferred
  const anyJson = ranges.has('application/*')
  const anySse = ranges.has('text/*')
  if (anyJson !== anySse) return anyJson ? 'request_response' : 'server_sent_events'
  return anyJson ? preferred : undefined
}
