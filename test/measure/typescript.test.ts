import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { Ajv } from 'ajv'
import fastify from 'fastify'
import fp from 'fastify-plugin'
import { Type } from 'typebox'
// @ts-expect-error the test loader's hooks are plain JavaScript, without types
import { resolve } from './typescript-hooks.mjs'
// @ts-expect-error plain JavaScript, without types
import { buildVendor } from '../../scripts/vendor-bundle.mjs'
import { tempDataDir } from '../helper.js'

// The test suite's TypeScript loader (typescript-hooks.mjs) loads the packages the project imports
// from one esbuild build (scripts/vendor-bundle.mjs): what this process imports is that build, its
// entries give what Node.js gives (a CommonJS package's names, its module.exports as the default),
// and a package's own imports, or a package left out, load as they are.

const VENDOR = /\/node_modules\/\.cache\/agent-host-ts\/vendor\/[0-9a-f]{16}\//

t.test('the project\'s packages resolve to the build\'s entries, all from one build', async (t) => {
  for (const name of ['fastify', 'typebox', 'jose', 'ajv', '@a2a-js/sdk/server']) t.match(import.meta.resolve(name), VENDOR, name)
  const builds = new Set(['fastify', 'typebox'].map((name) => VENDOR.exec(import.meta.resolve(name))?.[0]))
  t.equal(builds.size, 1)
})

t.test('left out, loaded as they are: a native addon, pino (its transports start workers from its folder)', async (t) => {
  t.match(import.meta.resolve('better-sqlite3'), /\/node_modules\/better-sqlite3\//)
  t.match(import.meta.resolve('pino'), /\/node_modules\/pino\//)
})

t.test('an entry is the package as Node.js imports it: named exports of CommonJS, module.exports as the default', async (t) => {
  t.match(Type.Object({ a: Type.String() }), { type: 'object', required: ['a'], properties: { a: { type: 'string' } } }, 'an ES module package')
  t.ok(new Ajv().compile({ type: 'string' })('x'), 'a CommonJS package\'s named export')
  t.type(fp, 'function')
  const app = fastify()
  await app.register(fp(async (instance) => { instance.decorate('seen', true) }))
  app.get('/', async () => ({ ok: true }))
  t.same((await app.inject('/')).json(), { ok: true }, 'a server built from the entries answers')
  t.ok((app as unknown as { seen: boolean }).seen, 'a plugin made with the build\'s fastify-plugin is not encapsulated by its fastify')
  await app.close()
})

t.test('a package\'s own import of a package is its own: only the project\'s files are redirected', async (t) => {
  const asked: string[] = []
  const next = async (specifier: string): Promise<{ url: string }> => { asked.push(specifier); return { url: `file:///node_modules/${specifier}/index.js` } }
  const fromPackage = await resolve('fastify', { parentURL: new URL('../../node_modules/@fastify/cors/index.js', import.meta.url).href }, next) as { url: string }
  t.equal(fromPackage.url, 'file:///node_modules/fastify/index.js')
  const fromProject = await resolve('fastify', { parentURL: import.meta.url }, next) as { url: string }
  t.match(fromProject.url, VENDOR)
  t.same(asked, ['fastify'])
})

t.test('the build, made from nothing: an entry per package that imports, one that does not left out; a second maker keeps the first\'s', async (t) => {
  const dir = join(tempDataDir(t), 'build')
  await buildVendor(dir, ['fastify-plugin', 'typebox', 'jose', 'no-such-package'])
  t.same(JSON.parse(readFileSync(join(dir, 'entries.json'), 'utf8')), ['fastify-plugin', 'typebox', 'jose'])
  const jose = await import(pathToFileURL(join(dir, 'jose.mjs')).href) as Record<string, unknown>
  t.notOk('default' in jose, 'no default where the package has none, as Node.js gives it')
  t.type(jose.SignJWT, 'function')
  const { default: plugin } = await import(pathToFileURL(join(dir, 'fastify-plugin.mjs')).href) as { default: unknown }
  t.type(plugin, 'function', 'a CommonJS package\'s module.exports is the entry\'s default')
  const { Type: built } = await import(pathToFileURL(join(dir, 'typebox.mjs')).href) as { Type: typeof Type }
  t.match(built.String(), { type: 'string' }, 'an ES module package\'s names')
  const first = readFileSync(join(dir, 'typebox.mjs'), 'utf8')
  await buildVendor(dir, ['typebox'])
  t.same(JSON.parse(readFileSync(join(dir, 'entries.json'), 'utf8')), ['fastify-plugin', 'typebox', 'jose'], 'the first build stays')
  t.equal(readFileSync(join(dir, 'typebox.mjs'), 'utf8'), first)
  t.same(readdirSync(dirname(dir)).filter((name) => name.endsWith('.tmp')), [], 'the second one is thrown away')
})
