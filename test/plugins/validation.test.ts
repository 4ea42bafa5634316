import t from 'tap'
import type { ValidateFunction } from 'ajv'
import { buildApp } from '../../src/app.js'
import { compilePendingSerializers } from '../../src/http/serializers.js'
import { compilePendingValidators, lazily } from '../../src/plugins/validation.js'
import { AGENTS, envelope, testConfig } from '../helper.js'

// Route validators and response serializers are compiled when a route is first called, not at boot
// (a fifth of every process's boot CPU): these tests are what a schema Ajv or fast-json-stringify
// refuses now fails, instead of the boot.

t.test('every route\'s validators and response serializers compile', async (t) => {
  const app = await buildApp(testConfig(t))
  t.teardown(() => app.close())
  await app.ready()
  // in a group of test files, other apps in this process may have compiled some already
  const validators = compilePendingValidators()
  const serializers = compilePendingSerializers()
  t.comment(`compiled ${validators} validators and ${serializers} serializers left uncalled`)
  t.equal(compilePendingValidators(), 0, 'nothing is left')
  t.equal(compilePendingSerializers(), 0)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: { ...envelope(AGENTS.echo), request_id: 42 } })
  t.equal(res.statusCode, 400, 'and they validate as before')
  t.match(res.json(), { code: 'AH_ERR_VALIDATION', message: /request_id/ })
})

t.test('a lazy validator compiles on its first call, once, and reports that call\'s errors', async (t) => {
  let compiles = 0
  const inner = ((data: unknown) => {
    const valid = typeof data === 'number'
    inner.errors = valid ? null : [{ instancePath: '', schemaPath: '#/type', keyword: 'type', params: { type: 'number' }, message: `not a number: ${String(data)}` }]
    return valid
  }) as ValidateFunction
  const validate = lazily(() => { compiles++; return inner })
  t.equal(compiles, 0, 'not at creation')
  t.equal(validate('a'), false)
  t.match(validate.errors, [{ message: 'not a number: a' }])
  t.equal(validate(1), true)
  t.equal(validate.errors, null)
  t.equal(compiles, 1, 'once')
  t.equal(compilePendingValidators(), 0, 'a called validator is not pending')
  lazily(() => { compiles++; return inner })
  t.equal(compilePendingValidators(), 1)
  t.equal(compiles, 2)
})
