import t from 'tap'
import fc from 'fast-check'
import canonicalize from 'canonicalize'
import { canonicalJson } from '../../src/storage/canonical-json.js'

/** Whether a string is well-formed UTF-16 (RFC 8785 is defined for those only). */
const wellFormed = (s: string): boolean => !/[\ud800-\udfff]/.test(s.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ''))

t.test('canonicalJson gives byte for byte what the RFC 8785 reference (canonicalize) gives, for any JSON value', async (t) => {
  const key = fc.oneof(fc.string(), fc.string({ unit: 'grapheme' }), fc.constantFrom('__proto__', 'constructor', '', 'a', 'B', 'é', '😀', 'ﬀ'))
  const text = fc.oneof(fc.string({ unit: 'binary' }).filter(wellFormed), fc.string({ unit: 'grapheme' }), fc.constantFrom('\u2028', '"\\\n', '\u007f', '\u0000'))
  const number = fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom(-0, 1e21, 1e-7, 5e-324, Number.MAX_SAFE_INTEGER + 2))
  const { value } = fc.letrec((tie) => ({
    value: fc.oneof({ depthSize: 'small' }, fc.constant(null), fc.boolean(), number, text, fc.array(tie('value')), fc.dictionary(key, tie('value')))
  }))
  fc.assert(fc.property(value, (v) => canonicalJson(v) === canonicalize(v)), { numRuns: 2000 })
  t.pass('2 000 random values agree')
})

t.test('a lone surrogate (valid JSON, not valid Unicode) is escaped as JSON.stringify escapes it, where the reference throws', async (t) => {
  t.equal(canonicalJson({ b: '\ud83d', a: 'x\udc00' }), '{"a":"x\\udc00","b":"\\ud83d"}')
  t.throws(() => canonicalize('\ud83d'))
})

t.test('key order does not matter; values JSON cannot hold are refused', async (t) => {
  t.equal(canonicalJson({ b: 1, a: [{ d: 2, c: 3 }] }), '{"a":[{"c":3,"d":2}],"b":1}')
  t.equal(canonicalJson({ b: 1, a: 2 }), canonicalJson({ a: 2, b: 1 }))
  t.throws(() => canonicalJson({ a: Number.NaN }))
  t.throws(() => canonicalJson({ f: () => 1 }))
  const cycle: Record<string, unknown> = {}
  cycle.self = cycle
  t.throws(() => canonicalJson(cycle))
})
