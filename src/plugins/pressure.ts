import fp from 'fastify-plugin'
import underPressure from '@fastify/under-pressure'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { errorBody, AH_ERR_OVERLOADED } from '../errors.js'

/** Routes that answer even under pressure: load balancers and scrapers must still see the state. */
const EXEMPT = new Set(['/health', '/metrics'])

/**
 * Load shedding (@fastify/under-pressure): past MAX_EVENT_LOOP_DELAY_MS, MAX_HEAP_USED_BYTES or
 * MAX_RSS_BYTES every request but `/health` and `/metrics` gets 503 `AH_ERR_OVERLOADED` with
 * `Retry-After`, and `/health` reports `degraded`.
 */
async function pressure (app: FastifyInstance): Promise<void> {
  const config = app.config
  await app.register(underPressure, {
    maxEventLoopDelay: config.MAX_EVENT_LOOP_DELAY_MS,
    maxHeapUsedBytes: config.MAX_HEAP_USED_BYTES,
    maxRssBytes: config.MAX_RSS_BYTES,
    sampleInterval: config.PRESSURE_SAMPLE_MS,
    // the plugin sends what the handler returns (its types only admit void)
    pressureHandler: ((request: FastifyRequest, reply: FastifyReply, type: string) => {
      if (EXEMPT.has(request.routeOptions.url ?? '')) return undefined
      app.metrics.overloads.inc({ type })
      request.log.warn({ type }, 'refused: under pressure')
      const retryAfter = Math.max(1, Math.ceil(config.PRESSURE_SAMPLE_MS / 1000))
      reply.code(503).header('retry-after', String(retryAfter))
      return errorBody(new AH_ERR_OVERLOADED(type))
    }) as unknown as (request: FastifyRequest, reply: FastifyReply, type: string) => void
  })
}

export default fp(pressure, { name: 'pressure', fastify: '5.x', dependencies: ['config', 'metrics'] })
