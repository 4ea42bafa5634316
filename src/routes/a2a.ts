import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import {
  A2A_CONTENT_TYPE, A2A_VERSION_HEADER, AgentCard, ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, SendMessageRequest, SendMessageResponse, StreamResponse, Task,
  TaskPushNotificationConfig
} from '@a2a-js/sdk'
import { A2A_ERROR_CODE, A2AError } from '@a2a-js/sdk/errors'
import { JsonRpcTransportHandler, type ServerCallContext } from '@a2a-js/sdk/server'
import pkg from '../../package.json' with { type: 'json' }
import { agentCard, hostCard } from '../a2a/agent-card.js'
import { CardSigner } from '../a2a/card-signature.js'
import { callContextOf, firstEvent, jsonRpcError, restError, restErrorFrame, restFrame, taskRef, unknownVerb } from '../a2a/http-binding.js'
import { AgentA2AHandler, type A2ACall } from '../a2a/request-handler.js'
import type { HostedAgent } from '../agents/hosted-agent.js'
import { AH_ERR_AGENT_NOT_FOUND } from '../errors.js'
import { JsonObject } from '../protocol/common.js'
import { AgentPathParams, errorResponse } from '../protocol/openapi.js'
import { clientSignal, sendSse } from './sse.js'

const TaskParams = Type.Object({
  agent_id: AgentPathParams.properties.agent_id,
  task: Type.String({ minLength: 1, maxLength: 256, description: 'A task id, then `:cancel` or `:subscribe` where the method asks for one' })
})
const VersionHeaders = Type.Object({ 'a2a-version': Type.Optional(Type.String({ description: 'The A2A protocol version the client speaks: `1.0` (absent means 0.3, which is not served: the refusal says to send `A2A-Version: 1.0`)' })) })
const A2ABody = Type.Unsafe<Record<string, unknown>>({ ...JsonObject, description: 'An A2A v1.0 message, as the A2A specification defines it' })
const A2AAnswer = Type.Unsafe<Record<string, unknown>>({ ...JsonObject, description: 'An A2A v1.0 answer; `text/event-stream` for the streaming methods' })
const agentNotFound = errorResponse('No agent has this id or name', new AH_ERR_AGENT_NOT_FOUND('nobody'))
const RestError = (description: string): ReturnType<typeof Type.Unsafe<Record<string, unknown>>> => Type.Unsafe<Record<string, unknown>>({ ...JsonObject, description })
/** The HTTP+JSON binding's errors: A2A's REST error bodies (`{ error: { code, status, message, details } }`), or this server's for an unknown agent. */
const REST_ERRORS = {
  400: RestError('An A2A error (`error.status`: `INVALID_ARGUMENT`, `FAILED_PRECONDITION`): a malformed request, an unsupported version or operation, a task that cannot be canceled'),
  404: RestError('No such task (A2A `NOT_FOUND`), or no agent has this id or name (`AH_ERR_AGENT_NOT_FOUND`)')
}
const ListQuery = Type.Object({
  contextId: Type.Optional(Type.String()),
  status: Type.Optional(Type.String()),
  pageSize: Type.Optional(Type.Integer()),
  pageToken: Type.Optional(Type.String()),
  historyLength: Type.Optional(Type.Integer()),
  statusTimestampAfter: Type.Optional(Type.String()),
  includeArtifacts: Type.Optional(Type.Boolean())
})

/**
 * The A2A v1.0 binding (the mapping is `docs/a2a.md`): every hosted agent is an A2A agent
 * with its card at `/a2a/{agent}/.well-known/agent-card.json`, its JSON-RPC binding at
 * `POST /a2a/{agent}` and its HTTP+JSON binding under `/a2a/{agent}/rest`; the host's card at
 * `/.well-known/agent-card.json` lists them. The methods are `AgentA2AHandler`'s, over the run
 * engine; the JSON-RPC framing is the SDK's `JsonRpcTransportHandler`. A refusal of who is calling
 * or of load (401, 403, 429, 503) is the HTTP answer itself, as on `/v1/assist`.
 */
const a2aRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const config = app.config
  const handlers = new Map<string, { handler: AgentA2AHandler, jsonRpc: JsonRpcTransportHandler }>()
  const origin = (request: FastifyRequest): string => `${request.protocol}://${request.host}`
  const signer = config.A2A_CARD_SIGNING_KEY_FILE === '' ? undefined : await CardSigner.load(config.A2A_CARD_SIGNING_KEY_FILE, config.A2A_CARD_SIGNING_KID)
  /** A card as served: its JSON, signed when A2A_CARD_SIGNING_KEY_FILE is set. */
  const served = async (card: AgentCard): Promise<Record<string, unknown>> => {
    const json = AgentCard.toJSON(card) as Record<string, unknown>
    return signer === undefined ? json : await signer.sign(json)
  }

  const hostedAgent = (id: string): HostedAgent => {
    const hosted = app.agents.get(id)
    if (hosted === undefined) throw new AH_ERR_AGENT_NOT_FOUND(id)
    return hosted
  }

  /** The agent's handler; its card names the URLs the request reached this server by. */
  const bindingOf = (hosted: HostedAgent, request: FastifyRequest): { handler: AgentA2AHandler, jsonRpc: JsonRpcTransportHandler, card: AgentCard } => {
    const card = agentCard(hosted, origin(request), config.AUTH_MODE)
    const id = hosted.manifest.metadata.id
    let binding = handlers.get(id)
    if (binding === undefined) {
      const handler = new AgentA2AHandler({ engine: app.assist, store: app.ledger, hosted, card: () => agentCard(hosted, '', config.AUTH_MODE), push: app.a2aPush.configs, interrupts: app.stores.interrupts })
      binding = { handler, jsonRpc: new JsonRpcTransportHandler(handler) }
      handlers.set(id, binding)
    }
    return { ...binding, card }
  }

  /** The call's context ({@link callContextOf}), aborted when the client goes away. */
  const contextOf = (request: FastifyRequest, reply: FastifyReply, hosted: HostedAgent, card: AgentCard, binding: 'JSONRPC' | 'HTTP+JSON'): { context: ServerCallContext, call: A2ACall } => {
    const controller = clientSignal(reply)
    return callContextOf({
      identity: request.identity,
      traceId: request.traceId,
      agent: hosted.manifest.metadata,
      card,
      binding,
      version: request.headers[A2A_VERSION_HEADER.toLowerCase()],
      admit: async (target) => { await app.limits.agentRun(request, reply, target) },
      signal: controller.signal
    })
  }

  /**
   * Stream `events` as SSE: a refusal before the first event is still a plain answer (`early`); a
   * failure later is an `error` event (`errorFrame`), then the end.
   */
  const stream = async <T>(request: FastifyRequest, reply: FastifyReply, call: A2ACall, events: AsyncGenerator<T, void, undefined>, frame: (event: T) => string, errorFrame: (err: unknown) => string, early: (err: unknown) => Promise<FastifyReply>): Promise<FastifyReply> => {
    const started = await firstEvent(events)
    if ('failed' in started) {
      if (call.httpError !== undefined) throw call.httpError
      return await early(started.failed)
    }
    return await sendSse(app, request, reply, {
      source: started.events,
      retryMs: 0,
      send: (writer, event) => writer.sendData(frame(event)),
      failed: (err, writer) => { writer.sendData(errorFrame(err), 'error') }
    })
  }

  app.get('/.well-known/agent-card.json', {
    schema: {
      operationId: 'a2aHostCard',
      tags: ['a2a'],
      summary: 'The host\'s A2A agent card: a directory of its agents\' cards',
      response: { 200: A2AAnswer }
    }
  }, async (request) => await served(hostCard(app.agents.list(), origin(request), config.AUTH_MODE, pkg.version)))

  app.get('/a2a/:agent_id/.well-known/agent-card.json', {
    schema: {
      operationId: 'a2aAgentCard',
      tags: ['a2a'],
      summary: 'An agent\'s A2A agent card (v1.0)',
      description: 'Name, version, skills (the agent\'s capabilities), streaming, the security scheme of `AUTH_MODE`, and the JSON-RPC (`/a2a/{agent_id}`) and HTTP+JSON (`/a2a/{agent_id}/rest`) interfaces.',
      params: AgentPathParams,
      response: { 200: A2AAnswer, 404: agentNotFound }
    }
  }, async (request) => await served(agentCard(hostedAgent(request.params.agent_id), origin(request), config.AUTH_MODE)))

  // a body that is not JSON, or not an object, is JSON-RPC's parse error or invalid request (HTTP 200), as a JSON-RPC client expects
  const jsonRpcErrorHandler = (err: FastifyError, request: FastifyRequest, reply: FastifyReply): unknown => {
    const parse = err instanceof SyntaxError || err.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || err.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || err.code === 'AH_ERR_BODY_MALFORMED'
    if (!parse && err.validationContext !== 'body') return app.errorHandler(err, request, reply)
    return reply.code(200).send({ jsonrpc: '2.0', id: null, error: { code: parse ? A2A_ERROR_CODE.PARSE_ERROR : A2A_ERROR_CODE.INVALID_REQUEST, message: parse ? `Parse error: ${err.message}` : 'Invalid Request: the body must be a JSON-RPC request object' } })
  }

  app.post('/a2a/:agent_id', {
    errorHandler: jsonRpcErrorHandler,
    schema: {
      operationId: 'a2aJsonRpc',
      tags: ['a2a'],
      summary: 'A2A v1.0 JSON-RPC binding of an agent',
      description: 'JSON-RPC 2.0: `SendMessage`, `SendStreamingMessage` and `SubscribeToTask` (answered as `text/event-stream`), `GetTask`, `ListTasks`, `CancelTask`, and `Create`/`Get`/`List`/`DeleteTaskPushNotificationConfig(s)`. Send `A2A-Version: 1.0`. A2A errors are JSON-RPC errors (HTTP 200); who is calling and load are HTTP answers (401, 403, 429, 503).',
      params: AgentPathParams,
      headers: VersionHeaders,
      body: A2ABody,
      response: { 200: A2AAnswer, 404: agentNotFound }
    }
  }, async (request, reply) => {
    const hosted = hostedAgent(request.params.agent_id)
    const { jsonRpc, card } = bindingOf(hosted, request)
    const id = (request.body.id ?? null) as string | number | null
    let context: ServerCallContext
    let call: A2ACall
    try {
      ({ context, call } = contextOf(request, reply, hosted, card, 'JSONRPC'))
    } catch (err) {
      if (!(err instanceof A2AError)) throw err
      return jsonRpcError(id, err)
    }
    const answer = await jsonRpc.handle(request.body, context)
    if (call.httpError !== undefined) throw call.httpError
    if (!(Symbol.asyncIterator in answer)) return answer as unknown as Record<string, unknown>
    return await stream(request, reply, call, answer, (event) => JSON.stringify(event),
      (err) => JSON.stringify(jsonRpcError(id, err)),
      async (err) => await reply.send(jsonRpcError(id, err)))
  })

  /** An HTTP+JSON method: the A2A error of a failure as its REST error body and status; a refusal of the caller or of load as itself. */
  // a CAP refusal of the caller or of load is no A2A error: Fastify's error handler answers it
  // (typed as the routes' 200 answer: Fastify's types do not know a handler may return the reply it sent)
  const rest = async (reply: FastifyReply, call: () => Promise<unknown>): Promise<Record<string, unknown>> => {
    try {
      return await call() as Record<string, unknown>
    } catch (err) {
      const answer = restError(err)
      if (answer === undefined) throw err
      return await reply.code(answer.status).type(A2A_CONTENT_TYPE).send(answer.body) as unknown as Record<string, unknown>
    }
  }

  const restStream = async (request: FastifyRequest, reply: FastifyReply, call: A2ACall, events: AsyncGenerator<StreamResponse, void, undefined>): Promise<FastifyReply> =>
    await stream(request, reply, call, events, restFrame, restErrorFrame, async (err) => {
      const answer = restError(err)
      if (answer === undefined) throw err
      return await reply.code(answer.status).type(A2A_CONTENT_TYPE).send(answer.body)
    })

  const restSchema = <T extends object>(operationId: string, summary: string, extra: T) => ({
    operationId,
    tags: ['a2a'],
    summary,
    headers: VersionHeaders,
    response: { 200: A2AAnswer, ...REST_ERRORS },
    ...extra
  })

  /** The call's handler and context for an HTTP+JSON method (its errors are the REST binding's). */
  const restCall = (request: FastifyRequest, reply: FastifyReply): { handler: AgentA2AHandler, context: ServerCallContext, call: A2ACall } => {
    const hosted = hostedAgent((request.params as { agent_id: string }).agent_id)
    const { handler, card } = bindingOf(hosted, request)
    return { handler, ...contextOf(request, reply, hosted, card, 'HTTP+JSON') }
  }

  app.post('/a2a/:agent_id/rest/message::send', { schema: restSchema('a2aRestSendMessage', 'A2A HTTP+JSON: send a message, wait for its task', { params: AgentPathParams, body: A2ABody }) }, async (request, reply) =>
    await rest(reply, async () => {
      const { handler, context } = restCall(request, reply)
      const result = await handler.sendMessage(SendMessageRequest.fromJSON(request.body), context)
      return SendMessageResponse.toJSON({ payload: 'messageId' in result ? { $case: 'message', value: result } : { $case: 'task', value: result } })
    }))

  app.post('/a2a/:agent_id/rest/message::stream', { schema: restSchema('a2aRestStreamMessage', 'A2A HTTP+JSON: send a message, stream its task (`text/event-stream`)', { params: AgentPathParams, body: A2ABody }) }, async (request, reply) =>
    await rest(reply, async () => {
      const { handler, context, call } = restCall(request, reply)
      return await restStream(request, reply, call, handler.sendMessageStream(SendMessageRequest.fromJSON(request.body), context))
    }))

  app.get('/a2a/:agent_id/rest/tasks', { schema: restSchema('a2aRestListTasks', 'A2A HTTP+JSON: the caller\'s tasks of this agent, newest first', { params: AgentPathParams, querystring: ListQuery }) }, async (request, reply) =>
    await rest(reply, async () => {
      const { handler, context } = restCall(request, reply)
      const params = ListTasksRequest.fromJSON(request.query)
      const listed = await handler.listTasks(params, context)
      return ListTasksResponse.toJSON(listed)
    }))

  app.get('/a2a/:agent_id/rest/tasks/:task', { schema: restSchema('a2aRestGetTask', 'A2A HTTP+JSON: a task (`GET /tasks/{id}`), or a re-subscription to it (`GET /tasks/{id}:subscribe`, `text/event-stream`)', { params: TaskParams, querystring: Type.Object({ historyLength: Type.Optional(Type.Integer()) }) }) }, async (request, reply) =>
    await rest(reply, async () => {
      const { id, verb } = taskRef(request.params.task)
      const { handler, context, call } = restCall(request, reply)
      if (verb === 'subscribe') return await restStream(request, reply, call, handler.resubscribe({ tenant: '', id }, context))
      if (verb !== '') unknownVerb(verb)
      return Task.toJSON(await handler.getTask({ tenant: '', id, historyLength: request.query.historyLength }, context))
    }))

  app.post('/a2a/:agent_id/rest/tasks/:task', { config: { emptyJsonBody: true }, schema: restSchema('a2aRestTaskMethod', 'A2A HTTP+JSON: cancel a task (`POST /tasks/{id}:cancel`) or re-subscribe to it (`POST /tasks/{id}:subscribe`)', { params: TaskParams }) }, async (request, reply) =>
    await rest(reply, async () => {
      const { id, verb } = taskRef(request.params.task)
      const { handler, context, call } = restCall(request, reply)
      if (verb === 'subscribe') return await restStream(request, reply, call, handler.resubscribe({ tenant: '', id }, context))
      if (verb !== 'cancel') unknownVerb(verb)
      return Task.toJSON(await handler.cancelTask({ tenant: '', id, metadata: undefined }, context))
    }))

  // push notification configs of a task
  const PushParams = Type.Object({
    agent_id: AgentPathParams.properties.agent_id,
    task: Type.String({ minLength: 1, maxLength: 256, description: 'A task id' })
  })
  const ConfigParams = Type.Object({
    ...PushParams.properties,
    config: Type.String({ minLength: 1, maxLength: 256, description: 'A push notification config id' })
  })
  const pushConfigsUrl = '/a2a/:agent_id/rest/tasks/:task/pushNotificationConfigs'

  app.post(pushConfigsUrl, {
    schema: restSchema('a2aRestCreatePushConfig', 'A2A HTTP+JSON: register a URL the task\'s updates are pushed to (signed; see docs/a2a.md, "Push notifications")', {
      params: PushParams,
      body: A2ABody,
      response: { 201: A2AAnswer, ...REST_ERRORS }
    })
  }, async (request, reply) =>
    await rest(reply, async () => {
      const { handler, context } = restCall(request, reply)
      const created = await handler.createTaskPushNotificationConfig(TaskPushNotificationConfig.fromJSON({ ...(request.body as Record<string, unknown>), taskId: request.params.task }), context)
      return await reply.code(201).type(A2A_CONTENT_TYPE).send(TaskPushNotificationConfig.toJSON(created) as Record<string, unknown>)
    }))

  app.get(pushConfigsUrl, {
    schema: restSchema('a2aRestListPushConfigs', 'A2A HTTP+JSON: the task\'s push notification configs', {
      params: PushParams,
      querystring: Type.Object({ pageSize: Type.Optional(Type.Integer()), pageToken: Type.Optional(Type.String()) })
    })
  }, async (request, reply) =>
    await rest(reply, async () => {
      const { handler, context } = restCall(request, reply)
      return ListTaskPushNotificationConfigsResponse.toJSON(await handler.listTaskPushNotificationConfigs({ tenant: '', taskId: request.params.task, pageSize: request.query.pageSize ?? 0, pageToken: request.query.pageToken ?? '' }, context))
    }))

  app.get(`${pushConfigsUrl}/:config`, { schema: restSchema('a2aRestGetPushConfig', 'A2A HTTP+JSON: one push notification config of the task', { params: ConfigParams }) }, async (request, reply) =>
    await rest(reply, async () => {
      const { handler, context } = restCall(request, reply)
      return TaskPushNotificationConfig.toJSON(await handler.getTaskPushNotificationConfig({ tenant: '', taskId: request.params.task, id: request.params.config }, context))
    }))

  app.delete(`${pushConfigsUrl}/:config`, {
    config: { emptyJsonBody: true },
    schema: restSchema('a2aRestDeletePushConfig', 'A2A HTTP+JSON: stop pushing to a config and delete it (204; one already gone is no error)', {
      params: ConfigParams,
      response: { 204: Type.Null({ description: 'Deleted' }), ...REST_ERRORS }
    })
  }, async (request, reply) =>
    await rest(reply, async () => {
      const { handler, context } = restCall(request, reply)
      await handler.deleteTaskPushNotificationConfig({ tenant: '', taskId: request.params.task, id: request.params.config }, context)
      return await reply.code(204).send(null)
    }))
}

export default a2aRoutes
