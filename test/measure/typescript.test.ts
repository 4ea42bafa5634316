import t from 'tap'
import { Type } from 'typebox'
// @ts-expect-error the test loader's hooks are plain JavaScript, without types
import { bundle } from './typescript-hooks.mjs'

// The test suite's TypeScript loader (typescript-hooks.mjs) loads typebox and jose from one bundle of
// each: what this process imports is that bundle, it works, and a subpath loads as it is.

t.test('typebox and jose resolve to their bundles in the cache; a subpath does not', async (t) => {
  t.match(import.meta.resolve('typebox'), /\/node_modules\/\.cache\/agent-host-ts\/bundles\/typebox-[\d.]+-[0-9a-f]{16}\.mjs$/)
  t.match(import.meta.resolve('jose'), /\/bundles\/jose-[\d.]+-[0-9a-f]{16}\.mjs$/)
  t.match(import.meta.resolve('typebox/value'), /\/node_modules\/typebox\/build\/value\//)
  t.match(Type.Object({ a: Type.String() }), { type: 'object', required: ['a'], properties: { a: { type: 'string' } } }, 'the bundle builds schemas')
})

t.test('a package that cannot be bundled loads as it is', async (t) => {
  t.equal(bundle('typebox', 'file:///nowhere/node_modules/typebox/build/index.mjs'), undefined)
})
