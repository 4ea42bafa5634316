import fp from 'fastify-plugin'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import { ROUTE_SCOPES, routeKey } from '../auth/scopes.js'
import { generateOpenApiComponents, type JsonObject } from '../protocol/components.js'
import { generateOpenApiPath, genericErrorResponses, openApiRequestBody, openApiResponses } from '../protocol/openapi.js'
import pkg from '../../package.json' with { type: 'json' }

/** `/v1/tasks/:id` as OpenAPI writes it: `/v1/tasks/{id}`. */
function openApiPath (url: string): string {
  return url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')
}

/**
 * A route's response schemas, with the generic answers the auth and limits plugins add (a bare
 * ErrorBody) given this route's scope and their examples.
 */
function withGenericErrors (response: Record<string, unknown>, scope: string | undefined): Record<string, unknown> {
  if (scope === undefined) return response
  const generic = genericErrorResponses(scope)
  const out = { ...response }
  for (const [status, schema] of Object.entries(generic)) {
    if (status in out && (out[status] as { examples?: unknown }).examples === undefined) out[status] = schema
  }
  return out
}

/** A request as Swagger UI hands it to its `requestInterceptor`. */
export interface SwaggerRequest { url?: string, method?: string, headers?: Record<string, string>, body?: unknown }

/**
 * Swagger UI's `requestInterceptor`: on `POST /v1/assist`, a body whose `request_id` is the
 * example's placeholder (`ASSIST_EXAMPLE.request_id`) is sent with a new random one, so that each
 * *Execute* is a new run: the same id again would replay the first answer, and an edited query with
 * it would be a 409. An id the user typed is sent as it is, and so is a resume (`Last-Event-ID`),
 * which must repeat its envelope. Swagger UI gets this function as source text and runs it in the
 * page, so it closes over nothing (the placeholder is written out; a test checks it is the example's).
 */
export function freshRequestId (request: SwaggerRequest): SwaggerRequest {
  const placeholder = '0c6f4e2a-9b1d-4f3e-8a57-2d9e6b1c4a01'
  if (request.method?.toUpperCase() !== 'POST' || !/\/v1\/assist(?:[?#]|$)/.test(request.url ?? '') || typeof request.body !== 'string') return request
  if (Object.keys(request.headers ?? {}).some((name) => name.toLowerCase() === 'last-event-id')) return request
  let body: { request_id?: unknown }
  try {
    body = JSON.parse(request.body) as { request_id?: unknown }
  } catch {
    return request
  }
  if (body === null || typeof body !== 'object' || body.request_id !== placeholder) return request
  // crypto.randomUUID exists only in secure contexts; /docs may be served over plain HTTP to another host
  const bytes = crypto.getRandomValues(new Uint8Array(16))
  bytes[6] = ((bytes[6] as number) & 0x0f) | 0x40
  bytes[8] = ((bytes[8] as number) & 0x3f) | 0x80
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')
  body.request_id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
  request.body = JSON.stringify(body)
  return request
}

/**
 * The OpenAPI 3.1 document at `/openapi.json` (and `/docs/json`), and Swagger UI at `/docs`.
 *
 * Routes validate and serialize with their TypeBox schemas as they are; only the document names
 * them: `components.schemas` is `generateOpenApiComponents()`, and each route's body and
 * responses are written by `openApiRequestBody()` / `openApiResponses()` as `$ref`s to those
 * components, with the examples the route's schemas carry. @fastify/swagger still writes the rest
 * (operationId, summary, parameters, security). `POST /v1/assist` is exactly `generateOpenApiPath()`
 * (CAP.md §8).
 */
async function docs (app: FastifyInstance): Promise<void> {
  // `METHOD /path` → the request body and responses of that operation, filled in by transformObject
  const operations = new Map<string, JsonObject>()
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'agent-host',
        version: pkg.version,
        description: 'Hosts AI agents behind the Coreason Agent Protocol (CAP). The wire contract, field by field, is docs/protocol.md in the repository.\n\n' +
          '*Try it out* on `POST /v1/assist` runs the bundled echo agent as it is. Swagger UI shows an SSE response only once it ends: watch streams live in the playground ([/playground](/playground)) or with `curl -N`.'
      },
      tags: [
        { name: 'assist', description: 'Invoke agents' },
        { name: 'agents', description: 'Hosted agent manifests' },
        { name: 'sessions', description: 'Session history and erasure' },
        { name: 'events', description: 'The event log' },
        { name: 'audit', description: 'The tamper-evident audit log' },
        { name: 'tasks', description: 'The task graph and conversation feeds' },
        { name: 'bus', description: 'The event bus: publish, the a2a feed, subscriptions, dead letters' },
        { name: 'backends', description: 'LLM providers and local agents that agents think with' },
        { name: 'operations', description: 'Health, metrics and documentation' }
      ],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key (`agent-host keys create`) when AUTH_MODE=apikey, or a JWT from your identity provider when AUTH_MODE=jwt' }
        }
      }
    },
    transform: ({ schema, url, route }) => {
      if (schema === undefined || schema.hide === true) return { schema, url }
      const { body, response, ...rest } = schema
      const documented: JsonObject = {}
      if (body !== undefined) documented.requestBody = openApiRequestBody(body, rest.consumes)
      for (const method of [route.method].flat()) {
        const scope = ROUTE_SCOPES[routeKey(method, url)]
        documented.responses = openApiResponses(withGenericErrors((response ?? {}) as Record<string, unknown>, scope), rest.produces)
        operations.set(`${method.toLowerCase()} ${openApiPath(url)}`, { ...documented })
      }
      return { schema: rest, url }
    },
    transformObject: (documentObject) => {
      const doc = (documentObject as { openapiObject: { paths: Record<string, Record<string, JsonObject>>, components: { schemas?: JsonObject } } }).openapiObject
      for (const [path, item] of Object.entries(doc.paths)) {
        for (const [method, operation] of Object.entries(item)) {
          const documented = operations.get(`${method} ${path}`)
          if (documented !== undefined) Object.assign(operation, documented)
        }
      }
      doc.paths['/v1/assist'] = generateOpenApiPath() as Record<string, JsonObject>
      doc.components.schemas = { ...doc.components.schemas, ...generateOpenApiComponents() }
      return doc as never
    }
  })
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { requestInterceptor: freshRequestId } })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
}

export default fp(docs, { name: 'docs', fastify: '5.x' })
