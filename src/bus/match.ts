import picomatch from 'picomatch'
import { isDeepStrictEqual } from 'node:util'

type Json = Record<string, unknown>

const compiled = new Map<string, (type: string) => boolean>()

/**
 * A matcher of dotted event types for glob `patterns` (any of them): a segment is what lies between
 * dots, `*` matches one segment (`code.*` matches `code.changed`, not `code.patch.ready`), `**` any
 * number (`code.**`), `{a,b}` either, `!` at the start negates. picomatch does the globbing, with the
 * dots read as its path separators.
 */
export function typeMatcher (patterns: readonly string[]): (type: string) => boolean {
  const cacheKey = JSON.stringify(patterns)
  let matcher = compiled.get(cacheKey)
  if (matcher === undefined) {
    const globs = patterns.map((p) => picomatch(p.replaceAll('.', '/'), { dot: true }))
    matcher = (type) => {
      const path = type.replaceAll('.', '/')
      return globs.some((glob) => glob(path))
    }
    compiled.set(cacheKey, matcher)
  }
  return matcher
}

/** The value at a dotted path of `data` (`details.repo`), or undefined. */
function at (data: unknown, path: string): unknown {
  let value = data
  for (const part of path.split('.')) {
    if (typeof value !== 'object' || value === null) return undefined
    value = (value as Json)[part]
  }
  return value
}

/**
 * Whether `data` passes `filter`: every entry is a dotted path and the value it must have; an array
 * value means any of its items (and matches an array holding one of them), anything else must be equal.
 */
export function filterMatches (filter: Json | null | undefined, data: unknown): boolean {
  if (filter === null || filter === undefined) return true
  return Object.entries(filter).every(([path, wanted]) => {
    const value = at(data, path)
    const options = Array.isArray(wanted) ? wanted : [wanted]
    const values = Array.isArray(value) ? [value, ...value] : [value]
    return options.some((option) => values.some((v) => isDeepStrictEqual(v, option)))
  })
}
