import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import fastifyStatic from '@fastify/static'
import type { FastifyInstance, FastifyReply } from 'fastify'
import { AH_ERR_PLAYGROUND_UNBUILT } from '../errors.js'

// the page's files are not compiled: beside src/ in a checkout, one level further up from dist/src/
const ROOT = [new URL('../../', import.meta.url), new URL('../../../', import.meta.url)]
  .map((url) => fileURLToPath(url)).find((dir) => existsSync(join(dir, 'playground', 'index.html')))

/** The packages the page imports by name, each to the one ES module file a browser can load. */
const VENDOR = { 'eventsource-parser': 'eventsource-parser.js', marked: 'marked.js', dompurify: 'dompurify.js' } as const

const hidden = { schema: { hide: true } }

/**
 * The playground at `/playground/` (PLAYGROUND=false turns it off): a small page that drives the
 * agents through the TypeScript client (`client/`, served built at `/playground/client/`), with
 * marked and DOMPurify served from this server too, so it loads nothing from the internet. Its
 * Content-Security-Policy admits scripts from this origin and the one inline import map only.
 * `/playground/chat` is the chat page: the AI SDK's `useChat` against `/ai-sdk/{agent}/chat`,
 * bundled by `npm run build` (`scripts/build.ts`) and served at `/playground/build/chat.js`, under
 * the same policy. `options.clientDir`: where the built client is; `options.bundleDir`: where the
 * chat page's bundle is (`null`: not built); both found by default.
 */
export default async function playgroundRoutes (app: FastifyInstance, options: { clientDir?: string | null, bundleDir?: string | null } = {}): Promise<void> {
  if (!app.config.PLAYGROUND) return
  if (ROOT === undefined) throw new Error('the playground\'s files (playground/index.html) are missing beside src/; set PLAYGROUND=false or restore them')
  const client = options.clientDir === undefined ? clientDir() : options.clientDir ?? undefined
  const bundle = options.bundleDir === undefined ? bundleDir(ROOT) : options.bundleDir ?? undefined
  const importMap = JSON.stringify({ imports: Object.fromEntries(Object.entries(VENDOR).map(([name, file]) => [name, `/playground/vendor/${file}`])) })
  const hash = createHash('sha256').update(importMap).digest('base64')
  const page = readFileSync(join(ROOT, 'playground', 'index.html'), 'utf8').replace('<!--IMPORTMAP-->', `<script type="importmap">${importMap}</script>`)
  const csp = [
    "default-src 'self'", `script-src 'self' 'sha256-${hash}'`, "style-src 'self'", "img-src 'self' data:",
    "connect-src 'self'", "object-src 'none'", "base-uri 'none'", "frame-ancestors 'none'", "form-action 'none'"
  ].join('; ')
  const secure = (reply: FastifyReply): FastifyReply => reply.header('content-security-policy', csp).header('x-content-type-options', 'nosniff').header('referrer-policy', 'no-referrer')

  app.get('/playground', hidden, async (_request, reply) => await reply.redirect('/playground/'))
  app.get('/playground/', hidden, async (_request, reply) => await secure(reply).type('text/html; charset=utf-8').send(page))
  const chatPage = readFileSync(join(ROOT, 'playground', 'chat', 'index.html'))
  app.get('/playground/chat', hidden, async (_request, reply) => await secure(reply).type('text/html; charset=utf-8').send(chatPage))
  const vendor = Object.fromEntries(Object.entries(VENDOR).map(([name, file]) => [file, readFileSync(fileURLToPath(import.meta.resolve(name)))]))
  app.get<{ Params: { file: string } }>('/playground/vendor/:file', hidden, async (request, reply) => {
    const body = vendor[request.params.file]
    if (body === undefined) return await reply.callNotFound()
    return await secure(reply).type('text/javascript; charset=utf-8').header('cache-control', 'public, max-age=3600').send(body)
  })
  const protocol = readFileSync(join(ROOT, 'docs', 'protocol.md'))
  app.get('/playground/protocol.md', hidden, async (_request, reply) => await secure(reply).type('text/plain; charset=utf-8').send(protocol))
  await app.register(fastifyStatic, { root: join(ROOT, 'playground'), prefix: '/playground/', index: false, wildcard: true, decorateReply: false, setHeaders: (reply) => { reply.header('x-content-type-options', 'nosniff') } })
  const unbuilt: string[] = []
  for (const [dir, prefix, what] of [[client, '/playground/client/', 'client/dist'], [bundle, '/playground/build/', 'dist/playground/chat.js']] as const) {
    if (dir !== undefined) {
      await app.register(fastifyStatic, { root: dir, prefix, index: false, decorateReply: false, setHeaders: (reply) => { reply.header('x-content-type-options', 'nosniff') } })
    } else {
      unbuilt.push(what)
      app.get(`${prefix}*`, hidden, async () => { throw new AH_ERR_PLAYGROUND_UNBUILT() })
    }
  }
  if (unbuilt.length > 0) app.log.warn(`the playground is not built (${unbuilt.join(', ')}): run npm run build`)
}

/** dist/playground under `root`, where `npm run build` bundles the chat page, or undefined when it has not. */
export function bundleDir (root: string): string | undefined {
  const dir = join(root, 'dist', 'playground')
  return existsSync(join(dir, 'chat.js')) ? dir : undefined
}

/**
 * client/dist, or undefined when the client was not built (tests run from sources; `npm run build`
 * builds it). `resolve` is `import.meta.resolve`, which names the file a package's exports point to
 * even when that file does not exist: so the folder is looked for too.
 */
export function clientDir (resolve: (specifier: string) => string = import.meta.resolve): string | undefined {
  try {
    const dir = dirname(fileURLToPath(resolve('@agent-host/client')))
    return existsSync(dir) ? dir : undefined
  } catch {
    return undefined
  }
}
