import { createHash } from 'node:crypto'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Whether `id` is a UUID (the shape CAP's ids have). */
export function isUuid (id: string): boolean {
  return UUID.test(id)
}

/**
 * Another protocol's own id (an A2A message, an AI SDK chat or message, an AG-UI thread or run) as
 * the UUID CAP needs: the id itself when it is a UUID (lower-cased), else a UUID made from `kind` and
 * the id (a SHA-256, shaped as a version-5 UUID), the same every time, so that a message sent again
 * with the same id is the same run and a chat's id is always the same session.
 */
export function uuidOf (kind: string, id: string): string {
  if (isUuid(id)) return id.toLowerCase()
  const hex = createHash('sha256').update(`${kind}\u0000${id}`).digest('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-5${hex.slice(13, 16)}-${(8 + (parseInt(hex[16] as string, 16) & 3)).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`
}
