import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { ValidateFunction } from 'ajv'
import { createAjv } from '../agents/json-schema.js'

/**
 * One Ajv with what it compiled, kept for the process as agentAjv is: a second app in the same
 * process (a worker beside the server, every test) compiles nothing again; compiling the route
 * schemas took about a fifth of an app's build. Kept by JSON text, not only by object as Ajv keeps
 * them: Fastify hands over a new copy of some schemas for every app (a route's querystring and
 * headers, as it normalises them). Route schemas are plain JSON, with no shared schemas to $ref.
 */
function validators (options: Parameters<typeof createAjv>[0]): (schema: object) => ValidateFunction {
  const ajv = createAjv(options)
  const kept = new Map<string, ValidateFunction>()
  return (schema) => {
    const text = JSON.stringify(schema)
    let validate = kept.get(text)
    if (validate === undefined) kept.set(text, validate = ajv.compile(schema))
    return validate
  }
}

const bodyValidator = validators({ coerceTypes: false, removeAdditional: true, useDefaults: true })
const otherValidator = validators({ coerceTypes: 'array', removeAdditional: true, useDefaults: true })

/**
 * Bodies are JSON only (CAP.md §6: anything else is a 415), so Fastify's text/plain parser goes.
 * Validators: bodies are checked without type coercion (a number is not a string) and with unknown
 * keys dropped (CAP.md §2); querystrings, params and headers are coerced as usual.
 */
async function validation (app: FastifyInstance): Promise<void> {
  app.removeContentTypeParser('text/plain')
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? bodyValidator : otherValidator)(schema))
}

export default fp(validation, { name: 'validation', fastify: '5.x' })
