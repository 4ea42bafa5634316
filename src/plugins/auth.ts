import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { identityOf, jwtOptions, refusalOf, type Refusal } from '../auth/jwt.js'
import { ANONYMOUS, BOOTSTRAP_KEY_NAME, type Identity, type KeyStore as KeyStoreContract } from '../storage/api-keys.js'
import { grants, isPublic, ROUTE_SCOPES, routeKey } from '../auth/scopes.js'
import { AH_ERR_AUTH_REQUIRED, AH_ERR_FORBIDDEN, AH_ERR_REQUEST_INVALID } from '../errors.js'
import { ErrorBody } from '../protocol/response.js'
import { DEFAULT_TENANT } from '../storage/tenants.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** API keys (`agent-host keys`, API_KEYS). */
    keys: KeyStoreContract
  }
  interface FastifyRequest {
    /** Who is calling (anonymous with every scope when AUTH_MODE is off). */
    identity: Identity
  }
}

/** No caller yet (public routes, unknown routes). */
const NOBODY: Identity = { id: 'none', name: 'none', tenant: DEFAULT_TENANT, scopes: new Set(), agents: null, anonymous: true }

/**
 * Authentication and authorisation. AUTH_MODE `apikey`: every route but the public ones needs
 * `Authorization: Bearer <key>` (401 `AH_ERR_AUTH_REQUIRED` without a valid one) and the route's
 * scope from {@link ROUTE_SCOPES} (403 `AH_ERR_FORBIDDEN` naming it). AUTH_MODE `jwt`: the same,
 * with a JWT checked by @fastify/jwt (see `jwtOptions`) in place of the key. Every refusal is audited.
 * AUTH_MODE `off` (the loopback-only default): every caller is anonymous and holds every scope.
 */
async function auth (app: FastifyInstance): Promise<void> {
  const config = app.config
  const keys = app.stores.keys
  app.decorate('keys', keys)
  app.decorateRequest('identity', null as unknown as Identity)
  app.addHook('onRequest', async (request) => {
    request.identity = NOBODY
    // Node keeps the first of two Authorization headers and drops the other: which one a proxy acted on is anyone's guess
    if (request.raw.rawHeaders.filter((name, i) => i % 2 === 0 && name.toLowerCase() === 'authorization').length > 1) {
      throw new AH_ERR_REQUEST_INVALID('send one Authorization header, not several')
    }
  })

  app.addHook('onRoute', (route) => {
    let scoped = false
    for (const method of [route.method].flat()) {
      if (method === 'HEAD' || method === 'OPTIONS' || isPublic(method, route.url)) continue
      const scope = ROUTE_SCOPES[routeKey(method, route.url)]
      if (scope === undefined) throw new Error(`route ${method} ${route.url} declares no scope: add it to ROUTE_SCOPES or PUBLIC_ROUTES (src/auth/scopes.ts)`)
      scoped = true
    }
    // document it: the bearer scheme, and the two answers every scoped route may give
    if (scoped && route.schema !== undefined) {
      const response = (route.schema.response ?? {}) as Record<string, unknown>
      route.schema = { ...route.schema, security: [{ bearerAuth: [] }], response: { 401: ErrorBody, 403: ErrorBody, ...response } } as typeof route.schema
    }
  })

  if (config.AUTH_MODE === 'apikey') {
    const made = config.BOOTSTRAP_ADMIN_KEY === '' ? undefined : await keys.bootstrap(config.BOOTSTRAP_ADMIN_KEY)
    if (made !== undefined) {
      await app.audit.append({ actor: 'bootstrap', action: 'key.create', resource: made.id, success: true, details: { name: made.name, scopes: made.scopes, from: 'BOOTSTRAP_ADMIN_KEY' } })
      app.log.warn({ key: made.id }, `made the admin key "${BOOTSTRAP_KEY_NAME}" from BOOTSTRAP_ADMIN_KEY (once: it is not made again, even if revoked). Make your own keys with it, then revoke it (agent-host keys revoke ${BOOTSTRAP_KEY_NAME}) and unset the setting`)
    }
    if (await keys.usable() === 0) {
      app.log.warn('AUTH_MODE is apikey but no API key exists: every request but /health and /docs will be refused with 401. Make one with `agent-host keys create --name admin --scopes admin` (in the container: `docker exec <container> node dist/src/cli.js keys create --name admin --scopes admin`), or set BOOTSTRAP_ADMIN_KEY or API_KEYS')
    }
  }

  if (config.AUTH_MODE === 'off') {
    app.log.warn({ host: config.HOST }, 'AUTH_MODE is off: every caller may do anything. Set AUTH_MODE=apikey before exposing this server')
    app.addHook('onRequest', async (request) => { request.identity = ANONYMOUS })
    return
  }

  const deny = async (request: FastifyRequest, error: Error & { code: string }, reason: string, who: Identity | undefined, scope?: string): Promise<never> => {
    await app.audit.append({
      actor: who?.id ?? 'unauthenticated',
      action: 'auth.deny',
      resource: `${request.method} ${request.routeOptions.url ?? request.url}`,
      success: false,
      details: { reason, ip: request.ip, ...(scope !== undefined ? { scope } : {}), ...(who !== undefined ? { name: who.name } : {}) }
    })
    request.log.info({ reason, scope }, 'request refused')
    throw error
  }

  /** 401, audited; past AUTH_FAILURE_MAX from one address, 429 and not audited (so failures cannot flood the log). */
  const unauthenticated = async (request: FastifyRequest, reply: FastifyReply, refusal: Refusal, scope: string): Promise<never> => {
    await app.limits.authFailure(request, reply)
    return await deny(request, new AH_ERR_AUTH_REQUIRED(refusal.message), refusal.reason, undefined, scope)
  }

  const verifyKey = async (token: string): Promise<Identity | Refusal> => {
    const verified = await keys.verify(token)
    if (!('refused' in verified)) return verified
    return { reason: verified.refused, message: `the key is ${verified.refused === 'unknown' ? 'not valid' : verified.refused}` }
  }

  // imported only in this mode: @fastify/jwt and its signers cost every other start some 150 ms of CPU
  if (config.AUTH_MODE === 'jwt') await app.register((await import('@fastify/jwt')).default, jwtOptions(config))
  const verifyToken = async (request: FastifyRequest): Promise<Identity | Refusal> => {
    try {
      return identityOf(await request.jwtVerify<Record<string, unknown>>(), config.JWT_TENANT_CLAIM)
    } catch (err) {
      if (typeof (err as { code?: unknown }).code !== 'string') request.log.warn({ err }, 'a token broke the JWT verifier')
      return refusalOf(err as Error)
    }
  }

  app.addHook('onRequest', async (request, reply) => {
    const url = request.routeOptions.url
    if (url === undefined || isPublic(request.method, url)) return
    const scope = ROUTE_SCOPES[routeKey(request.method, url)] as string
    const header = request.headers.authorization
    const token = typeof header === 'string' && /^bearer /i.test(header) ? header.slice(7).trim() : ''
    if (token === '') return await unauthenticated(request, reply, { reason: 'missing', message: 'send Authorization: Bearer <key>' }, scope)
    const verified = config.AUTH_MODE === 'jwt' ? await verifyToken(request) : await verifyKey(token)
    if ('reason' in verified) return await unauthenticated(request, reply, verified, scope)
    const identity = verified
    if (!grants(identity.scopes, scope)) await deny(request, new AH_ERR_FORBIDDEN(`this key lacks the scope "${scope}"`), 'scope', identity, scope)
    if (url === '/v1/conversations/:id/events' && (request.query as { internal?: unknown }).internal === 'true' && !grants(identity.scopes, 'events:internal')) {
      await deny(request, new AH_ERR_FORBIDDEN('this key lacks the scope "events:internal"'), 'scope', identity, 'events:internal')
    }
    request.identity = identity
  })
}

export default fp(auth, { name: 'auth', fastify: '5.x', dependencies: ['config', 'storage', 'limits'] })
