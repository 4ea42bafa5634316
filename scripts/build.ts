/**
 * The build (`npm run build`, and `npm start` before it starts): the server with its agents
 * (tsconfig.build.json → dist/) and the client (client/tsconfig.json → client/dist/), each with
 * `tsc -b`, which keeps what it compiled in a build-info file inside the output folder: on a tree
 * that has not changed since the last build it compiles nothing (about a second), and a changed
 * file is compiled again with what depends on it. TypeScript never deletes an output whose source
 * is gone, so then every compiled file without its source is removed: a deleted or renamed agent
 * leaves nothing behind for the loader to find (deleting the output folder to get this made every
 * start a full build of a minute or more). Then the playground's chat page (`playground/chat/main.jsx`:
 * React and the AI SDK's `useChat`, which a browser cannot load file by file) is bundled with esbuild
 * into one minified ES module, `dist/playground/chat.js`, with its source map.
 *
 *     npm run build
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, rmdirSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

/** Where each source folder's compiled files go: [source, output], relative to the project. */
export const OUTPUTS: ReadonlyArray<readonly [string, string]> = [
  ['src', 'dist/src'],
  ['agents', 'dist/agents'],
  ['client/src', 'client/dist']
]

const OUTPUT_SUFFIX = /(\.d\.[cm]?ts\.map|\.d\.[cm]?ts|\.[cm]?js\.map|\.[cm]?js)$/
const SOURCE_EXTENSIONS = ['.ts', '.tsx', '.mts', '.cts', '.js', '.jsx', '.mjs', '.cjs']

/** The source files a compiled file may come from (`a/b.js`, `a/b.d.ts`, `a/b.js.map` ← `a/b.ts` or `a/b.js`; `a/c.json` ← `a/c.json`). */
export function sourcesOf (output: string): string[] {
  const stem = output.replace(OUTPUT_SUFFIX, '')
  return stem === output ? [output] : SOURCE_EXTENSIONS.map((extension) => stem + extension)
}

/**
 * Remove every file under `outDir` whose source under `sourceDir` is gone, and the folders left
 * empty (build-info files, which start with a dot, stay). Returns the removed files, relative to `outDir`.
 */
export function pruneOutputs (sourceDir: string, outDir: string): string[] {
  if (!existsSync(outDir)) return []
  const removed: string[] = []
  const walk = (dir: string): boolean => {
    let empty = true
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name)
      const rel = relative(outDir, path)
      if (entry.isDirectory()) {
        if (walk(path)) rmdirSync(path)
        else empty = false
      } else if (dir === outDir && entry.name.startsWith('.')) {
        empty = false
      } else if (sourcesOf(rel).some((source) => existsSync(join(sourceDir, source)))) {
        empty = false
      } else {
        rmSync(path)
        removed.push(rel)
      }
    }
    return empty
  }
  walk(outDir)
  return removed
}

/** Where the chat page's bundle goes, relative to the project (the playground route serves it). */
export const CHAT_BUNDLE = 'dist/playground/chat.js'

/**
 * Bundle the playground's chat page (`playground/chat/main.jsx`) into {@link CHAT_BUNDLE} under
 * `root`: one minified ES module with a source map, for the browsers the AI SDK supports. `ai` is
 * the copy `@ai-sdk/react` imports (it pins its own), so the bundle holds one, not two.
 */
export async function bundleChatPage (root: string): Promise<void> {
  const ai = dirname(createRequire(createRequire(join(root, 'package.json')).resolve('@ai-sdk/react')).resolve('ai/package.json'))
  await build({
    entryPoints: [join(root, 'playground', 'chat', 'main.jsx')],
    outfile: join(root, CHAT_BUNDLE),
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    jsx: 'automatic',
    minify: true,
    sourcemap: true,
    alias: { ai },
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'warning'
  })
}

async function main (): Promise<void> {
  const root = fileURLToPath(new URL('..', import.meta.url))
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
  const built = spawnSync(process.execPath, [tsc, '-b', 'tsconfig.build.json', 'client/tsconfig.json', ...process.argv.slice(2)], { cwd: root, stdio: 'inherit' })
  if (built.status !== 0) process.exit(built.status ?? 1)
  for (const [source, output] of OUTPUTS) {
    for (const file of pruneOutputs(join(root, source), join(root, output))) console.log(`removed ${join(output, file)}: its source is gone`)
  }
  await bundleChatPage(root)
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) await main()
