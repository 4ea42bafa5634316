// Hand-written because no library expresses CAP.md §3's rule. `negotiator` (and `accepts` and
// `@fastify/accepts`, built on it) answer "which offered type is best" by q-value, specificity and
// order. §3 asks something else: does Accept *name* exactly one of the two types (then that one,
// whatever the q-values and wildcards around it), else do wildcards cover one, both or neither.
// Negotiator's answer does not say whether a type was named or only covered by a wildcard. It also
// drops a range whose parameters the offered type lacks (`application/json; charset=utf-8` would be
// a 406). `@fastify/accept-negotiator` matches plain tokens, not `type/*` ranges.
import type { DeliveryMode } from '../protocol/manifest.js'

const JSON_TYPE = 'application/json'
const SSE_TYPE = 'text/event-stream'

/** Media ranges of an `Accept` header, lower-cased, without parameters: those accepted (q > 0) and those refused (q=0). */
function rangesOf (accept: string): { accepted: Set<string>, refused: Set<string> } {
  const accepted = new Set<string>()
  const refused = new Set<string>()
  for (const part of accept.split(',')) {
    const [range, ...params] = part.split(';').map((s) => s.trim().toLowerCase())
    if (range === undefined || range === '') continue
    const q = params.find((p) => p.startsWith('q='))
    if (q !== undefined && !(Number(q.slice(2)) > 0)) refused.add(range)
    else accepted.add(range)
  }
  return { accepted, refused }
}

/**
 * What `Accept` takes (CAP.md §3): `own`, the capability's `delivery_mode`, unless `Accept` names
 * exactly one of `application/json` and `text/event-stream` (that one). Wildcards admit what they
 * cover, except a type the header refuses by name (`;q=0`, as the more specific range wins: RFC 9110
 * §12.5.1). Returns `undefined` when the client accepts neither (406).
 */
export function deliveryOf (accept: string | undefined): DeliveryMode | 'own' | undefined {
  if (accept === undefined || accept.trim() === '') return 'own'
  const { accepted, refused } = rangesOf(accept)
  const json = accepted.has(JSON_TYPE)
  const sse = accepted.has(SSE_TYPE)
  if (json !== sse) return json ? 'request_response' : 'server_sent_events'
  if (json && sse) return 'own'
  const jsonCovered = !refused.has(JSON_TYPE) && (accepted.has('*/*') || accepted.has('application/*'))
  const sseCovered = !refused.has(SSE_TYPE) && (accepted.has('*/*') || accepted.has('text/*'))
  if (jsonCovered && sseCovered) return 'own'
  if (jsonCovered) return 'request_response'
  return sseCovered ? 'server_sent_events' : undefined
}

/** The delivery mode `Accept` takes of a capability whose own is `preferred` ({@link deliveryOf}); `undefined`: neither (406). */
export function chooseDeliveryMode (accept: string | undefined, preferred: DeliveryMode): DeliveryMode | undefined {
  const taken = deliveryOf(accept)
  return taken === 'own' ? preferred : taken
}
