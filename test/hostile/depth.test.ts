import t from 'tap'
import { jsonDepthExceeds } from '../../src/http/json-depth.js'
import { AGENTS, build, envelope } from '../helper.js'
import { checkErrorBody } from '../sse.js'

const deepArrays = (n: number): string => '['.repeat(n) + ']'.repeat(n)
/** An envelope whose agent payload carries `raw` (JSON text) under `extra`. */
const withRaw = (raw: string): string => JSON.stringify(envelope(AGENTS.echo, { query: 'x', extra: '@@' })).replace('"@@"', raw)

// Regression: arrays nested 10 000 deep (20 KB) inside an envelope overflowed the stack in the
// envelope's canonical hashing and answered 500 AH_ERR_INTERNAL.
t.test('arrays nested 10 000 deep inside a valid envelope: 400 AH_ERR_BODY_MALFORMED naming the limit, at /v1/assist and /v1/tasks', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: withRaw(deepArrays(10_000)) })
  t.equal(res.statusCode, 400)
  const body = checkErrorBody(res.json())
  t.equal(body.code, 'AH_ERR_BODY_MALFORMED')
  t.match(body.message, /deeper than 64 levels/)
  const tasks = await app.inject({ method: 'POST', url: '/v1/tasks', headers: { 'content-type': 'application/json' }, payload: `{"tasks":[{"id":"a","type":"x","inputs":{"deep":${deepArrays(10_000)}}}]}` })
  t.equal(tasks.statusCode, 400)
  t.equal(checkErrorBody(tasks.json()).code, 'AH_ERR_BODY_MALFORMED')
  const objects = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: withRaw('{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000)) })
  t.equal(checkErrorBody(objects.json()).code, 'AH_ERR_BODY_MALFORMED', 'deep objects too')
})

t.test('a body nested exactly to the limit is parsed; brackets inside strings do not count', async (t) => {
  const app = await build(t, { MAX_BODY_DEPTH: '10' })
  // the envelope itself is 3 deep (body, payload, payload.payload): the extra value may add 7 more
  const atLimit = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: withRaw(deepArrays(7)) })
  t.equal(atLimit.statusCode, 200, 'ten levels pass with MAX_BODY_DEPTH=10')
  const over = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: withRaw(deepArrays(8)) })
  t.equal(checkErrorBody(over.json()).code, 'AH_ERR_BODY_MALFORMED', 'eleven do not')
  t.match(over.json().message, /deeper than 10 levels/)
  const strings = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: withRaw(JSON.stringify('[[[[[[[[[[[[{{{{{{{{ "\\" [[[[[[[[[[[[')) })
  t.equal(strings.statusCode, 200, 'brackets and escaped quotes inside strings are text')
  const broken = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: '{"request_id": ' })
  t.equal(checkErrorBody(broken.json()).code, 'AH_ERR_BODY_MALFORMED', 'invalid JSON is still refused by the parser')
  const proto = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'content-type': 'application/json' }, payload: '{"__proto__": {"x": 1}}' })
  t.equal(checkErrorBody(proto.json()).code, 'AH_ERR_BODY_MALFORMED', 'prototype poisoning is still refused')
})

t.test('jsonDepthExceeds counts nesting in one pass, outside strings only', async (t) => {
  t.notOk(jsonDepthExceeds('{"a":[1,[2]]}', 3))
  t.ok(jsonDepthExceeds('{"a":[1,[2]]}', 2))
  t.notOk(jsonDepthExceeds('"[[[[[[[["', 1))
  t.notOk(jsonDepthExceeds('["\\"[[[["]', 1), 'an escaped quote does not end the string')
  t.notOk(jsonDepthExceeds('["\\\\"]', 1), 'an escaped backslash does not escape the closing quote')
  t.ok(jsonDepthExceeds(deepArrays(1_000_000), 64), 'a million levels, no stack overflow')
  t.notOk(jsonDepthExceeds('', 1))
})
