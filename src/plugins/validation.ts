import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { ValidateFunction } from 'ajv'
import { createAjv } from '../agents/json-schema.js'

/**
 * One Ajv with what it compiled, kept for the process as agentAjv is: a second app in the same
 * process (a worker beside the server, every test) compiles nothing again. Kept by JSON text, not
 * only by object as Ajv keeps them: Fastify hands over a new copy of some schemas for every app (a
 * route's querystring and headers, as it normalises them). Route schemas are plain JSON, with no
 * shared schemas to $ref.
 *
 * Each is compiled when its route is first called, not when the route is added: compiling every
 * route's schemas was a fifth of a boot's CPU (some 0.4 s of 2), paid by every server, worker and
 * CLI process, most of which call a few routes or none. `test/plugins/validation.test.ts` compiles
 * every route's, so that a schema Ajv refuses still fails a test rather than its first request.
 */
function validators (options: Parameters<typeof createAjv>[0]): (schema: object) => ValidateFunction {
  const ajv = createAjv(options)
  const kept = new Map<string, ValidateFunction>()
  return (schema) => {
    const text = JSON.stringify(schema)
    let validate = kept.get(text)
    if (validate === undefined) kept.set(text, validate = lazily(() => ajv.compile(schema)))
    return validate
  }
}

/** The route validators not compiled yet, each as the call that compiles it. */
const uncompiled = new Set<() => ValidateFunction>()

/** A validator that compiles itself on its first call, with Ajv's `errors` of each call as its own. */
export function lazily (compile: () => ValidateFunction): ValidateFunction {
  let compiled: ValidateFunction | undefined
  const force = (): ValidateFunction => {
    if (compiled === undefined) {
      compiled = compile()
      uncompiled.delete(force)
    }
    return compiled
  }
  uncompiled.add(force)
  const validate = ((data: unknown) => {
    const inner = force()
    const valid = inner(data)
    validate.errors = inner.errors
    return valid
  }) as ValidateFunction
  return validate
}

/** Compile every route validator that has not been called yet (a test's proof that Ajv takes every route's schema): how many. */
export function compilePendingValidators (): number {
  const pending = [...uncompiled]
  for (const force of pending) force()
  return pending.length
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
