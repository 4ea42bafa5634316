import { createHash } from 'node:crypto'

/**
 * The key a run is stored under: the caller's request id, scoped to the principal that sent it, so
 * the same `request_id` from two principals is two runs and neither can learn that the other used
 * it. With auth off (one anonymous principal) it is the request id itself. A key is shaped as a UUID
 * (from a SHA-256 of the principal and the id) and never leaves the server: answers, events, audit rows
 * and session history carry the caller's own request id.
 */
export function runKey (owner: string, requestId: string): string {
  if (owner === 'anonymous') return requestId
  const hex = createHash('sha256').update(`${owner}\u0000${requestId}`).digest('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${(8 + (parseInt(hex[16] as string, 16) & 3)).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`
}
