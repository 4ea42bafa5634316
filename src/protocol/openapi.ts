import { ServiceRequest } from './envelope.js'
import { StreamPacket } from './packets.js'
import { ErrorBody, ServiceResponse } from './response.js'

/** Plain JSON copy of a schema (what the served document holds). */
function plain<T> (schema: T): T {
  return JSON.parse(JSON.stringify(schema)) as T
}

const errorResponse = (description: string) => ({
  description,
  content: { 'application/json': { schema: plain(ErrorBody) } }
})

/** The error statuses `POST /v1/assist` may answer before a stream starts (CAP.md §6). */
export const ASSIST_ERROR_RESPONSES = {
  401: 'AUTH_MODE=apikey or jwt: no valid key or token (`AH_ERR_AUTH_REQUIRED`)',
  403: 'The key lacks `assist:invoke` or may not invoke this agent (`AH_ERR_FORBIDDEN`)',
  400: 'Envelope or agent input failed validation (`AH_ERR_VALIDATION`, `details.errors` lists the paths), or the body is not JSON (`AH_ERR_BODY_MALFORMED`)',
  404: 'No agent has `context.agent_id` (`AH_ERR_AGENT_NOT_FOUND`)',
  406: 'The `Accept` header admits neither JSON nor SSE (`AH_ERR_NOT_ACCEPTABLE`)',
  413: 'Body larger than `BODY_LIMIT` (`AH_ERR_BODY_TOO_LARGE`)',
  415: 'Body is not `application/json` (`AH_ERR_MEDIA_TYPE_UNSUPPORTED`)',
  429: 'The caller or the agent is past its rate limit (`AH_ERR_RATE_LIMITED`), or the caller holds `MAX_STREAMS_PER_CALLER` streams (`AH_ERR_TOO_MANY_STREAMS`); with `Retry-After`',
  500: 'Unexpected host failure (`AH_ERR_INTERNAL`)',
  502: 'JSON mode: the agent failed before producing anything (`AH_ERR_AGENT_FAILED`)',
  503: 'Shutting down (`AH_ERR_SHUTTING_DOWN`, with `Retry-After`), overloaded (`AH_ERR_OVERLOADED`, with `Retry-After`), a backend the agent needs is not available (`AH_ERR_BACKEND_UNAVAILABLE`, naming the settings to set), or the server holds `MAX_STREAMS` streams (`AH_ERR_TOO_MANY_STREAMS`, with `Retry-After`)',
  504: 'JSON mode: the run passed its timeout before producing anything (`AH_ERR_RUN_TIMEOUT`)'
} as const

/**
 * The OpenAPI 3.1 path item of `POST /v1/assist` (the seed's `ServiceContract.generate_openapi_path()`).
 * The served document holds exactly this object under `paths["/v1/assist"]`.
 */
export function generateOpenApiPath (): Record<string, unknown> {
  const responses: Record<string, unknown> = {
    200: {
      description: 'The agent\'s answer: a ServiceResponse (JSON mode) or a stream of StreamPacket events (SSE mode). ' +
        'The mode is the capability\'s `delivery_mode` unless `Accept` names exactly one of the two media types.',
      content: {
        'application/json': { schema: plain(ServiceResponse) },
        'text/event-stream': {
          schema: {
            ...plain(StreamPacket),
            description: 'Each SSE event is `event: stream.packet`, `id: <stream_id>`, `data: <StreamPacket as one-line JSON>`, then a blank line. ' +
              '`: ping` comments keep idle connections open.'
          }
        }
      }
    }
  }
  for (const [status, description] of Object.entries(ASSIST_ERROR_RESPONSES)) responses[status] = errorResponse(description)
  return {
    post: {
      operationId: 'assist',
      security: [{ bearerAuth: [] }],
      summary: 'Invoke a hosted agent',
      description: 'Validates the CAP envelope, dispatches to the agent named by `context.agent_id`, and answers in JSON or SSE.',
      tags: ['assist'],
      parameters: [{
        name: 'accept',
        in: 'header',
        required: false,
        description: '`application/json` or `text/event-stream` to override the agent\'s delivery mode',
        schema: { type: 'string' }
      }],
      requestBody: {
        required: true,
        content: { 'application/json': { schema: plain(ServiceRequest) } }
      },
      responses
    }
  }
}
