// a lone surrogate (a half of a pair: the u flag reads a whole pair as one code point) or NUL
const UNSTORABLE = /[\p{Cs}\0]/gu
// how JSON.stringify writes a lone surrogate or NUL inside a string (it writes whole pairs as they are)
const UNSTORABLE_ESCAPE = /\\u(?:d[89a-f]|0000)/

/**
 * `text` as an audit row holds it: a lone UTF-16 surrogate, which no database stores (SQLite and
 * PostgreSQL write U+FFFD in its place), and NUL, which PostgreSQL text cannot hold, become U+FFFD.
 * What is hashed is then what every driver stores and reads back.
 */
export function auditText (text: string): string {
  return text.replace(UNSTORABLE, '\ufffd')
}

/**
 * `text` cut to at most `max` UTF-16 code units, never between the two halves of a surrogate pair:
 * a pair the limit would split is left out whole.
 */
export function cutText (text: string, max: number): string {
  if (text.length <= max) return text
  const last = text.charCodeAt(max - 1)
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max)
}

function wellFormed (value: unknown): unknown {
  if (typeof value === 'string') return auditText(value)
  if (Array.isArray(value)) return value.map(wellFormed)
  if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).map(([key, v]) => [auditText(key), wellFormed(v)]))
  return value
}

/**
 * `details` as an audit row holds them: the JSON data they stand for (as `JSON.stringify` writes
 * them, so what is hashed is what is read back), every string in them, keys included, through
 * {@link auditText}.
 */
export function auditDetails (details: Record<string, unknown>): Record<string, unknown> {
  const text = JSON.stringify(details)
  const data = JSON.parse(text) as Record<string, unknown>
  return UNSTORABLE_ESCAPE.test(text) ? wellFormed(data) as Record<string, unknown> : data
}
