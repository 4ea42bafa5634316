import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import type { Cursor } from '../../assist/engine.js'
import type { Frame } from '../../assist/frame-queue.js'
import { AH_ERR_RUN_NOT_FOUND } from '../../errors.js'
import { deliveryOf } from '../../http/negotiate.js'
import type { SseWriter } from '../../http/sse-writer.js'
import { clientSignal, sendSse } from '../sse.js'
import { CancelAccepted } from '../../protocol/cancel.js'
import { Uuid } from '../../protocol/common.js'
import { AssistHeaders, ServiceRequest } from '../../protocol/envelope.js'
import { ASSIST_ERROR_RESPONSES, errorResponse, validationError } from '../../protocol/openapi.js'
import { SSE_EVENT_NAME } from '../../protocol/packets.js'
import { ServiceResponse } from '../../protocol/response.js'

/** `Last-Event-ID` (already checked by the headers schema) as a cursor. */
function cursorOf (header: string | undefined): Cursor | undefined {
  if (header === undefined || header === '') return undefined
  const [streamId, seq] = header.toLowerCase().split(':') as [string, string | undefined]
  return seq === undefined ? { streamId } : { streamId, seq: Number(seq) }
}

/**
 * `POST /v1/assist` (and `POST /assist`): the envelope in, through the run engine, a JSON answer or
 * an SSE stream out (CAP.md §2-§5). `POST /v1/assist/:request_id/cancel` ends a running request.
 * Thin by design: schema → `submit` → the answer, or the frames of `follow` into the SSE writer.
 */
const assistRoutes: FastifyPluginAsyncTypebox = async (app) => {
  async function stream (request: FastifyRequest, reply: FastifyReply, requestId: string, after: Cursor | undefined, client: AbortController, release: () => void): Promise<void> {
    let writing: SseWriter | undefined
    let complete = false
    const frames = app.assist.follow(requestId, { ...(after !== undefined ? { after } : {}), signal: client.signal, onSlow: () => { writing?.cut() } })
    // a response that stops short of its last packet is cut, so the client knows to resume
    await sendSse(app, request, reply, {
      source: frames,
      release,
      opened: (writer) => { writing = writer },
      onGone: (why) => { client.abort(why) },
      send: (writer, batch) => {
        if ((batch.at(-1) as Frame).final) complete = true
        return writer.sendPackets(SSE_EVENT_NAME, batch)
      },
      whole: () => complete
    })
  }

  async function assist (request: FastifyRequest<{ Body: ServiceRequest, Headers: AssistHeaders }>, reply: FastifyReply) {
    const after = cursorOf(request.headers['last-event-id'])
    const accept = request.headers.accept
    // a stream's slot is taken as soon as a new run is known to need one: a caller over the cap starts no run
    let slot: (() => void) | undefined
    let submission
    try {
      const prepared = await app.assist.prepare(request.body, { identity: request.identity, delivery: deliveryOf(accept) ?? { refused: accept ?? '' }, resuming: after !== undefined })
      if (prepared.outcome === 'start') {
        if (prepared.mode === 'server_sent_events') slot = await app.limits.openStream(request, reply)
        await app.limits.agentRun(request, reply, prepared.agent)
      }
      const trace = request.runTrace(request.body.context.trace)
      submission = await app.assist.begin(prepared, { log: request.log, ...(trace !== undefined ? { trace } : {}) })
    } catch (err) {
      slot?.()
      throw err
    }
    const client = clientSignal(reply)
    if (submission.mode === 'server_sent_events') {
      await stream(request, reply, submission.requestId, after, client, slot ?? await app.limits.openStream(request, reply))
      return reply
    }
    slot?.()
    const answer = await app.assist.answer(submission.requestId, { signal: client.signal })
    if (answer.status === 503) reply.header('retry-after', '5')
    return await reply.code(answer.status).send(answer.body)
  }

  // the document shows generateOpenApiPath() for this route (CAP.md §8), from the same error responses
  const schema = {
    body: ServiceRequest,
    headers: AssistHeaders,
    response: { 200: ServiceResponse, ...ASSIST_ERROR_RESPONSES }
  }
  app.post('/v1/assist', { schema: { ...schema, operationId: 'assist', tags: ['assist'] }, config: { traceFromEnvelope: true } }, assist)
  app.post('/assist', { schema: { ...schema, hide: true }, config: { traceFromEnvelope: true } }, assist)

  app.post('/v1/assist/:request_id/cancel', {
    schema: {
      operationId: 'cancelAssist',
      tags: ['assist'],
      summary: 'Cancel a running request',
      description: 'Fires the agent\'s AbortSignal and ends every open stream with CLOSE `"cancelled"`, on whichever server runs it. A run that stopped to ask (CLOSE `"input_required"`) is ended instead: its questions take no answer any more (409). Only the caller who started the run, its tenant\'s `tenant-admin` or an `admin` may; for anyone else it is a 404.',
      params: Type.Object({ request_id: Uuid }),
      response: {
        202: CancelAccepted,
        400: errorResponse('`request_id` is not a UUID', validationError('/params/request_id', 'must match format "uuid"')),
        404: errorResponse('No run with this id is still going, or it is not the caller\'s', new AH_ERR_RUN_NOT_FOUND('0c6f4e2a-9b1d-4f3e-8a57-2d9e6b1c4a01'))
      }
    }
  }, async (request, reply) => {
    await app.assist.cancel(request.params.request_id, request.identity)
    request.log.info({ requestId: request.params.request_id }, 'run cancelled')
    return reply.code(202).send({ request_id: request.params.request_id, cancelled: true as const })
  })
}

export default assistRoutes
