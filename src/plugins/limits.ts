import fp from 'fastify-plugin'
import rateLimit from '@fastify/rate-limit'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { isPublic } from '../auth/scopes.js'
import { AH_ERR_RATE_LIMITED, AH_ERR_TOO_MANY_STREAMS, withDetails } from '../errors.js'
import { MemoryRateLimitStore } from '../http/rate-limit-store.js'
import { StreamGate } from '../http/stream-gate.js'
import { ErrorBody } from '../protocol/response.js'

/** The limits a route applies itself (the per-caller rate limit applies to every scoped route). */
export interface Limits {
  /**
   * Count a new run of `agent` against `RATE_LIMIT_AGENT_MAX` (all callers together). Throws 429
   * `AH_ERR_RATE_LIMITED` with `Retry-After` past it.
   */
  agentRun: (request: FastifyRequest, reply: FastifyReply, agent: { id: string, name: string }) => Promise<void>
  /**
   * Count `count` more requests of the caller against `RATE_LIMIT_MAX`, beyond the HTTP request
   * itself (which every scoped route counts): the JSON-RPC requests of an MCP batch after its first.
   * Throws 429 `AH_ERR_RATE_LIMITED` with `Retry-After` past it.
   */
  callerRequests: (request: FastifyRequest, reply: FastifyReply, count: number) => Promise<void>
  /**
   * Take `count` SSE slots for the caller (one per stream the response carries: the tool calls of
   * an MCP batch), all or none, before a stream starts. Throws `AH_ERR_TOO_MANY_STREAMS` (429 past
   * `MAX_STREAMS_PER_CALLER`, 503 past `MAX_STREAMS`); returns the function that frees them.
   */
  openStream: (request: FastifyRequest, reply: FastifyReply, count?: number) => Promise<() => void>
  /**
   * Count a failed authentication from the request's address against `AUTH_FAILURE_MAX`. Throws
   * 429 `AH_ERR_RATE_LIMITED` (`details.limit` `auth_failures`) past it.
   */
  authFailure: (request: FastifyRequest, reply: FastifyReply) => Promise<void>
  /** Counts this server's open SSE responses. */
  streams: { readonly open: number }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Rate limits and the SSE stream cap (src/plugins/limits.ts). */
    limits: Limits
  }
}

/** Who counts as one caller: the key or token subject, or the client address when auth is off. */
export function callerOf (request: FastifyRequest): string {
  return request.identity.anonymous ? `ip:${request.ip}` : request.identity.id
}

/**
 * Rate limits (@fastify/rate-limit, in-process store): `RATE_LIMIT_MAX` requests per caller per
 * `RATE_LIMIT_WINDOW_MS` on every scoped route, with `X-RateLimit-*` headers on each answer, and
 * `RATE_LIMIT_AGENT_MAX` new runs per agent and `AUTH_FAILURE_MAX` failed authentications per address
 * (see {@link Limits}); plus the cap on open SSE responses.
 * Refusals carry `Retry-After` and count in `agent_host_rate_limited_total`.
 */
async function limits (app: FastifyInstance): Promise<void> {
  const config = app.config
  const shared = app.stores.rateLimits
  // counts the database shares are shared by every instance (N a minute means N across the cluster)
  await app.register(rateLimit, {
    global: false,
    timeWindow: config.RATE_LIMIT_WINDOW_MS,
    // while the database is away, routes that need nothing of it go on answering, uncounted
    ...(shared !== undefined ? { store: shared, skipOnError: true } : { store: MemoryRateLimitStore })
  })

  // document it: every scoped route may answer 429
  app.addHook('onRoute', (route) => {
    if (route.schema === undefined || [route.method].flat().every((m) => m === 'HEAD' || isPublic(m, route.url))) return
    route.schema = { ...route.schema, response: { 429: ErrorBody, ...(route.schema.response as Record<string, unknown> | undefined) } } as typeof route.schema
  })

  const LIMITED = {
    caller: (max: number) => `this caller may make ${max} requests`,
    agent: (max: number, who: string) => `agent "${who}" may be given ${max} new runs`,
    auth_failures: (max: number) => `this address failed to authenticate ${max} times`
  }
  const refuse = (request: FastifyRequest, reply: FastifyReply, limit: keyof typeof LIMITED, max: number, retryAfter: number, who: string): never => {
    app.metrics.rateLimited.inc({ limit })
    request.log.info({ limit, max, who }, 'refused: rate limit')
    reply.header('retry-after', String(retryAfter))
    throw withDetails(new AH_ERR_RATE_LIMITED(`${LIMITED[limit](max, who)} per ${config.RATE_LIMIT_WINDOW_MS / 1000} s`),
      { limit, max, window_ms: config.RATE_LIMIT_WINDOW_MS, retry_after_s: retryAfter })
  }

  const perCaller = config.RATE_LIMIT_MAX > 0 ? app.createRateLimit({ max: config.RATE_LIMIT_MAX, keyGenerator: callerOf }) : undefined
  /** One more request of the caller: its headers, and 429 past the limit. */
  const countCaller = async (request: FastifyRequest, reply: FastifyReply, limit: NonNullable<typeof perCaller>): Promise<void> => {
    const state = await limit(request)
    if (state.isAllowed) return
    reply.header('x-ratelimit-limit', state.max).header('x-ratelimit-remaining', state.remaining).header('x-ratelimit-reset', state.ttlInSeconds)
    if (state.isExceeded) refuse(request, reply, 'caller', state.max, state.ttlInSeconds, callerOf(request))
  }
  if (perCaller !== undefined) {
    // after every onRequest hook (the auth plugin's names the caller), before the body is read
    app.addHook('preParsing', async (request, reply) => {
      const url = request.routeOptions.url
      if (url === undefined || isPublic(request.method, url)) return
      await countCaller(request, reply, perCaller)
    })
  }

  // the agent a request's run is for, whatever protocol its body speaks (CAP, A2A, MCP)
  const runFor = new WeakMap<FastifyRequest, string>()
  const perAgent = config.RATE_LIMIT_AGENT_MAX > 0
    ? app.createRateLimit({ max: config.RATE_LIMIT_AGENT_MAX, keyGenerator: (request) => `agent:${runFor.get(request) ?? ''}` })
    : undefined
  const authFailures = config.AUTH_FAILURE_MAX > 0
    ? app.createRateLimit({ max: config.AUTH_FAILURE_MAX, keyGenerator: (request) => `auth:${request.ip}` })
    : undefined
  // MAX_STREAMS is this server's capacity; MAX_STREAMS_PER_CALLER a caller's quota, across the cluster on PostgreSQL
  const streams = app.stores.streams ?? new StreamGate(config.MAX_STREAMS, config.MAX_STREAMS_PER_CALLER)
  app.decorate('limits', {
    streams,
    async authFailure (request, reply) {
      if (authFailures === undefined) return
      const state = await authFailures(request)
      if (!state.isAllowed && state.isExceeded) refuse(request, reply, 'auth_failures', state.max, state.ttlInSeconds, `ip:${request.ip}`)
    },
    async callerRequests (request, reply, count) {
      if (perCaller === undefined) return
      for (let i = 0; i < count; i++) await countCaller(request, reply, perCaller)
    },
    async agentRun (request, reply, agent) {
      if (perAgent === undefined) return
      runFor.set(request, agent.id)
      const state = await perAgent(request)
      if (!state.isAllowed && state.isExceeded) refuse(request, reply, 'agent', state.max, state.ttlInSeconds, agent.name)
    },
    async openStream (request, reply, count = 1) {
      const held: Array<() => void> = []
      const releaseAll = (): void => { for (const release of held) release() }
      while (held.length < count) {
        const slot = await streams.acquire(callerOf(request))
        if (typeof slot === 'function') {
          held.push(slot)
          continue
        }
        releaseAll()
        const max = slot === 'caller' ? config.MAX_STREAMS_PER_CALLER : config.MAX_STREAMS
        app.metrics.rateLimited.inc({ limit: `${slot}_streams` })
        request.log.info({ limit: slot, max, count }, 'refused: too many streams')
        reply.header('retry-after', '1')
        const holder = slot === 'caller' ? 'this caller' : 'the server'
        const error = withDetails(new AH_ERR_TOO_MANY_STREAMS(count > 1 ? `${holder} may hold ${max} open at once, and this request needs ${count}` : `${holder} holds ${max} open already`), { limit: `${slot}_streams`, max })
        if (slot === 'total') error.statusCode = 503
        throw error
      }
      return releaseAll
    }
  } satisfies Limits)
}

export default fp(limits, { name: 'limits', fastify: '5.x', dependencies: ['config', 'metrics', 'storage'] })
