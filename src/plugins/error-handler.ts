import fp from 'fastify-plugin'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import {
  AH_ERR_BODY_MALFORMED, errorBody, AH_ERR_BODY_TOO_LARGE, AH_ERR_INTERNAL, AH_ERR_MEDIA_TYPE_UNSUPPORTED, AH_ERR_METHOD_NOT_ALLOWED, AH_ERR_REQUEST_INVALID,
  AH_ERR_ROUTE_NOT_FOUND, AH_ERR_STORAGE_BUSY, AH_ERR_STORAGE_UNAVAILABLE, AH_ERR_VALIDATION, withDetails
} from '../errors.js'
import { isBusy, isUnavailable } from '../storage/busy.js'
import { logIncoming } from './tracing.js'
import { toIssues } from '../agents/json-schema.js'
import type { ErrorBody } from '../protocol/response.js'

type HostError = Error & { code: string, statusCode?: number, details?: Record<string, unknown> }

/** Translate anything thrown in a request into a catalogue error. */
function toHostError (err: FastifyError, request: FastifyRequest): HostError {
  if (err.validation !== undefined) {
    const root = err.validationContext === 'body' ? '' : `/${err.validationContext ?? 'request'}`
    const errors = toIssues(err.validation as never, root)
    const summary = errors.slice(0, 3).map((e) => `${e.path} ${e.message}`).join('; ')
    return withDetails(new AH_ERR_VALIDATION(`Invalid request: ${summary}${errors.length > 3 ? ` (+${errors.length - 3} more)` : ''}`), { errors })
  }
  if (typeof err.code === 'string' && err.code.startsWith('AH_ERR_')) return err as HostError
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE': return new AH_ERR_BODY_TOO_LARGE(request.routeOptions.bodyLimit ?? 0)
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE': return new AH_ERR_MEDIA_TYPE_UNSUPPORTED(request.headers['content-type'] ?? '(none)')
    case 'FST_ERR_CTP_EMPTY_JSON_BODY': return new AH_ERR_BODY_MALFORMED('the body is empty')
    case 'FST_ERR_CTP_INVALID_JSON_BODY': return new AH_ERR_BODY_MALFORMED(err.message)
  }
  if (err instanceof SyntaxError) return new AH_ERR_BODY_MALFORMED(err.message)
  // a write that found the database locked by another process, outside the engine's retries
  if (isBusy(err)) return new AH_ERR_STORAGE_BUSY(request.server.config.DB_BUSY_TIMEOUT_MS, { cause: err })
  if (isUnavailable(err)) return new AH_ERR_STORAGE_UNAVAILABLE({ cause: err })
  const status = err.statusCode ?? 500
  if (status >= 400 && status < 500) return new AH_ERR_REQUEST_INVALID(err.message)
  return new AH_ERR_INTERNAL({ cause: err })
}

/** The methods an `Allow` header may list (not OPTIONS: CORS answers preflights on every path). */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const

/** The methods some route serves `url` with (the router's own match, so parameters and wildcards count). */
function allowedMethods (app: FastifyInstance, url: string): string[] {
  const path = url.split('?', 1)[0] as string
  return METHODS.filter((method) => app.findRoute({ method, url: path }) !== null)
}

/** How much of a refused body is read and thrown away, as a multiple of the route's body limit, before the connection is cut. */
const DISCARD_FACTOR = 16

/**
 * A body the content-type parser refused before its end (larger than the route's body limit): read
 * the rest and throw it away, up to {@link DISCARD_FACTOR} times the limit, then cut the connection.
 * Fastify asks for `Connection: close`, and Node then closes the socket as soon as the answer is
 * written: a client still sending its body (curl, with or without `Expect: 100-continue`) is reset
 * and never reads the 413. Read to its end, the request leaves the connection usable.
 */
function discardBody (request: FastifyRequest, reply: FastifyReply): void {
  reply.removeHeader('connection')
  const raw = request.raw
  const bound = DISCARD_FACTOR * (request.routeOptions.bodyLimit ?? request.server.initialConfig.bodyLimit ?? 1048576)
  let read = 0
  raw.on('data', (chunk: Buffer) => {
    read += chunk.length
    if (read > bound) raw.socket.destroy()
  })
  raw.resume()
}

/**
 * The error body (CAP.md §6: `{ statusCode, code, error, message, details? }`) answering `err`,
 * thrown while serving `request`: logged (5xx with its cause; the body says nothing of internals),
 * with what the reply needs besides (`Retry-After` on a 503; the rest of a refused body read and
 * dropped). The app's error handler sends it as it is; a protocol with an error shape of its own
 * (`/mcp`: JSON-RPC errors) sends it wrapped, from an error handler of its routes.
 */
export function errorAnswer (err: FastifyError, request: FastifyRequest, reply: FastifyReply): ErrorBody {
  logIncoming(request)
  const error = toHostError(err, request)
  const statusCode = error.statusCode ?? 500
  if (statusCode === 503) request.log.warn({ code: error.code }, 'request refused: unavailable')
  else if (statusCode >= 500) request.log.error({ err }, 'request failed')
  else request.log.info({ code: error.code, message: error.message }, 'request rejected')
  if (statusCode === 503 && !reply.hasHeader('retry-after')) reply.header('retry-after', '5')
  if (reply.getHeader('connection') === 'close' && !request.raw.complete) discardBody(request, reply)
  return errorBody({ ...error, statusCode, code: error.code, message: error.message, details: error.details })
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The error body of a failure, logged, with the headers it needs ({@link errorAnswer}): what a protocol with an error shape of its own wraps. */
    errorAnswer: typeof errorAnswer
  }
}

/** One error body for every failure ({@link errorAnswer}), and for every path no route serves. */
async function errorHandler (app: FastifyInstance): Promise<void> {
  app.decorate('errorAnswer', errorAnswer)
  app.setErrorHandler((err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const body = errorAnswer(err, request, reply)
    return reply.code(body.statusCode).type('application/json; charset=utf-8').send(body)
  })
  app.setNotFoundHandler((request, reply) => {
    // an OPTIONS that is no CORS preflight asks for nothing this server serves
    const allowed = request.method === 'OPTIONS' ? [] : allowedMethods(app, request.url)
    // a route of this method that found nothing (reply.callNotFound: a file not there) is a 404
    if (allowed.length > 0 && !allowed.includes(request.method)) {
      return reply.code(405).header('allow', allowed.join(', ')).send(errorBody(new AH_ERR_METHOD_NOT_ALLOWED(request.method, request.url, allowed.join(', '))))
    }
    return reply.code(404).send(errorBody(new AH_ERR_ROUTE_NOT_FOUND(request.method, request.url)))
  })
}

export default fp(errorHandler, { name: 'error-handler', fastify: '5.x' })
