import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { allowedHosts, corsOrigins, isLoopback } from '../config.js'
import { AH_ERR_HOST_REFUSED } from '../errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Check `Origin` on this route wherever the server is bound, not only on loopback (`/mcp`: the
     * MCP specification asks every server to).
     */
    originGuard?: boolean
  }
}

/** The names a loopback address answers to in a `Host` header (the MCP SDK's own list). */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]']

/** The addresses that bind every interface: a `Host` naming one is no name of the server. */
const UNSPECIFIED = ['0.0.0.0', '[::]']

/** Which `Host` and `Origin` headers the server takes (see {@link rebindingGuard}). */
export interface RebindingGuard {
  /** Host names (without port) a request may name; undefined: any (the server is not bound to loopback). */
  readonly hosts: ReadonlySet<string> | undefined
  /** Origins a page may call from besides its own (`CORS_ORIGINS`); `*`: any. */
  readonly origins: ReadonlySet<string> | '*'
}

/** A `Host` header (or an origin, with `scheme`) as the URL parser reads it (lower case, IPv6 in brackets), or undefined when it is not one. */
function urlOf (host: string, scheme = 'http://'): URL | undefined {
  try {
    return new URL(`${scheme}${host}`)
  } catch {
    return undefined
  }
}

/**
 * The DNS-rebinding guard of a server bound to `bindHost` with `CORS_ORIGINS` = `corsOrigins` and
 * `ALLOWED_HOSTS` = `allowed` (host names as the URL parser writes them). Bound to loopback, a
 * request must name a loopback host (`localhost`, `127.0.0.1`, `[::1]`, the bound address), an
 * allowed host or the host of a listed origin: a page whose name was rebound to 127.0.0.1 still
 * sends its own name. Bound elsewhere, the same holds once `allowed` names the server's names (an
 * operator's list); without one the server cannot know them, and any `Host` passes. An `Origin`
 * must be the request's own or a listed one.
 */
export function rebindingGuard (bindHost: string, loopback: boolean, corsOrigins: readonly string[], allowed: readonly string[]): RebindingGuard {
  const listed = corsOrigins.filter((origin) => origin !== '*')
  const bound = (urlOf(bindHost.includes(':') ? `[${bindHost}]` : bindHost) as URL).hostname
  // an operator's list turns the Host check on wherever the server is bound; the wildcard addresses are no name of it
  const hosts = loopback || allowed.length > 0
    ? new Set([...LOOPBACK_NAMES, ...(UNSPECIFIED.includes(bound) ? [] : [bound]), ...allowed, ...listed.map((origin) => new URL(origin).hostname)])
    : undefined
  return { hosts, origins: corsOrigins.includes('*') ? '*' : new Set(listed) }
}

/**
 * Why a request with these `Host` and `Origin` headers is refused (a DNS-rebinding attempt, or a
 * page of another origin), or undefined when it may go on.
 */
export function rebindingRefusal (guard: RebindingGuard, host: string | undefined, origin: string | undefined): string | undefined {
  const called = host === undefined ? undefined : urlOf(host)
  if (guard.hosts !== undefined && (called === undefined || !guard.hosts.has(called.hostname))) return `Host "${host ?? ''}" is not a name of this server (add it to ALLOWED_HOSTS)`
  if (origin === undefined || guard.origins === '*' || guard.origins.has(origin)) return undefined
  // the page's own server: its origin names the host it called (the check above vouched for that host)
  if (called !== undefined && urlOf(origin, '')?.host === called.host) return undefined
  return `Origin "${origin}" may not call this server (add it to CORS_ORIGINS)`
}

/**
 * The DNS-rebinding guard of every route. Bound to loopback (`HOST`), a request whose `Host` is not
 * a name of this server, or whose `Origin` is another page's, is refused with 403
 * `AH_ERR_HOST_REFUSED` before anything else looks at it (authentication, rate limits, the body):
 * a web page whose name was rebound to 127.0.0.1 reaches nothing, `/health` included. Bound
 * elsewhere, the server cannot know its names: only routes marked `originGuard` check `Origin`.
 */
async function dnsRebinding (app: FastifyInstance): Promise<void> {
  const config = app.config
  const allowed = allowedHosts(config.ALLOWED_HOSTS)
  const everyRoute = isLoopback(config.HOST) || allowed.length > 0
  const guard = rebindingGuard(config.HOST, isLoopback(config.HOST), corsOrigins(config.CORS_ORIGINS), allowed)
  app.addHook('onRequest', async (request) => {
    if (!everyRoute && request.routeOptions.config.originGuard !== true) return
    const refused = rebindingRefusal(guard, request.headers.host, request.headers.origin)
    if (refused !== undefined) throw new AH_ERR_HOST_REFUSED(refused)
  })
}

export default fp(dnsRebinding, { name: 'dns-rebinding', fastify: '5.x', dependencies: ['config'] })
