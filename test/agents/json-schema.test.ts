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
