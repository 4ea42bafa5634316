import fp from 'fastify-plugin'
import { randomBytes } from 'node:crypto'
import type { FastifyInstance } from 'fastify'

declare module 'fastify' {
  interface FastifyRequest {
    /** The W3C trace id of this request: the caller's (`traceparent`) or a new one. */
    traceId: string
  }
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/**
 * W3C trace context: a valid incoming `traceparent` is continued (its trace id, a new span of
 * ours), otherwise a trace starts here. Every response carries `traceparent`, and every log line
 * of the request carries `traceId` next to Fastify's `reqId`.
 */
async function tracing (app: FastifyInstance): Promise<void> {
  app.decorateRequest('traceId', '')
  app.addHook('onRequest', async (request, reply) => {
    const header = request.headers.traceparent
    const match = typeof header === 'string' ? TRACEPARENT.exec(header.trim().toLowerCase()) : null
    const traceId = match !== null && !/^0+$/.test(match[1] as string) ? match[1] as string : randomBytes(16).toString('hex')
    const flags = match?.[3] ?? '01'
    request.traceId = traceId
    request.log = request.log.child({ traceId })
    reply.header('traceparent', `00-${traceId}-${randomBytes(8).toString('hex')}-${flags}`)
  })
}

export default fp(tracing, { name: 'tracing', fastify: '5.x' })
