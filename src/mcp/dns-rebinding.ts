/** The names a loopback address answers to in a `Host` header (the MCP SDK's own list). */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]']

/** Which `Host` and `Origin` headers `/mcp` takes (see {@link rebindingGuard}). */
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
 * The DNS-rebinding guard of a server bound to `bindHost` with `CORS_ORIGINS` = `corsOrigins`. Bound
 * to loopback, a request must name a loopback host (`localhost`, `127.0.0.1`, `[::1]`, the bound
 * address) or the host of a listed origin: a page whose name was rebound to 127.0.0.1 still sends
 * its own name. Wherever it is bound, an `Origin` must be the request's own or a listed one.
 */
export function rebindingGuard (bindHost: string, loopback: boolean, corsOrigins: readonly string[]): RebindingGuard {
  const listed = corsOrigins.filter((origin) => origin !== '*')
  const hosts = loopback
    ? new Set([...LOOPBACK_NAMES, (urlOf(bindHost.includes(':') ? `[${bindHost}]` : bindHost) as URL).hostname, ...listed.map((origin) => new URL(origin).hostname)])
    : undefined
  return { hosts, origins: corsOrigins.includes('*') ? '*' : new Set(listed) }
}

/**
 * Why a request with these `Host` and `Origin` headers is refused (a DNS-rebinding attempt, or a
 * page of another origin), or undefined when it may go on.
 */
export function rebindingRefusal (guard: RebindingGuard, host: string | undefined, origin: string | undefined): string | undefined {
  const called = host === undefined ? undefined : urlOf(host)
  if (guard.hosts !== undefined && (called === undefined || !guard.hosts.has(called.hostname))) return `Host "${host ?? ''}" is not a name of this server`
  if (origin === undefined || guard.origins === '*' || guard.origins.has(origin)) return undefined
  // the page's own server: its origin names the host it called (the check above vouched for that host)
  if (called !== undefined && urlOf(origin, '')?.host === called.host) return undefined
  return `Origin "${origin}" may not call this server (add it to CORS_ORIGINS)`
}
