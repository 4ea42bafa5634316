// The README's two React chat examples ("A chat front end in React"), run as written: each block
// (only the port changed) bundled with esbuild into a page that renders its <Chat />, served from
// another loopback origin as a React dev server would serve it, and driven in chromium (Debian's,
// through playwright-core) against the server with that origin in CORS_ORIGINS. Heavy because what
// is tested is a page: React, the AI SDK's useChat and AG-UI's HttpAgent in a browser, across a
// real preflight. The blocks are also typechecked as a user's project would (tsc, strict, bundler
// resolution) when @types/react is installed.
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'
import type { Browser } from 'playwright-core'
import { harnessFreeEnv } from '../child-env.js'
import { launchBrowser, openPage, skipWithoutBrowser } from '../browser.js'
import { listen } from '../helper.js'
import { until } from '../socket.js'
import { docBlocks } from './doc-blocks.js'

// a browser launch, two bundles of React and a client library, and a strict tsc over React's and the
// AI SDK's types: on a loaded 2-core machine more than tap's default, well under .taprc's 180 s
t.setTimeout(120_000)

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const HEADING = '## A chat front end in React'
const EXAMPLES = ['ai-sdk', 'ag-ui'] as const
type Example = typeof EXAMPLES[number]

/** The section's two tsx blocks, in order: the AI SDK's useChat, then AG-UI's HttpAgent. */
function readmeBlocks (): Record<Example, string> {
  const blocks = docBlocks('README.md', HEADING, 'tsx')
  if (blocks.length !== 2) throw new Error(`README.md "${HEADING}" should have two tsx blocks (useChat, then HttpAgent), has ${blocks.length}`)
  return { 'ai-sdk': blocks[0] as string, 'ag-ui': blocks[1] as string }
}

/** A project directory of its own: the given files, and the repository's node_modules as its own. */
function project (t: Test, files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'readme-react-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir')
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text)
  return dir
}

/** The `ai` that `@ai-sdk/react` pins (scripts/build.ts:bundleChatPage): one copy, as a user's install dedupes it. */
const AI = dirname(createRequire(createRequire(join(ROOT, 'package.json')).resolve('@ai-sdk/react')).resolve('ai/package.json'))

/** `block` as example.tsx beside an entry that renders its <Chat /> into #root, bundled for a browser: the bundle's text. */
async function bundle (t: Test, block: string): Promise<string> {
  const dir = project(t, {
    'example.tsx': block,
    'main.tsx': "import { createRoot } from 'react-dom/client'\nimport { Chat } from './example.tsx'\n\ncreateRoot(document.getElementById('root') as HTMLElement).render(<Chat />)\n"
  })
  const result = await build({
    entryPoints: [join(dir, 'main.tsx')],
    absWorkingDir: dir,
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    jsx: 'automatic',
    alias: { ai: AI },
    define: { 'process.env.NODE_ENV': '"development"' },
    logLevel: 'silent'
  })
  return (result.outputFiles[0] as { text: string }).text
}

/** A page server on its own loopback port (another origin than the API's): `/<name>/` loads `/<name>/bundle.js`, set later with `serve`. */
async function pageServer (t: Test): Promise<{ origin: string, serve: (name: string, js: string) => void }> {
  const bundles = new Map<string, string>()
  const server = createServer((req, res) => {
    const [, name = '', file = ''] = /^\/([^/]+)\/(.*)$/.exec(req.url ?? '') ?? []
    const js = bundles.get(name)
    if (js !== undefined && file === '') res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><title>chat</title><div id="root"></div><script type="module" src="bundle.js"></script>')
    else if (js !== undefined && file === 'bundle.js') res.writeHead(200, { 'content-type': 'text/javascript' }).end(js)
    else res.writeHead(404).end()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  return { origin: `http://127.0.0.1:${(server.address() as { port: number }).port}`, serve: (name, js) => { bundles.set(name, js) } }
}

let browser: Browser | undefined
t.before(async () => { if (skipWithoutBrowser === false) browser = await launchBrowser() })
t.teardown(async () => { await browser?.close() })

for (const example of EXAMPLES) {
  const what = example === 'ai-sdk' ? 'AI SDK useChat' : 'AG-UI HttpAgent'
  // what each renders: useChat's message joins its text parts (the thought is a reasoning part, not
  // shown); HttpAgent keeps the thought as a message of its own, role `reasoning`, before the answer
  const shown = example === 'ai-sdk'
    ? ['user: one two three', 'assistant: one two three ']
    : ['user: one two three', 'reasoning: Processing request...', 'assistant: one two three ']
  t.test(`the README's ${what} chat, as written, streams the echo-stream agent's words into one assistant message from a page on another origin`, { skip: skipWithoutBrowser }, async (t) => {
    const block = readmeBlocks()[example]
    t.match(block, 'http://127.0.0.1:3000/', 'the block calls the server the README starts, whose port the test changes')
    const pages = await pageServer(t)
    const { url } = await listen(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: pages.origin })
    pages.serve(example, await bundle(t, block.replaceAll('http://127.0.0.1:3000', url)))
    const { page, errors } = await openPage(t, browser as Browser, `${pages.origin}/${example}/`)
    await page.locator('input').fill('one two three')
    await page.locator('input').press('Enter')
    // the words arrive one by one: the answer is whole once its paragraph reads all of them; an error stops the wait
    const paragraphs = async (): Promise<string[]> => await page.locator('p').allTextContents()
    await until('the whole answer, or an error', async () => errors.length > 0 || (await paragraphs()).includes('assistant: one two three '), 20_000, 50)
      .catch(async (err: Error) => { throw new Error(`${err.message}; the page shows ${JSON.stringify(await paragraphs())}`) })
    t.same(await paragraphs(), shown, 'the question, then one answer')
    t.equal(await page.locator('input').inputValue(), '', 'the input is cleared')
    t.same(errors, [], 'no console error and no uncaught one (a CORS failure would show here)')
  })
}

t.test('the README\'s two React examples typecheck as a user\'s strict TypeScript project would check them', {
  skip: existsSync(join(ROOT, 'node_modules', '@types', 'react')) ? false : '@types/react is not installed: the blocks\' JSX and `react` imports have no types to check against'
}, async (t) => {
  const blocks = readmeBlocks()
  const dir = project(t, {
    'tsconfig.json': JSON.stringify({
      compilerOptions: {
        noEmit: true,
        strict: true,
        jsx: 'react-jsx',
        module: 'esnext',
        moduleResolution: 'bundler',
        target: 'es2022',
        lib: ['es2022', 'dom', 'dom.iterable'],
        skipLibCheck: true,
        types: [],
        // the bundle's alias: the one `ai` a user's install has, the one @ai-sdk/react's types name
        paths: { ai: [AI] }
      },
      files: EXAMPLES.map((example) => `${example}.tsx`)
    }),
    ...Object.fromEntries(EXAMPLES.map((example) => [`${example}.tsx`, blocks[example]]))
  })
  const tsc = createRequire(join(ROOT, 'package.json')).resolve('typescript/bin/tsc')
  const out = await new Promise<string>((resolve) => {
    execFile(process.execPath, [tsc, '-p', dir, '--pretty', 'false'], { cwd: dir, env: harnessFreeEnv(), timeout: 90_000 }, (error, stdout, stderr) => { resolve(error === null ? '' : `${stdout}${stderr}` || error.message) })
  })
  t.equal(out, '', 'no type error')
})
