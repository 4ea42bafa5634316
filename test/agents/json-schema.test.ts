import t from 'tap'
import { Ajv } from 'ajv'
import { lazySchema, toIssues } from '../../src/agents/json-schema.js'

t.test('lazySchema compiles on the first call, with the instance it is given, and reports each call\'s errors', async (t) => {
  let made = 0
  const check = lazySchema<{ n: number }>({ type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }, () => { made++; return new Ajv() })
  t.equal(made, 0, 'nothing compiled when the module loads')
  t.equal(check({ n: 'x' }), false)
  t.same(toIssues(check.errors), [{ path: '/n', message: 'must be integer' }])
  t.equal(check({ n: 1 }), true)
  t.equal(check.errors, null, 'a valid value clears the last errors')
  t.equal(check({}), false)
  t.same(toIssues(check.errors), [{ path: '/n', message: 'must have required property \'n\'' }])
  t.equal(made, 1, 'compiled once')
})

t.test('an invalid schema throws at its first call, not at load', async (t) => {
  const broken = lazySchema({ type: 'no-such-type' })
  t.throws(() => broken({}), /type must be JSON type|schema is invalid/)
})

t.test('allowed values are named: a const, an enum, and a choice (anyOf, oneOf) of consts as one "must be one of" line', async (t) => {
  const mode = { anyOf: [{ type: 'string', const: 'request_response' }, { type: 'string', const: 'server_sent_events' }] }
  const check = lazySchema({
    type: 'object',
    properties: { mode, level: { enum: ['low', 'high'] }, version: { const: 1 }, kind: { oneOf: [{ const: 'a' }, { enum: ['b', 'c'] }] }, modes: { type: 'array', items: mode } }
  })
  t.equal(check({ mode: 'json', level: 'mid', version: 2, kind: 'z', modes: ['request_response', 7] }), false)
  t.same(toIssues(check.errors, 'manifest'), [
    { path: 'manifest/mode', message: 'must be one of "request_response", "server_sent_events"' },
    { path: 'manifest/level', message: 'must be one of "low", "high"' },
    { path: 'manifest/version', message: 'must be 1' },
    { path: 'manifest/kind', message: 'must be one of "a", "b", "c"' },
    { path: 'manifest/modes/1', message: 'must be one of "request_response", "server_sent_events"' }
  ], 'one line per place, each naming the values it may take')
})

t.test('a choice between shapes keeps its branches\' reasons: only a choice of values collapses', async (t) => {
  const check = lazySchema({ anyOf: [{ type: 'object', required: ['a'] }, { const: 'none' }] })
  t.equal(check({ b: 1 }), false)
  t.same(toIssues(check.errors), [
    { path: '/a', message: 'must have required property \'a\'' },
    { path: '/', message: 'must be "none"' },
    { path: '/', message: 'must match a schema in anyOf' }
  ])
})
