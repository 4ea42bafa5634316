import { STATUS_CODES } from 'node:http'
import { Type, type Static, type TSchema, type TUnsafe } from 'typebox'
import {
  AH_ERR_AGENT_FAILED, AH_ERR_AGENT_NOT_FOUND, AH_ERR_AUTH_REQUIRED, AH_ERR_BACKEND_UNAVAILABLE, AH_ERR_BODY_MALFORMED, AH_ERR_BODY_TOO_LARGE,
  AH_ERR_FORBIDDEN, AH_ERR_HOST_REFUSED, AH_ERR_INTERNAL, AH_ERR_INTERRUPT_ANSWER_INVALID, AH_ERR_INTERRUPT_CLOSED, AH_ERR_INTERRUPT_EXPIRED, AH_ERR_INTERRUPT_NOT_FOUND, AH_ERR_MEDIA_TYPE_UNSUPPORTED, AH_ERR_NOT_ACCEPTABLE, AH_ERR_OVERLOADED, AH_ERR_RATE_LIMITED,
  AH_ERR_REQUEST_CONFLICT, AH_ERR_RUN_TIMEOUT, AH_ERR_SESSION_NOT_FOUND, AH_ERR_SHUTTING_DOWN, AH_ERR_STORAGE_BUSY, AH_ERR_TOO_MANY_STREAMS,
  AH_ERR_VALIDATION, errorBody, withDetails
} from '../errors.js'
import { componentRef, documentSchema, type JsonObject } from './components.js'
import { AssistHeaders, type ServiceRequest } from './envelope.js'
import type { StreamPacket } from './packets.js'
import { ErrorBody, type ServiceResponse } from './response.js'

/** What an error example is made from: a catalogue error, as `errorBody()` takes it. */
export type ErrorExample = Parameters<typeof errorBody>[0]

/**
 * `schema` with an OpenAPI description and examples (the JSON Schema annotations `description` and
 * `examples`, which validators and serializers ignore). The document shows the description on the
 * response and the examples beside the schema, which stays a `$ref` when it is a named component.
 */
export function documented<T extends TSchema> (schema: T, doc: { description?: string, examples?: Array<Static<T>> }): TUnsafe<Static<T>> {
  return Type.Unsafe<Static<T>>({ ...JSON.parse(JSON.stringify(schema)) as TSchema, ...doc })
}

/** An ErrorBody response schema for one status: what it means, and the bodies of the errors that answer it. */
export function errorResponse (description: string, ...errors: ErrorExample[]): TUnsafe<ErrorBody> {
  return documented(ErrorBody, { description, examples: errors.map((error) => errorBody(error)) })
}

/** An `AH_ERR_VALIDATION` error as the host raises it for one failing path (`what`: request or agent input). */
export function validationError (path: string, message: string, what = 'request'): ErrorExample {
  return withDetails(new AH_ERR_VALIDATION(`Invalid ${what}: ${path} ${message}`), { errors: [{ path, message }] })
}

/** The generic answers of a scoped route (the auth and limits plugins add them), for a route that needs `scope`. */
export function genericErrorResponses (scope: string): Record<number, TUnsafe<ErrorBody>> {
  return {
    401: errorResponse('AUTH_MODE=apikey or jwt: no valid key or token; send `Authorization: Bearer <key>` (*Authorize* in Swagger UI)',
      new AH_ERR_AUTH_REQUIRED('send Authorization: Bearer <key>')),
    403: errorResponse(`The key lacks the scope \`${scope}\`; or, bound to loopback, the DNS-rebinding guard refused the \`Host\` or \`Origin\` header (\`AH_ERR_HOST_REFUSED\`)`,
      new AH_ERR_FORBIDDEN(`this key lacks the scope "${scope}"`), new AH_ERR_HOST_REFUSED('Host "attacker.example:3000" is not a name of this server (add it to ALLOWED_HOSTS)')),
    429: errorResponse('The caller used up its requests for the window (`RATE_LIMIT_MAX`), or its address failed to authenticate `AUTH_FAILURE_MAX` times; `Retry-After` says when to come back',
      withDetails(new AH_ERR_RATE_LIMITED('this caller may make 600 requests per 60 s'), { limit: 'caller', max: 600, window_ms: 60000, retry_after_s: 42 }))
  }
}

/** The error an example shows: a host error body, or the one in a JSON-RPC error's `data` (how `/mcp` answers). */
function exampleError (example: unknown): { code: string, message: string } | undefined {
  if (typeof example !== 'object' || example === null) return undefined
  const e = example as { code?: unknown, statusCode?: unknown, error?: { data?: unknown } }
  if (typeof e.code === 'string' && 'statusCode' in e) return e as { code: string, message: string }
  return exampleError(e.error?.data)
}

/** One error example per media type entry, named by its code (Swagger UI lists them by name). */
function errorExamples (examples: unknown[]): JsonObject {
  const named: JsonObject = {}
  for (const example of examples) {
    const error = exampleError(example) as { code: string, message: string }
    let name = error.code
    for (let n = 2; name in named; n++) name = `${error.code}_${n}`
    named[name] = { summary: error.message, value: example as JsonObject }
  }
  return named
}

/** A media type entry: the schema (a `$ref` when it is a component) and its examples. */
function mediaOf (schema: JsonObject, examples: unknown[] | undefined): JsonObject {
  const media: JsonObject = { schema: documentSchema(schema) }
  if (examples === undefined || examples.length === 0) return media
  if (examples.every((e) => exampleError(e) !== undefined)) media.examples = errorExamples(examples)
  else if (examples.length === 1) media.example = examples[0]
  else media.examples = Object.fromEntries(examples.map((value, i) => [`example${i + 1}`, { value }]))
  return media
}

/** Split the annotations `documented()` adds from the schema they annotate. */
function annotations (schema: unknown): { description: string | undefined, examples: unknown[] | undefined, rest: JsonObject } {
  const { description, examples, ...rest } = JSON.parse(JSON.stringify(schema)) as JsonObject
  return { description: description as string | undefined, examples: examples as unknown[] | undefined, rest }
}

/**
 * The OpenAPI `responses` of a route from its Fastify response schemas: each status's description
 * and examples (see {@link documented}), its body under `produces` (default `application/json`;
 * an error answer is always JSON), and for a `type: null` schema no body at all.
 */
export function openApiResponses (response: Record<string, unknown>, produces: readonly string[] = ['application/json']): Record<string, JsonObject> {
  const responses: Record<string, JsonObject> = {}
  for (const [status, schema] of Object.entries(response)) {
    const { description, examples, rest } = annotations(schema)
    const isError = Number(status) >= 400
    const entry: JsonObject = { description: description ?? (documentSchema(rest).$ref === componentRef('ErrorBody').$ref ? 'Error' : STATUS_CODES[Number(status)] ?? 'Response') }
    // errors are JSON whatever the route produces otherwise (the error handler sends them)
    if (rest.type !== 'null') entry.content = Object.fromEntries((isError ? ['application/json'] : produces).map((type) => [type, mediaOf(rest, examples)]))
    responses[status] = entry
  }
  return responses
}

/** The OpenAPI `requestBody` of a route from its Fastify body schema (a `$ref` when it is a component, with its examples). */
export function openApiRequestBody (body: unknown, consumes: readonly string[] = ['application/json']): JsonObject {
  const { description, examples, rest } = annotations(body)
  return {
    required: true,
    ...(description !== undefined ? { description } : {}),
    content: Object.fromEntries(consumes.map((type) => [type, mediaOf(rest, examples)]))
  }
}

/** `metadata.id` of the bundled echo agent (`agents/echo`), which the document's examples ask. */
export const ECHO_AGENT_ID = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01'

/** The path parameters of a protocol binding's routes that name an agent (`/a2a/{agent_id}`, `/ai-sdk/{agent_id}/chat`, `/ag-ui/{agent_id}`). */
export const AgentPathParams = Type.Object({ agent_id: Type.String({ minLength: 1, maxLength: 256, description: 'The agent\'s `metadata.id` or `metadata.name`', examples: [ECHO_AGENT_ID] }) })

/** The session the examples use; `GET /v1/sessions/{session_id}/history` is pre-filled with it. */
export const EXAMPLE_SESSION_ID = '3f9c2a71-5b8e-4d0c-9a12-6e4b7d8c0f21'
/** The id of a run's question in the examples (human in the loop). */
const EXAMPLE_INTERRUPT_ID = '5d0c3b57-2f7e-4d7a-9a43-5b8f2d1c6e90'

/**
 * The example envelope of `POST /v1/assist`, which Swagger UI pre-fills: it asks the echo agent,
 * so that *Try it out* → *Execute* answers 200 (in JSON and in SSE mode). Sent again unchanged it
 * joins (replays) the same run; changed, it needs a new `request_id`. Swagger UI replaces this
 * `request_id` with a new one on each *Execute* (`plugins/swagger.ts:freshRequestId`).
 */
export const ASSIST_EXAMPLE = {
  request_id: '0c6f4e2a-9b1d-4f3e-8a57-2d9e6b1c4a01',
  context: {
    session_id: EXAMPLE_SESSION_ID,
    agent_id: ECHO_AGENT_ID,
    user: { user_id: 'swagger-ui', tier: 'free', locale: 'en-US' },
    trace: { trace_id: '7d1e5b3a-2c4f-4a6b-8e9d-1f2a3b4c5d01', span_id: '7d1e5b3a-2c4f-4a6b-8e9d-1f2a3b4c5d02' },
    permissions: [],
    created_at: '2026-01-01T12:00:00.000Z'
  },
  payload: {
    session_id: EXAMPLE_SESSION_ID,
    payload: { query: 'Hello from Swagger UI' }
  }
} satisfies ServiceRequest

const EXAMPLE_STREAM_ID = 'a4b3c2d1-0e9f-4a8b-9c7d-6e5f4a3b2c01'

const EXAMPLE_RESPONSE = {
  request_id: ASSIST_EXAMPLE.request_id,
  created_at: '2026-01-01T12:00:00.012Z',
  output: { echo: 'Hello from Swagger UI', calls: 1 },
  metrics: { latency_ms: 4.2, packets: 2 }
} satisfies ServiceResponse

const EXAMPLE_PACKETS = {
  result: {
    summary: 'EVENT: the echo agent\'s result',
    value: { stream_id: EXAMPLE_STREAM_ID, seq: 1, op: 'EVENT', t: '2026-01-01T12:00:00.010Z', p: { type: 'RESULT', data: { echo: 'Hello from Swagger UI', calls: 1 } } }
  },
  close: {
    summary: 'CLOSE: the main stream\'s last packet',
    value: { stream_id: EXAMPLE_STREAM_ID, seq: 2, op: 'CLOSE', t: '2026-01-01T12:00:00.011Z', p: 'done' }
  }
} satisfies Record<string, { summary: string, value: StreamPacket }>

const tooManyStreams = (max: number, status: number): ErrorExample =>
  Object.assign(withDetails(new AH_ERR_TOO_MANY_STREAMS(status === 503 ? `the server holds ${max} open already` : `this caller holds ${max} open already`),
    { limit: status === 503 ? 'total_streams' : 'caller_streams', max }), { statusCode: status })

/**
 * The error statuses `POST /v1/assist` may answer before a stream starts (CAP.md §6), each with
 * what it means and example bodies; the route declares them as its response schemas.
 */
export const ASSIST_ERROR_RESPONSES = {
  400: errorResponse('The envelope or the agent input failed validation (`AH_ERR_VALIDATION`, `details.errors` lists the paths; also a malformed `payload.payload.resume`), the body is not JSON (`AH_ERR_BODY_MALFORMED`), or an answer to a run\'s question does not match it (`AH_ERR_INTERRUPT_ANSWER_INVALID`: the question stays open)',
    validationError('/payload/payload/query', 'must have required property \'query\'', 'agent input'),
    validationError('/context/agent_id', 'must match format "uuid"'),
    new AH_ERR_BODY_MALFORMED('Body is not valid JSON but content-type is set to \'application/json\''),
    withDetails(new AH_ERR_INTERRUPT_ANSWER_INVALID(EXAMPLE_INTERRUPT_ID, '/payload/payload/resume/0/value/answer must be string'), { errors: [{ path: '/payload/payload/resume/0/value/answer', message: 'must be string' }] })),
  401: errorResponse('AUTH_MODE=apikey or jwt: no valid key or token (`AH_ERR_AUTH_REQUIRED`); in Swagger UI, *Authorize* first',
    new AH_ERR_AUTH_REQUIRED('send Authorization: Bearer <key>')),
  403: errorResponse('The key lacks `assist:invoke` or may not invoke this agent (`AH_ERR_FORBIDDEN`)',
    new AH_ERR_FORBIDDEN('this key lacks the scope "assist:invoke"'), new AH_ERR_FORBIDDEN('this key may not invoke agent "echo"')),
  404: errorResponse('No agent has `context.agent_id` (`AH_ERR_AGENT_NOT_FOUND`), the session belongs to another key (`AH_ERR_SESSION_NOT_FOUND`), or a resume names a question no run of this session asked, or another caller\'s (`AH_ERR_INTERRUPT_NOT_FOUND`)',
    new AH_ERR_AGENT_NOT_FOUND('5e0c7a9b-1d2f-4e3a-8b4c-000000000000'), new AH_ERR_SESSION_NOT_FOUND(EXAMPLE_SESSION_ID), new AH_ERR_INTERRUPT_NOT_FOUND(EXAMPLE_INTERRUPT_ID)),
  406: errorResponse('The `Accept` header admits neither JSON nor SSE (`AH_ERR_NOT_ACCEPTABLE`)', new AH_ERR_NOT_ACCEPTABLE('text/html')),
  409: errorResponse('The `request_id` was already used with a different envelope (`AH_ERR_REQUEST_CONFLICT`): a new question needs a new `request_id`; or a resume answers a question answered already, or whose run went on or ended (`AH_ERR_INTERRUPT_CLOSED`)',
    new AH_ERR_REQUEST_CONFLICT(ASSIST_EXAMPLE.request_id), new AH_ERR_INTERRUPT_CLOSED(EXAMPLE_INTERRUPT_ID, 'it was answered already')),
  410: errorResponse('A resume answers a run whose question expired (`AH_ERR_INTERRUPT_EXPIRED`): the run is over and takes no answer',
    new AH_ERR_INTERRUPT_EXPIRED(EXAMPLE_INTERRUPT_ID, '2026-11-30T10:00:00.000Z')),
  413: errorResponse('Body larger than `BODY_LIMIT` (`AH_ERR_BODY_TOO_LARGE`)', new AH_ERR_BODY_TOO_LARGE(1048576)),
  415: errorResponse('Body is not `application/json` (`AH_ERR_MEDIA_TYPE_UNSUPPORTED`)', new AH_ERR_MEDIA_TYPE_UNSUPPORTED('text/plain')),
  429: errorResponse('The caller or the agent is past its rate limit (`AH_ERR_RATE_LIMITED`), or the caller holds `MAX_STREAMS_PER_CALLER` streams (`AH_ERR_TOO_MANY_STREAMS`); with `Retry-After`',
    withDetails(new AH_ERR_RATE_LIMITED('agent "echo" may be given 100 new runs per 60 s'), { limit: 'agent', max: 100, window_ms: 60000, retry_after_s: 17 }),
    tooManyStreams(20, 429)),
  500: errorResponse('Unexpected host failure (`AH_ERR_INTERNAL`); the details are in the server log only', new AH_ERR_INTERNAL()),
  502: errorResponse('JSON mode: the agent failed before producing anything (`AH_ERR_AGENT_FAILED`)',
    withDetails(new AH_ERR_AGENT_FAILED(), { error: { code: 'agent_failed', message: 'The agent failed', severity: 'FATAL' } })),
  503: errorResponse('Shutting down (`AH_ERR_SHUTTING_DOWN`, with `Retry-After`), overloaded (`AH_ERR_OVERLOADED`, with `Retry-After`), a backend the agent needs is not available (`AH_ERR_BACKEND_UNAVAILABLE`, naming the settings to set), the database is locked by another process (`AH_ERR_STORAGE_BUSY`), or the server holds `MAX_STREAMS` streams (`AH_ERR_TOO_MANY_STREAMS`, with `Retry-After`)',
    new AH_ERR_SHUTTING_DOWN(), new AH_ERR_OVERLOADED('eventLoopDelay'),
    new AH_ERR_BACKEND_UNAVAILABLE('the openai backend needs OPENAI_API_KEY'), new AH_ERR_STORAGE_BUSY(5000), tooManyStreams(1000, 503)),
  504: errorResponse('JSON mode: the run passed its timeout before producing anything (`AH_ERR_RUN_TIMEOUT`)',
    withDetails(new AH_ERR_RUN_TIMEOUT(), { error: { code: 'run_timeout', message: 'The run took longer than 300000 ms and was stopped', severity: 'TRANSIENT', details: { timeout_ms: 300000 } } }))
}

const ASSIST_DESCRIPTION = [
  'Runs the agent named by `context.agent_id` (its manifest `metadata.id`) on `payload.payload`, and answers with one JSON document or a Server-Sent Events stream of packets.',
  '',
  '**JSON or SSE** (CAP.md §3): the agent\'s capability decides by its `delivery_mode` (`request_response`: JSON, `server_sent_events`: SSE), unless the `Accept` header names exactly one of `application/json` and `text/event-stream`. In Swagger UI, the *Media type* list of the 200 response below sets `Accept` (until you pick one it sends `Accept: */*`, and the agent\'s mode applies).',
  '',
  '**Try it out**: the example asks the bundled echo agent and answers 200. A `request_id` names one run: the same body again replays that run\'s answer, and a changed body with the same `request_id` is a 409. So Swagger UI sends the example\'s placeholder `request_id` as a new random one on each *Execute* (each try is a new run, edited or not); a `request_id` you type in is sent as it is. With AUTH_MODE=apikey or jwt, *Authorize* first; a session belongs to the key that started it (another key gets 404 for it).',
  '',
  '**Streams**: Swagger UI reads the whole response before it shows it, so in SSE mode you see the packets only once the stream ends. To watch them arrive, use the playground at [/playground](/playground), or `curl -N -H \'content-type: application/json\' -H \'accept: text/event-stream\' -d @envelope.json http://127.0.0.1:3000/v1/assist`. To resume a cut stream, send the same envelope again with `Last-Event-ID`.'
].join('\n')

/**
 * The OpenAPI 3.1 path item of `POST /v1/assist` (the seed's `ServiceContract.generate_openapi_path()`).
 * The served document holds exactly this object under `paths["/v1/assist"]`; its `$ref`s point
 * into `components.schemas` (`generateOpenApiComponents()`).
 */
export function generateOpenApiPath (): Record<string, unknown> {
  return {
    post: {
      operationId: 'assist',
      security: [{ bearerAuth: [] }],
      summary: 'Invoke a hosted agent',
      description: ASSIST_DESCRIPTION,
      tags: ['assist'],
      parameters: [{
        name: 'last-event-id',
        in: 'header',
        required: false,
        description: 'Resume an SSE response (CAP.md §5): the `stream_id` of the request\'s main stream (replay everything), or `<stream_id>:<seq>` (skip what you have), with the same envelope',
        schema: documentSchema(AssistHeaders.properties['last-event-id'])
      }],
      requestBody: {
        required: true,
        content: {
          'application/json': {
            schema: componentRef('ServiceRequest'),
            examples: { echo: { summary: 'Ask the echo agent', value: ASSIST_EXAMPLE } }
          }
        }
      },
      responses: {
        200: {
          description: 'The agent\'s answer. `application/json`: a ServiceResponse. `text/event-stream`: one StreamPacket per event, each event being `event: stream.packet`, `id: <stream_id>`, `data: <the packet as one-line JSON>` and a blank line; `: ping` comments keep an idle stream open.',
          content: {
            'application/json': {
              schema: componentRef('ServiceResponse'),
              examples: { echo: { summary: 'The echo agent\'s result', value: EXAMPLE_RESPONSE } }
            },
            'text/event-stream': {
              schema: componentRef('StreamPacket'),
              examples: EXAMPLE_PACKETS
            }
          }
        },
        ...openApiResponses(ASSIST_ERROR_RESPONSES)
      }
    }
  }
}
