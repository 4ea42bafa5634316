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
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { CACHE, resolveVendored } from '../../scripts/vendor-bundle.mjs'

const require = createRequire(import.meta.url)
const VERSION = '2'
const ROOT = fileURLToPath(new URL('../../', import.meta.url))
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
 * `./x.js` names `./x.ts` when there is no `./x.js` (TypeScript's own rule), also as an absolute path
 * (an agent in a temporary folder importing the authoring API) or a file URL with a query (tap's
 * mocks import `file:///…/x.js?tapmock=…`).
 */
export async function resolve (specifier, context, nextResolve) {
  const vendored = resolveVendored(specifier, context.parentURL)
  if (vendored !== undefined) return vendored
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
