import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { AH_ERR_BODY_MALFORMED } from '../errors.js'
import { jsonDepthExceeds } from '../http/json-depth.js'

/**
 * `application/json` (and `application/a2a+json`) bodies: Fastify's own parser (so prototype-poisoning keys stay refused), after
 * a check that the body nests no deeper than MAX_BODY_DEPTH. Everything downstream that walks a
 * body recursively (validation, canonical hashing of the envelope) can then never overflow the
 * stack: a deeper body is a 400 `AH_ERR_BODY_MALFORMED` before it is even parsed.
 */
declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route takes a JSON content type with no body at all (A2A's `POST /tasks/{id}:subscribe`, whose clients send one). */
    emptyJsonBody?: boolean
  }
}

async function jsonBody (app: FastifyInstance): Promise<void> {
  const max = app.config.MAX_BODY_DEPTH
  const parse = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser('application/json')
  // application/a2a+json: the A2A HTTP+JSON binding's own media type (JSON, under the same rules)
  app.addContentTypeParser(['application/json', 'application/a2a+json'], { parseAs: 'string' }, (request, body, done) => {
    const text = body as string
    if (text === '' && request.routeOptions.config.emptyJsonBody === true) {
      done(null, undefined)
      return
    }
    if (jsonDepthExceeds(text, max)) {
      done(new AH_ERR_BODY_MALFORMED(`it nests arrays or objects deeper than ${max} levels (MAX_BODY_DEPTH)`), undefined)
      return
    }
    parse(request, text, done)
  })
}

export default fp(jsonBody, { name: 'json-body', fastify: '5.x', dependencies: ['config'] })
