// The packages this project imports, loaded from one esbuild build instead of their hundreds of
// files: a process that imports the app opened some 640 files of node_modules, and through the test
// loader's module hooks each ES module costs a round trip to the hooks' thread. Used by the test
// loader (test/measure/typescript-hooks.mjs) and by `npm run dev` (./dev-bundles.mjs); never by
// `npm start`, which runs the built dist/ on plain Node.js.
//
// One build with code splitting, so a package two entries share (ajv under fastify and under ours,
// the OpenTelemetry API) is one copy, as in node_modules. Each entry re-exports its package's names
// as Node.js sees them (a CommonJS package's names as cjs-module-lexer finds them, its
// module.exports as the default), read by importing the package once when the build is made. The
// build is made once for a package-lock.json, into the loader's cache; a package that cannot be
// built or imported here loads as it is.
import { spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const require = createRequire(import.meta.url)
const VERSION = '2'
const ROOT = fileURLToPath(new URL('../', import.meta.url))
export const CACHE = process.env.AGENT_HOST_TS_CACHE ?? join(ROOT, 'node_modules', '.cache', 'agent-host-ts')

/**
 * The bare specifiers this project imports (src/, agents/, test/, bench/) that are loaded from the
 * build. Left out, and so loaded as they are: better-sqlite3 (a native addon), pino and pino-pretty
 * (a transport starts a worker from a file beside pino's), @fastify/swagger-ui (serves files beside
 * its own), the tools (tap, typescript, eslint, tsx, playwright-core, autocannon: workers, or files
 * read from their folders), the OpenTelemetry exporter and SDK (loaded only when tracing is on),
 * and eventsource-parser, whose file the playground serves to browsers (found by import.meta.resolve,
 * which these hooks answer too).
 */
export const VENDORED = [
  'fastify', 'fastify-plugin', 'typebox', 'jose', 'pg', 'ajv', 'ajv-formats', 'env-schema', 'semver', 'prom-client',
  'picomatch', 'proper-lockfile', 'which', 'safe-stable-stringify', 'ipaddr.js', 'diff',
  'close-with-grace', 'canonicalize', 'yaml', 'fast-check',
  '@fastify/type-provider-typebox', '@fastify/rate-limit', '@fastify/jwt', '@fastify/under-pressure', '@fastify/swagger',
  '@fastify/static', '@fastify/fast-json-stringify-compiler', '@fastify/error', '@fastify/cors',
  '@opentelemetry/api', '@opentelemetry/semantic-conventions',
  '@a2a-js/sdk', '@a2a-js/sdk/server', '@a2a-js/sdk/errors', '@a2a-js/sdk/client',
  '@modelcontextprotocol/sdk/types.js', '@modelcontextprotocol/sdk/client/index.js', '@modelcontextprotocol/sdk/server/index.js',
  '@modelcontextprotocol/sdk/client/streamableHttp.js', '@modelcontextprotocol/sdk/server/streamableHttp.js',
  '@modelcontextprotocol/sdk/client/stdio.js', '@modelcontextprotocol/sdk/server/stdio.js', '@modelcontextprotocol/sdk/shared/transport.js',
  'openai', '@anthropic-ai/sdk'
]

const EXTERNAL = ['better-sqlite3', 'pino', 'pino-pretty', 'thread-stream', '@fastify/swagger-ui']
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/
const RESERVED = new Set(['default', 'await', 'break', 'case', 'catch', 'class', 'const', 'continue', 'debugger', 'delete', 'do', 'else', 'enum', 'export', 'extends', 'false', 'finally', 'for', 'function', 'if', 'import', 'in', 'instanceof', 'new', 'null', 'return', 'super', 'switch', 'this', 'throw', 'true', 'try', 'typeof', 'var', 'void', 'while', 'with', 'yield', 'let', 'static', 'implements', 'interface', 'package', 'private', 'protected', 'public', 'arguments', 'eval'])

let built

/** The file name of `specifier`'s entry in the build. */
function entryName (specifier) {
  return specifier.replace(/[^\w.-]/g, '_').replace(/\.js$/, '') + '.mjs'
}

/**
 * The build: each vendored specifier's entry file URL, made now if this package-lock.json has none.
 * @returns a map from specifier to file URL (empty when esbuild is missing: everything loads as it is)
 */
export function vendorEntries () {
  built ??= make()
  return built
}

function make () {
  try {
    const bundler = JSON.parse(readFileSync(require.resolve('esbuild/package.json'), 'utf8')).version
    const lock = readFileSync(join(ROOT, 'package-lock.json'), 'utf8')
    const key = createHash('sha256').update(`${VERSION}\0${bundler}\0${ROOT}\0${VENDORED.join(',')}\0${lock}`).digest('hex').slice(0, 16)
    const dir = join(CACHE, 'vendor', key)
    const index = join(dir, 'entries.json')
    // made by a process of its own: importing every package to read its names is no work for the
    // module hooks' thread (which this runs in under the test loader)
    if (!existsSync(index)) {
      const { NODE_OPTIONS: _options, ...env } = process.env
      spawnSync(process.execPath, [fileURLToPath(import.meta.url), dir], { env, stdio: 'ignore' })
    }
    const names = JSON.parse(readFileSync(index, 'utf8'))
    return new Map(names.map((specifier) => [specifier, pathToFileURL(join(dir, entryName(specifier))).href]))
  } catch {
    return new Map()
  }
}

/**
 * Make the build of `specifiers` in `dir` (the process that makes it imports each of them once, to
 * read its names): an entry for each that imports, and `entries.json` naming them. Made beside `dir`
 * and renamed into place, so a reader finds the whole build or none; when another process made it
 * first, this one's is thrown away.
 */
export async function buildVendor (dir, specifiers = VENDORED) {
  const partial = `${dir}.${process.pid}.tmp`
  const sources = join(partial, 'src')
  mkdirSync(sources, { recursive: true })
  const entries = {}
  for (const specifier of specifiers) {
    let namespace
    try {
      namespace = await import(specifier)
    } catch {
      continue
    }
    const names = Object.keys(namespace).filter((name) => IDENTIFIER.test(name) && !RESERVED.has(name))
    const file = join(sources, entryName(specifier))
    // a default only where Node.js gives one: `import x from` a package without one must fail here too
    writeFileSync(file, [
      `import * as namespace from ${JSON.stringify(specifier)}`,
      'default' in namespace ? 'export default namespace.default' : '',
      names.length === 0 ? '' : `export const { ${names.join(', ')} } = namespace`
    ].join('\n'))
    entries[entryName(specifier).replace(/\.mjs$/, '')] = file
  }
  const esbuild = require('esbuild')
  try {
    await esbuild.build({
      entryPoints: entries,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      outdir: partial,
      outExtension: { '.js': '.mjs' },
      external: EXTERNAL,
      nodePaths: [join(ROOT, 'node_modules')],
      logLevel: 'silent',
      // CommonJS code's require() of Node.js's modules and of the packages left out, from the project's root
      banner: { js: `import { createRequire as __vendorRequire } from 'node:module'; const require = __vendorRequire(${JSON.stringify(join(ROOT, 'package.json'))});` }
    })
  } catch (err) {
    rmSync(partial, { recursive: true, force: true })
    throw err
  }
  rmSync(sources, { recursive: true, force: true })
  writeFileSync(join(partial, 'entries.json'), JSON.stringify(Object.keys(entries).map((name) => specifiers.find((s) => entryName(s) === `${name}.mjs`))))
  try {
    renameSync(partial, dir)
  } catch {
    // another process made it first
    rmSync(partial, { recursive: true, force: true })
  }
}

/** Whether `parentURL` is one of this project's files (not a package's, whose imports stay its own). */
function fromProject (parentURL) {
  return parentURL !== undefined && parentURL.startsWith(pathToFileURL(ROOT).href) && !parentURL.includes('/node_modules/')
}

/**
 * A module hook's answer for `specifier` imported from `parentURL`: its entry in the build when the
 * importer is one of the project's files and the package is in the build, else undefined (resolve
 * it as usual). Shared by the test loader's hooks and `npm run dev`'s.
 */
export function resolveVendored (specifier, parentURL) {
  if (!fromProject(parentURL)) return undefined
  const url = vendorEntries().get(specifier)
  return url === undefined ? undefined : { url, format: 'module', shortCircuit: true }
}

if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv[2] !== undefined) await buildVendor(process.argv[2])
