import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { createAjv } from '../agents/json-schema.js'

// One pair for the process, as agentAjv is: Ajv caches what it compiled by schema object, and the
// route schemas are module constants, so a second app in the same process (a worker beside the
// server, every test) compiles nothing again; compiling them took about a fifth of an app's build
const bodyAjv = createAjv({ coerceTypes: false, removeAdditional: true, useDefaults: true })
const otherAjv = createAjv({ coerceTypes: 'array', removeAdditional: true, useDefaults: true })

/**
 * Bodies are JSON only (CAP.md §6: anything else is a 415), so Fastify's text/plain parser goes.
 * Validators: bodies are checked without type coercion (a number is not a string) and with unknown
 * keys dropped (CAP.md §2); querystrings, params and headers are coerced as usual.
 */
async function validation (app: FastifyInstance): Promise<void> {
  app.removeContentTypeParser('text/plain')
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? bodyAjv : otherAjv).compile(schema))
}

export default fp(validation, { name: 'validation', fastify: '5.x' })
