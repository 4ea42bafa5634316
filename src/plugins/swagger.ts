import fp from 'fastify-plugin'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import { generateOpenApiPath } from '../protocol/openapi.js'
import pkg from '../../package.json' with { type: 'json' }

/**
 * The OpenAPI 3.1 document (built from the route schemas) at `/openapi.json`, and Swagger UI at
 * `/docs`. `POST /v1/assist` is documented by exactly `generateOpenApiPath()` (CAP.md §8).
 */
async function docs (app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'agent-host',
        version: pkg.version,
        description: 'Hosts AI agents behind the Coreason Agent Protocol (CAP). See the README for the wire contract.'
      },
      tags: [
        { name: 'assist', description: 'Invoke agents' },
        { name: 'agents', description: 'Hosted agent manifests' },
        { name: 'sessions', description: 'Session history and erasure' },
        { name: 'events', description: 'The event log' },
        { name: 'audit', description: 'The tamper-evident audit log' },
        { name: 'tasks', description: 'The task graph and conversation feeds' },
        { name: 'backends', description: 'LLM providers and local agents that agents think with' },
        { name: 'operations', description: 'Health, metrics and documentation' }
      ],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key (`agent-host keys create`) when AUTH_MODE=apikey, or a JWT from your identity provider when AUTH_MODE=jwt' }
        }
      }
    },
    transformObject: (documentObject) => {
      const doc = (documentObject as { openapiObject: { paths?: Record<string, unknown> } }).openapiObject
      doc.paths = { ...doc.paths, '/v1/assist': generateOpenApiPath() }
      return doc as never
    }
  })
  await app.register(swaggerUi, { routePrefix: '/docs' })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
}

export default fp(docs, { name: 'docs', fastify: '5.x' })
