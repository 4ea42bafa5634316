import fp from 'fastify-plugin'
import { randomFillSync } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import type { FastifyInstance } from 'fastify'

declare module 'fastify' {
  interface FastifyRequest {
    /** The W3C trace id of this request: the caller's (`traceparent`) or a new one. */
    traceId: string
  }
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

// Ids come from one 4 KiB CSPRNG read per ~170 requests: with two randomBytes() calls per request,
// randomFillSync took ~45 µs of a ~800 µs request in `node bench/profile.js`; now it is not among the top 30.
const pool = Buffer.allocUnsafe(4096)
let offset = pool.length

/** `bytes` random bytes as hex, from the pool. */
function randomHex (bytes: number): string {
  if (offset + bytes > pool.length) {
    randomFillSync(pool)
    offset = 0
  }
  offset += bytes
  return pool.toString('hex', offset - bytes, offset)
}

interface TraceContext { traceId: string, flags: string }
const contexts = new WeakMap<IncomingMessage, TraceContext>()

/**
 * The trace context of a request, read once: a valid incoming `traceparent` is continued (its trace
 * id and flags), otherwise a trace starts here. Used by the request's logger (`app.ts`) and by the
 * plugin below, so both see the same id.
 */
export function traceContext (raw: IncomingMessage): TraceContext {
  let context = contexts.get(raw)
  if (context === undefined) {
    const header = raw.headers.traceparent
    const match = typeof header === 'string' ? TRACEPARENT.exec(header.trim().toLowerCase()) : null
    context = {
      traceId: match !== null && !/^0+$/.test(match[1] as string) ? match[1] as string : randomHex(16),
      flags: match?.[3] ?? '01'
    }
    contexts.set(raw, context)
  }
  return context
}

/**
 * W3C trace context: every response carries `traceparent` (the request's trace id, a new span of
 * ours), and every log line of the request carries `traceId` next to Fastify's `reqId` (bound
 * when Fastify makes the request's logger: see `childLoggerFactory` in `app.ts`).
 */
async function tracing (app: FastifyInstance): Promise<void> {
  app.decorateRequest('traceId', '')
  app.addHook('onRequest', async (request, reply) => {
    const { traceId, flags } = traceContext(request.raw)
    request.traceId = traceId
    reply.header('traceparent', `00-${traceId}-${randomHex(8)}-${flags}`)
  })
}

export default fp(tracing, { name: 'tracing', fastify: '5.x' })
