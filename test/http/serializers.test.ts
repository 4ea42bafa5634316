import t from 'tap'
import Fastify from 'fastify'
import { buildSerializer, compilePendingSerializers } from '../../src/http/serializers.js'

const route = { method: 'GET', url: '/x', httpStatus: '200' }
const schema = { type: 'object', properties: { id: { type: 'string' }, n: { type: 'integer' } } }

t.test('a schema is compiled once for the process: a second app gets the same serializer', async (t) => {
  const first = buildSerializer({}, {})({ ...route, schema })
  const second = buildSerializer(undefined, undefined)({ ...route, url: '/y', schema })
  t.equal(second, first, 'the same function')
  t.equal(first({ id: 'a', n: 2, secret: 'dropped' }), '{"id":"a","n":2}', 'it serializes as fast-json-stringify does: unknown keys dropped')
  t.not(buildSerializer({}, {})({ ...route, schema: { ...schema } }), first, 'another schema object is compiled on its own')
})

t.test('shared schemas or serializer options make the same schema serialize otherwise: nothing is kept then', async (t) => {
  const shared = { 'thing.json': { $id: 'thing.json', type: 'object', properties: { id: { type: 'string' } } } }
  const one = buildSerializer(shared, {})({ ...route, schema })
  t.not(buildSerializer(shared, {})({ ...route, schema }), one)
  const rounded = { type: 'integer' }
  const floor = buildSerializer({}, { rounding: 'floor' })({ ...route, schema: rounded })
  const ceil = buildSerializer({}, { rounding: 'ceil' })({ ...route, schema: rounded })
  t.equal(floor(1.5), '1')
  t.equal(ceil(1.5), '2')
})

t.test('Fastify serializes responses with it', async (t) => {
  const apps = [0, 1].map(() => Fastify({ schemaController: { compilersFactory: { buildSerializer } } }))
  for (const app of apps) {
    t.teardown(async () => { await app.close() })
    app.get('/x', { schema: { response: { 200: schema } } }, async () => ({ id: 'a', n: 1, secret: 's' }))
  }
  for (const app of apps) {
    const res = await app.inject('/x')
    t.equal(res.body, '{"id":"a","n":1}')
  }
})

t.test('a serializer is compiled when it is first used, not when its route is added', async (t) => {
  compilePendingSerializers()
  const serialize = buildSerializer({}, {})({ ...route, schema: { type: 'object', properties: { late: { type: 'boolean' } } } })
  t.equal(compilePendingSerializers(), 1, 'pending until then')
  t.equal(serialize({ late: true, other: 1 }), '{"late":true}')
  const unused = buildSerializer({}, {})({ ...route, schema: { type: 'object', properties: { used: { type: 'boolean' } } } })
  t.equal(unused({ used: false }), '{"used":false}')
  t.equal(compilePendingSerializers(), 0, 'a used one is not pending')
})
