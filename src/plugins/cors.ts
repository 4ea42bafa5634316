import fp from 'fastify-plugin'
import cors from '@fastify/cors'
import type { FastifyInstance } from 'fastify'
import { corsOrigins } from '../config.js'

/** What a browser client sends beyond the safelisted headers: JSON bodies, keys, resume cursors, trace context, the A2A version and extensions, an MCP session and protocol version. */
export const CORS_ALLOWED_HEADERS = ['content-type', 'authorization', 'last-event-id', 'traceparent', 'tracestate', 'a2a-version', 'a2a-extensions', 'mcp-session-id', 'mcp-protocol-version']

/** What a page may read from our answers: rate limits, when to retry, the trace to quote, and the MCP session an `initialize` opened. */
export const CORS_EXPOSED_HEADERS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'retry-after', 'traceparent', 'mcp-session-id']

/**
 * Cross-origin calls from the pages of `CORS_ORIGINS` (`@fastify/cors`): preflights answered before
 * authentication and rate limits (a browser sends them without the caller's key), the origin echoed
 * back with `Vary: Origin`, credentials only with `CORS_CREDENTIALS`. A request from any other
 * origin, or without one (curl, servers), gets no CORS header at all, and its preflight a 404.
 * With `CORS_ORIGINS` empty nothing is registered: same origin only.
 */
async function crossOrigin (app: FastifyInstance): Promise<void> {
  const origins = corsOrigins(app.config.CORS_ORIGINS)
  if (origins.length === 0) return
  const any = origins.includes('*')
  await app.register(cors, {
    origin: (origin, callback) => {
      if (origin === undefined || !(any || origins.includes(origin))) callback(null, false)
      else callback(null, any ? '*' : origin)
    },
    methods: ['GET', 'HEAD', 'POST', 'DELETE'],
    allowedHeaders: CORS_ALLOWED_HEADERS,
    exposedHeaders: CORS_EXPOSED_HEADERS,
    credentials: app.config.CORS_CREDENTIALS,
    // a preflight a browser may reuse for ten minutes instead of one before every call
    maxAge: 600,
    strictPreflight: false
  })
}

export default fp(crossOrigin, { name: 'cors', fastify: '5.x', dependencies: ['config'] })
