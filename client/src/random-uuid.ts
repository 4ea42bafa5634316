/** What {@link randomUuid} needs of Web Crypto (`globalThis.crypto`). */
export interface RandomSource {
  getRandomValues: (array: Uint8Array) => Uint8Array
  /** Only in secure contexts (https, localhost) of browsers. */
  randomUUID?: () => string
}

/** 32 hex digits as a UUID string (8-4-4-4-12). */
export function uuidOf (hex: string): string {
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

/**
 * A random (version 4) UUID: `crypto.randomUUID()` where there is one, otherwise made from
 * `crypto.getRandomValues()`, which pages served over plain http on a LAN address still have.
 */
export function randomUuid (crypto: RandomSource = globalThis.crypto): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID()
  const hex = Array.from(crypto.getRandomValues(new Uint8Array(16)), (byte) => byte.toString(16).padStart(2, '0')).join('')
  const variant = ((parseInt(hex.charAt(16), 16) & 0x3) | 0x8).toString(16)
  return uuidOf(`${hex.slice(0, 12)}4${hex.slice(13, 16)}${variant}${hex.slice(17)}`)
}
