import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { AssistRun } from '../../agents/assist-run.js'
import type { HostedAgent, HostedCapability } from '../../agents/hosted-agent.js'
import { toIssues } from '../../agents/json-schema.js'
import { resolveAgentRequest } from '../../agents/resolve-request.js'
import {
  AgentFailedError, AgentNotFoundError, NotAcceptableError, RequestConflictError, RunNotFoundError,
  ShuttingDownError, ValidationError, withDetails
} from '../../errors.js'
import { chooseDeliveryMode } from '../../http/negotiate.js'
import { SseWriter } from '../../http/sse-writer.js'
import { Uuid } from '../../protocol/common.js'
import { ServiceRequest } from '../../protocol/envelope.js'
import { ASSIST_ERROR_RESPONSES } from '../../protocol/openapi.js'
import { ErrorBody, ServiceResponse } from '../../protocol/response.js'

const errorResponses = Object.fromEntries(Object.keys(ASSIST_ERROR_RESPONSES).map((status) => [status, ErrorBody]))

/** The capability named by `metadata.capability`, else the agent's first. */
function pickCapability (hosted: HostedAgent, name: unknown): HostedCapability {
  if (name === undefined) return hosted.capabilities[0] as HostedCapability
  const found = hosted.capabilities.find((c) => c.capability.name === name)
  if (found !== undefined) return found
  const names = hosted.capabilities.map((c) => c.capability.name).join(', ')
  const path = '/payload/metadata/capability'
  throw withDetails(new ValidationError(`Invalid request: ${path} must name a capability of the agent (${names})`), {
    errors: [{ path, message: `must be one of: ${names}` }]
  })
}

/**
 * `POST /v1/assist` (and `POST /assist`): validate the envelope, dispatch to the agent, answer in
 * JSON or SSE (CAP.md §2-§5). `POST /v1/assist/:request_id/cancel` ends a running request.
 */
const assistRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const config = app.config

  async function assist (request: FastifyRequest<{ Body: ServiceRequest }>, reply: FastifyReply) {
    const envelope = request.body
    const resolved = resolveAgentRequest(envelope)
    const hosted = app.agents.get(envelope.context.agent_id)
    if (hosted === undefined) throw new AgentNotFoundError(envelope.context.agent_id)
    const capability = pickCapability(hosted, resolved.metadata.capability)
    if (capability.validateInput !== undefined && !capability.validateInput(resolved.payload)) {
      const errors = toIssues(capability.validateInput.errors, '/payload/payload')
      throw withDetails(new ValidationError(`Invalid agent input: ${errors.slice(0, 3).map((e) => `${e.path} ${e.message}`).join('; ')}`), { errors })
    }
    const mode = chooseDeliveryMode(request.headers.accept, capability.capability.delivery_mode)
    if (mode === undefined) throw new NotAcceptableError(request.headers.accept ?? '')
    if (app.runs.closing) throw new ShuttingDownError()
    if (app.runs.has(envelope.request_id)) throw new RequestConflictError(envelope.request_id)

    const log = request.log.child({ agent: hosted.manifest.metadata.name, requestId: envelope.request_id, mode })
    const run = new AssistRun({
      requestId: envelope.request_id,
      capability,
      log,
      supportedEvents: resolved.capabilities.supported_events
    })
    const session = app.sessions.open(resolved.session_id, envelope.context.user)
    if (mode === 'server_sent_events') {
      reply.hijack()
      run.attach(new SseWriter(reply.raw, {
        headers: reply.getHeaders() as OutgoingHttpHeaders,
        heartbeatMs: config.SSE_HEARTBEAT_MS,
        retryMs: config.SSE_RETRY_MS,
        maxBufferBytes: config.SSE_MAX_BUFFER_BYTES,
        onGone: (why) => {
          log.info({ why }, 'client gone; aborting the agent')
          run.detach(why)
        }
      }))
    } else {
      reply.raw.on('close', () => {
        if (!reply.raw.writableFinished) run.detach('client_disconnected')
      })
    }
    const settled = run.execute(hosted.agent, resolved, session).then(async () => {
      await run.ended
      await app.sessions.record(resolved.session_id, {
        request_id: envelope.request_id,
        timestamp: resolved.timestamp,
        input: resolved.payload,
        output: run.result ?? run.transcript.build()
      })
    }).catch((err: unknown) => { log.error({ err }, 'recording the interaction failed') })
    app.runs.track(run, settled)

    const reason = await run.ended
    log.info({ reason, packets: run.packets }, 'run ended')
    if (mode === 'server_sent_events') return reply

    if (reason !== 'done' && !run.transcript.produced) {
      if (reason === 'shutdown') throw new ShuttingDownError()
      throw withDetails(new AgentFailedError(), { error: run.fatalError ?? run.transcript.errors.at(-1) ?? null })
    }
    const result = run.result
    return reply.code(200).send({
      request_id: envelope.request_id,
      created_at: new Date().toISOString(),
      output: reason === 'done' && result !== undefined ? result : run.transcript.build(),
      metrics: { latency_ms: Math.round((performance.now() - run.startedAt) * 1000) / 1000, packets: run.packets }
    })
  }

  const schema = {
    body: ServiceRequest,
    response: { 200: ServiceResponse, ...errorResponses }
  }
  app.post('/v1/assist', { schema: { ...schema, tags: ['assist'] } }, assist)
  app.post('/assist', { schema: { ...schema, hide: true } }, assist)

  app.post('/v1/assist/:request_id/cancel', {
    schema: {
      tags: ['assist'],
      summary: 'Cancel a running request',
      description: 'Fires the agent\'s AbortSignal and ends every open stream with CLOSE `"cancelled"`.',
      params: Type.Object({ request_id: Uuid }),
      response: {
        202: Type.Object({ request_id: Uuid, cancelled: Type.Literal(true) }, { additionalProperties: false }),
        400: ErrorBody,
        404: ErrorBody
      }
    }
  }, async (request, reply) => {
    const run = app.runs.get(request.params.request_id)
    if (run === undefined || !run.cancel()) throw new RunNotFoundError(request.params.request_id)
    request.log.info({ requestId: run.requestId }, 'run cancelled')
    return reply.code(202).send({ request_id: run.requestId, cancelled: true as const })
  })
}

export default assistRoutes
