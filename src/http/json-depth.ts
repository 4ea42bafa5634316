/**
 * Whether JSON text nests arrays and objects deeper than `max`, found in one pass with a counter
 * (no recursion, so a hostile body cannot overflow the stack here). Brackets inside strings do not
 * count; the text need not be valid JSON (the parser judges that afterwards).
 */
export function jsonDepthExceeds (text: string, max: number): boolean {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // a backslash escapes the next character
      else if (c === 0x22) inString = false
    } else if (c === 0x22) {
      inString = true
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true
    } else if (c === 0x5d || c === 0x7d) {
      depth--
    }
  }
  return false
}
