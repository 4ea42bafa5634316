// Module hooks that run the TypeScript sources under test (registered by ./typescript.mjs).
//
// Each file is transpiled by TypeScript's own transpileModule, as tap's default loader (ts-node)
// does, so the source maps that the coverage report reads are TypeScript's, line for line; but the
// output is kept in a disk cache keyed by the file's path and text, the compiler's version and these
// options. ts-node compiled every file again in every process (a test file, and each server and
// worker it starts), about 4 s of CPU for a process that loads the app; with the cache a process
// reads the output and never loads the compiler. tsx (esbuild) is as fast but its output, minified
// in whitespace, makes V8's coverage report every line covered (privatenumber/tsx#558).
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const require = createRequire(import.meta.url)
const VERSION = '2'
const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const CACHE = process.env.AGENT_HOST_TS_CACHE ?? join(ROOT, 'node_modules', '.cache', 'agent-host-ts')
const TS_VERSION = JSON.parse(readFileSync(require.resolve('typescript/package.json'), 'utf8')).version
const TSCONFIG = readFileSync(join(ROOT, 'tsconfig.json'), 'utf8')

let ts
let options

/** The compiler options of tsconfig.json that matter to one file's output, for ES modules. */
function compilerOptions () {
  if (options === undefined) {
    ts = require('typescript')
    const { config } = ts.parseConfigFileTextToJson('tsconfig.json', TSCONFIG)
    const { options: parsed } = ts.convertCompilerOptionsFromJson(config.compilerOptions, ROOT)
    options = {
      ...parsed,
      module: ts.ModuleKind.ESNext,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      sourceMap: false,
      inlineSourceMap: true,
      inlineSources: false,
      declaration: false,
      noEmit: false,
    }
    // the map names the source beside the module (with an outDir it would name it from dist/)
    delete options.outDir
    delete options.rootDir
  }
  return options
}

export function transpile (file, text) {
  const key = createHash('sha256').update(`${VERSION}\0${TS_VERSION}\0${TSCONFIG}\0${file}\0${text}`).digest('hex')
  const cached = join(CACHE, key.slice(0, 2), `${key}.js`)
  try {
    return readFileSync(cached, 'utf8')
  } catch {}
  const compile = compilerOptions()
  const output = ts.transpileModule(text, { fileName: file, compilerOptions: compile, reportDiagnostics: false }).outputText
  try {
    mkdirSync(dirname(cached), { recursive: true })
    // written whole under a name of its own, then renamed: a process reading the cache sees a file or none
    const partial = `${cached}.${process.pid}.tmp`
    writeFileSync(partial, output)
    renameSync(partial, cached)
  } catch {}
  return output
}

const TS = /\.(ts|mts)$/

/**
 * Packages made of hundreds of small ES modules, loaded from one bundle of each (esbuild, made once
 * into the cache): through these hooks every module costs a round trip to their thread, and
 * typebox's main entry alone is some 1 400 resolutions, 0.9 s of CPU for each process that imports
 * it where its bundle takes 35 ms (jose, the A2A SDK's, 150 ms against 15). Only the main entry is
 * bundled, the one this project imports; a subpath (`typebox/value`) loads as it is.
 */
export const BUNDLED = new Set(['typebox', 'jose'])

/** The file URL of `name`'s bundle made from its main entry `url`, or undefined (then the package loads as it is). */
export function bundle (name, url) {
  try {
    const entry = fileURLToPath(url)
    const root = entry.slice(0, entry.lastIndexOf(`/node_modules/${name}/`) + `/node_modules/${name}/`.length)
    const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
    const bundler = JSON.parse(readFileSync(require.resolve('esbuild/package.json'), 'utf8')).version
    const key = createHash('sha256').update(`${VERSION}\0${bundler}\0${entry}\0${version}`).digest('hex').slice(0, 16)
    const out = join(CACHE, 'bundles', `${name}-${version}-${key}.mjs`)
    if (!existsSync(out)) {
      mkdirSync(dirname(out), { recursive: true })
      const partial = `${out}.${process.pid}.tmp`
      require('esbuild').buildSync({ entryPoints: [entry], bundle: true, format: 'esm', platform: 'node', target: 'node20', outfile: partial, logLevel: 'silent' })
      renameSync(partial, out)
    }
    return pathToFileURL(out).href
  } catch {
    return undefined
  }
}

/**
 * `./x.js` names `./x.ts` when there is no `./x.js` (TypeScript's own rule), also as an absolute path
 * (an agent in a temporary folder importing the authoring API) or a file URL with a query (tap's
 * mocks import `file:///…/x.js?tapmock=…`).
 */
export async function resolve (specifier, context, nextResolve) {
  if (BUNDLED.has(specifier)) {
    const resolved = await nextResolve(specifier, context)
    const url = bundle(specifier, resolved.url)
    return url === undefined ? resolved : { ...resolved, url, shortCircuit: true }
  }
  try {
    return await nextResolve(specifier, context)
  } catch (err) {
    const JS = /\.(m?)js(?=[?#]|$)/
    if (err?.code === 'ERR_MODULE_NOT_FOUND' && /^(\.{0,2}\/|file:)/.test(specifier) && JS.test(specifier)) {
      return nextResolve(specifier.replace(JS, '.$1ts'), context)
    }
    throw err
  }
}

export async function load (url, context, nextLoad) {
  if (url.startsWith('file:') && TS.test(new URL(url).pathname)) {
    const file = fileURLToPath(url)
    return { format: 'module', source: transpile(file, readFileSync(file, 'utf8')), shortCircuit: true }
  }
  return nextLoad(url, context)
}
