import type { FastifyInstance } from 'fastify'
import pkg from '../../package.json' with { type: 'json' }

/** The pages and endpoints a person looks for first, by name, each only when this server serves it. */
export function frontDoor (app: FastifyInstance): Record<string, string> {
  const links: Record<string, string> = {}
  if (app.hasRoute({ method: 'GET', url: '/playground/' })) links.playground = '/playground/'
  if (app.hasRoute({ method: 'GET', url: '/docs' })) links.docs = '/docs'
  links.openapi = '/openapi.json'
  links.assist = '/v1/assist'
  links.agents = '/v1/agents'
  links.health = '/health'
  if (app.hasRoute({ method: 'GET', url: '/metrics' })) links.metrics = '/metrics'
  return links
}

/**
 * `GET /`: a browser (its `Accept` names `text/html`) is sent to the playground, or to Swagger UI when the
 * playground is off; anyone else gets what this server is and where its pages are, as JSON. Public.
 * Once listening, the start log names the same pages with the address to open them at.
 */
export default async function homeRoutes (app: FastifyInstance): Promise<void> {
  app.get('/', { schema: { hide: true } }, async (request, reply) => {
    const links = frontDoor(app)
    const page = links.playground ?? links.docs
    if (page !== undefined && /\btext\/html\b/i.test(request.headers.accept ?? '')) return await reply.redirect(page)
    return { name: pkg.name, version: pkg.version, links }
  })
  app.addHook('onListen', async () => {
    const address = app.addresses()[0]
    // a Unix socket has no URL to open
    if (address === undefined || typeof address === 'string') return
    // a server bound to every interface is opened on this machine at loopback
    const host = address.address === '0.0.0.0' || address.address === '::' ? '127.0.0.1' : address.family === 'IPv6' ? `[${address.address}]` : address.address
    const base = `http://${host}:${address.port}`
    const links = frontDoor(app)
    app.log.info({ urls: Object.fromEntries(Object.entries(links).map(([name, path]) => [name, base + path])) }, `ready: ${links.playground !== undefined ? `the playground at ${base}${links.playground}, ` : ''}${links.docs !== undefined ? `Swagger UI at ${base}${links.docs}, ` : ''}the API at ${base}/v1/assist, health at ${base}/health`)
  })
}
