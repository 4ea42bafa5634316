import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { RunEvents, runEventBatches } from '../ag-ui/events.js'
import { giveUp, resumeIntent } from '../ag-ui/interrupts.js'
import { envelopeOf, RunInputBody } from '../ag-ui/run-input.js'
import { resentAs } from '../protocol/binding-envelope.js'
import { AH_ERR_AGENT_NOT_FOUND } from '../errors.js'
import type { SseWriter } from '../http/sse-writer.js'
import { ASSIST_ERROR_RESPONSES, AgentPathParams } from '../protocol/openapi.js'
import type { RunRecord } from '../storage/runs.js'
import { clientSignal, sendSse } from './sse.js'

const AgUiEvents = Type.Unsafe<string>({ type: 'string', description: '`text/event-stream`: AG-UI events, each one `data:` line of JSON (RUN_STARTED first, RUN_FINISHED or RUN_ERROR last)' })
const {
  400: invalid, 401: unauthenticated, 403: forbidden, 404: notFound, 409: conflict, 410: expired, 413: tooLarge, 415: notJson, 429: limited, 500: internal, 503: unavailable
} = ASSIST_ERROR_RESPONSES

/**
 * The AG-UI binding (the mapping is `docs/ag-ui.md`): `POST /ag-ui/{agent}` takes AG-UI's
 * `RunAgentInput` and answers the run's AG-UI events over SSE. A run here is a CAP run like any
 * other (the same engine, journal, auth, limits and audit; its request id a UUID made from
 * `runId`), so the same run sent again is joined and sent whole from its start. What goes wrong
 * before the stream starts is a plain HTTP error with the catalogue's code, as on `/v1/assist`.
 */
const agUiRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post('/ag-ui/:agent_id', {
    schema: {
      operationId: 'agUiRun',
      tags: ['ag-ui'],
      summary: 'Run an agent for an AG-UI client (`HttpAgent`, CopilotKit)',
      description: 'AG-UI 1.0: a `RunAgentInput` in (`threadId` is the CAP session, `runId` the request, the last user message `payload.query`, `forwardedProps` the rest of the agent\'s arguments, `resume` the answers to the interrupts the thread\'s last run stopped at); its AG-UI events out as `text/event-stream`. A run that stops to ask ends with `RUN_FINISHED` whose outcome is `interrupt`. A run whose client goes away is cancelled (`forwardedProps.agent_host.on_disconnect: "continue"` keeps it going). Errors before the stream are the JSON errors of `/v1/assist`. See docs/ag-ui.md.',
      params: AgentPathParams,
      body: RunInputBody,
      response: { 200: AgUiEvents, 400: invalid, 401: unauthenticated, 403: forbidden, 404: notFound, 409: conflict, 410: expired, 413: tooLarge, 415: notJson, 429: limited, 500: internal, 503: unavailable }
    }
  }, async (request, reply) => {
    const hosted = app.agents.get(request.params.agent_id)
    if (hosted === undefined) throw new AH_ERR_AGENT_NOT_FOUND(request.params.agent_id)
    const agentId = hosted.manifest.metadata.id
    const input = request.body
    const identity = request.identity
    const intent = input.resume === undefined ? undefined : resumeIntent(input.resume)
    const fresh = envelopeOf(input, { agentId, userId: identity.id, traceId: request.traceId, ...(intent !== undefined && 'answers' in intent ? { resume: intent.answers } : {}) })
    // the same run sent again (same runId, same ask) is joined; another ask with its runId is the engine's 409
    const envelope = resentAs(fresh, await app.assist.sentBefore(fresh.request_id, identity))
    let slot: (() => void) | undefined
    let submission
    try {
      const prepared = await app.assist.prepare(envelope, { identity, delivery: 'server_sent_events' })
      if (prepared.outcome === 'start') {
        slot = await app.limits.openStream(request, reply)
        await app.limits.agentRun(request, reply, prepared.agent)
        if (intent !== undefined && 'cancelled' in intent) {
          await giveUp({ interrupts: app.stores.interrupts, runs: app.ledger, engine: app.assist }, { sessionId: envelope.context.session_id, agentId, ids: intent.cancelled }, identity)
        }
      }
      const trace = request.runTrace(envelope.context.trace)
      submission = await app.assist.begin(prepared, { log: request.log, ...(trace !== undefined ? { trace } : {}) })
    } catch (err) {
      slot?.()
      throw err
    }
    const record = await app.ledger.get(submission.requestId) as RunRecord
    const events = new RunEvents({ threadId: input.threadId, runId: input.runId, mainStreamId: record.main_stream_id })
    const client = clientSignal(reply)
    let writing: SseWriter | undefined
    return await sendSse(app, request, reply, {
      source: runEventBatches(app.assist, submission.requestId, events, { signal: client.signal, onSlow: () => { writing?.cut() } }),
      release: slot ?? await app.limits.openStream(request, reply),
      // AG-UI clients do not reconnect by SSE: sending the same run again is how to follow it again
      retryMs: 0,
      opened: (writer) => { writing = writer },
      onGone: (why) => { client.abort(why) },
      send: (writer, batch) => writer.sendDataAll(batch),
      // a stream that stops short of the run's last event is cut, not ended: the client sees it failed
      whole: () => events.ended
    })
  })
}

export default agUiRoutes
