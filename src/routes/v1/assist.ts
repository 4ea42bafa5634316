import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { setTimeout as sleep } from 'node:timers/promises'
import type { DisconnectPolicy } from '../../agents/assist-run.js'
import { envelopeHash, type RunAnswer } from '../../agents/run-service.js'
import type { RunRecord } from '../../storage/runs.js'
import { SSE_EVENT_NAME, type StreamPacket } from '../../protocol/packets.js'
import type { HostedAgent, HostedCapability } from '../../agents/hosted-agent.js'
import { toIssues } from '../../agents/json-schema.js'
import { resolveAgentRequest } from '../../agents/resolve-request.js'
import {
  AgentNotFoundError, NotAcceptableError, RequestConflictError, RunNotFoundError, SessionNotFoundError,
  ShuttingDownError, ValidationError, withDetails
} from '../../errors.js'
import { chooseDeliveryMode } from '../../http/negotiate.js'
import { checkAgentAccess } from '../../plugins/auth.js'
import { grants } from '../../auth/scopes.js'
import { SseWriter } from '../../http/sse-writer.js'
import { Uuid } from '../../protocol/common.js'
import { ServiceRequest } from '../../protocol/envelope.js'
import { ASSIST_ERROR_RESPONSES } from '../../protocol/openapi.js'
import { ErrorBody, ServiceResponse } from '../../protocol/response.js'

const errorResponses = Object.fromEntries(Object.keys(ASSIST_ERROR_RESPONSES).map((status) => [status, ErrorBody]))

/** A `Last-Event-ID`: a stream id, optionally with the last `seq` the client has (`<stream_id>:<seq>`). */
interface Cursor {
  streamId: string
  seq?: number
}

const CURSOR = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?::(\d{1,15}))?$/i

function parseCursor (header: string | string[] | undefined): Cursor | undefined {
  if (header === undefined || header === '') return undefined
  const match = CURSOR.exec(Array.isArray(header) ? header.join(',') : header)
  if (match === null) {
    const path = '/headers/last-event-id'
    throw withDetails(new ValidationError(`Invalid request: ${path} must be <stream_id> or <stream_id>:<seq>`), { errors: [{ path, message: 'must be <stream_id> or <stream_id>:<seq>' }] })
  }
  const cursor: Cursor = { streamId: (match[1] as string).toLowerCase() }
  if (match[2] !== undefined) cursor.seq = Number(match[2])
  return cursor
}

/** The run's timeout: `payload.metadata.timeout_ms` (a positive integer) within RUN_TIMEOUT_MS. */
function runTimeout (value: unknown, max: number): number {
  if (value === undefined) return max
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    const path = '/payload/metadata/timeout_ms'
    throw withDetails(new ValidationError(`Invalid request: ${path} must be a positive integer (milliseconds)`), { errors: [{ path, message: 'must be a positive integer' }] })
  }
  return max === 0 ? value : Math.min(value, max)
}

function disconnectPolicy (value: unknown): DisconnectPolicy | undefined {
  if (value === undefined) return undefined
  if (value === 'continue' || value === 'cancel') return value
  const path = '/payload/metadata/on_disconnect'
  throw withDetails(new ValidationError(`Invalid request: ${path} must be "continue" or "cancel"`), { errors: [{ path, message: 'must be "continue" or "cancel"' }] })
}

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

  function openWriter (request: FastifyRequest, reply: FastifyReply, onGone: (why: 'client_disconnected' | 'slow_consumer', writer: SseWriter) => void): SseWriter {
    const release = app.limits.openStream(request, reply)
    reply.hijack()
    return new SseWriter(reply.raw, {
      headers: reply.getHeaders() as OutgoingHttpHeaders,
      heartbeatMs: config.SSE_HEARTBEAT_MS,
      retryMs: config.SSE_RETRY_MS,
      maxBufferBytes: config.SSE_MAX_BUFFER_BYTES,
      stallMs: config.SSE_STALL_TIMEOUT_MS,
      onGone,
      metrics: app.metrics.sse,
      onFinished: release
    })
  }

  /**
   * Write journaled wire packets after `afterOrd`, waiting for the client to drain its socket
   * (a long journal must not count as a slow consumer), until the journal has nothing newer.
   * Returns the last `ord` written.
   */
  async function drainJournal (writer: SseWriter, requestId: string, afterOrd: number): Promise<number> {
    let last = afterOrd
    for (let rows = app.runStore.rows(requestId, last); rows.length > 0 && !writer.finished; rows = app.runStore.rows(requestId, last)) {
      for (const row of rows) {
        const drained = row.seq !== null ? writer.send(SSE_EVENT_NAME, row.stream_id, row.frame) : undefined
        last = row.ord
        if (drained !== undefined) await drained
        if (writer.finished) break
      }
    }
    return last
  }

  /** Write journaled wire packets after `afterOrd` at once (see `drainJournal`); returns the last `ord` written. */
  function writeJournal (writer: SseWriter, requestId: string, afterOrd: number): number {
    let last = afterOrd
    for (const row of app.runStore.rows(requestId, afterOrd)) {
      if (row.seq !== null) writer.send(SSE_EVENT_NAME, row.stream_id, row.frame)
      last = row.ord
    }
    return last
  }

  /**
   * A known request id with the same envelope, in SSE mode: replay its journal after the cursor,
   * then follow the run while it is still going (here, or in another process on the same DATA_DIR).
   */
  async function replay (request: FastifyRequest, reply: FastifyReply, record: RunRecord, cursor: Cursor | undefined, log: FastifyBaseLogger): Promise<void> {
    const id = record.request_id
    const live = app.runs.get(id)
    const writer = openWriter(request, reply, (why, w) => { live?.detach(w, why) })
    let after = cursor?.seq === undefined ? 0 : (app.runStore.ordOf(id, cursor.streamId, cursor.seq) ?? 0)
    log.info({ requestId: id, after, live: live !== undefined }, 'resuming a known request')
    after = await drainJournal(writer, id, after)
    if (live !== undefined) {
      // what was journaled while we waited, then follow: in one tick, so no packet falls between
      after = writeJournal(writer, id, after)
      live.attach(writer, after)
      await live.ended
      return
    }
    let current: RunRecord | undefined = record
    while (current !== undefined && current.state === 'running' && !writer.finished) {
      if (app.runService.orphaned(current)) {
        current = app.runService.recover(current)
      } else {
        await sleep(100)
        current = app.runStore.get(id)
      }
      after = await drainJournal(writer, id, after)
    }
    writer.end()
  }

  /** A resume cursor for a request the journal no longer holds: ERROR `resume_gap`, then CLOSE. */
  function resumeGap (request: FastifyRequest, reply: FastifyReply, cursor: Cursor): void {
    const writer = openWriter(request, reply, () => {})
    const seq = (cursor.seq ?? 0) + 1
    const packets: StreamPacket[] = [
      { stream_id: cursor.streamId, seq, op: 'ERROR', t: new Date().toISOString(), p: { code: 'resume_gap', message: 'This request is no longer in the journal (it is older than its retention); send a new request', severity: 'FATAL' } },
      { stream_id: cursor.streamId, seq: seq + 1, op: 'CLOSE', t: new Date().toISOString(), p: 'aborted' }
    ]
    for (const packet of packets) writer.write(packet, JSON.stringify(packet))
    writer.end()
  }

  function observe (hosted: HostedAgent, mode: string, end: string, startedAt: number): void {
    const labels = { agent: hosted.manifest.metadata.name, mode }
    app.metrics.assistDuration.observe(labels, (performance.now() - startedAt) / 1000)
    app.metrics.runs.inc({ ...labels, end })
  }

  async function sendAnswer (reply: FastifyReply, answer: RunAnswer): Promise<FastifyReply> {
    if (answer.status === 503) reply.header('retry-after', '5')
    return await reply.code(answer.status).send(answer.body)
  }

  async function assist (request: FastifyRequest<{ Body: ServiceRequest }>, reply: FastifyReply) {
    const envelope = request.body
    const resolved = resolveAgentRequest(envelope)
    const hosted = app.agents.get(envelope.context.agent_id)
    if (hosted === undefined) throw new AgentNotFoundError(envelope.context.agent_id)
    checkAgentAccess(app, request, { id: hosted.manifest.metadata.id, name: hosted.manifest.metadata.name, requiresAuth: hosted.manifest.metadata.requires_auth })
    const capability = pickCapability(hosted, resolved.metadata.capability)
    if (capability.validateInput !== undefined && !capability.validateInput(resolved.payload)) {
      const errors = toIssues(capability.validateInput.errors, '/payload/payload')
      throw withDetails(new ValidationError(`Invalid agent input: ${errors.slice(0, 3).map((e) => `${e.path} ${e.message}`).join('; ')}`), { errors })
    }
    const onDisconnect = disconnectPolicy(resolved.metadata.on_disconnect) ?? config.DISCONNECT_POLICY
    const timeoutMs = runTimeout(resolved.metadata.timeout_ms, config.RUN_TIMEOUT_MS)
    const mode = chooseDeliveryMode(request.headers.accept, capability.capability.delivery_mode)
    if (mode === undefined) throw new NotAcceptableError(request.headers.accept ?? '')
    const cursor = parseCursor(request.headers['last-event-id'])
    if (app.runs.closing) throw new ShuttingDownError()
    const who = request.identity
    if (!grants(who.scopes, 'admin') && app.sessions.claim(resolved.session_id, envelope.context.user.user_id, who.id) !== who.id) {
      // another key's session: 404, not 403, so that session ids cannot be probed
      throw new SessionNotFoundError(resolved.session_id)
    }
    // the agent sees only the permissions its caller holds
    resolved.context = { ...resolved.context, permissions: resolved.context.permissions.filter((p) => grants(who.scopes, p)) }

    const hash = envelopeHash(envelope)
    const log = request.log.child({ agent: hosted.manifest.metadata.name, requestId: envelope.request_id, envelopeTraceId: envelope.context.trace.trace_id, mode })
    const known = app.runService.find(envelope.request_id)
    if (known !== undefined) {
      if (known.envelope_hash !== hash) throw new RequestConflictError(envelope.request_id)
      if (mode === 'request_response') return await sendAnswer(reply, await app.runService.answer(known))
      await replay(request, reply, known, cursor, log)
      return reply
    }
    if (cursor !== undefined && mode === 'server_sent_events') {
      resumeGap(request, reply, cursor)
      return reply
    }
    if (hosted.agent.backends !== undefined) await app.backends.require(hosted.agent.backends)
    await app.limits.agentRun(request, reply, { id: hosted.manifest.metadata.id, name: hosted.manifest.metadata.name })

    if (mode === 'server_sent_events') {
      const sink = openWriter(request, reply, (why, writer) => {
        log.info({ why, policy: onDisconnect }, 'client gone')
        run.detach(writer, why)
      })
      const run = app.runService.start({ envelope, envelopeHash: hash, resolved, hosted, capability, log, onDisconnect, sink, timeoutMs })
      const reason = await run.ended
      observe(hosted, mode, reason, run.startedAt)
      log.info({ reason, packets: run.packets }, 'run ended')
      return reply
    }
    const run = app.runService.start({ envelope, envelopeHash: hash, resolved, hosted, capability, log, onDisconnect, timeoutMs })
    run.ended.then((reason) => { observe(hosted, mode, reason, run.startedAt) }, () => {})
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) run.detach(undefined, 'client_disconnected')
    })
    const record = app.runService.find(envelope.request_id) as RunRecord
    return await sendAnswer(reply, await app.runService.answer(record))
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
