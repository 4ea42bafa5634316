import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import type { HostedAgent } from '../agents/hosted-agent.js'
import { AiSdkChats, DONE, type ChatStreamItem } from '../ai-sdk/chat-runs.js'
import type { ChatBody as ChatBodyType } from '../ai-sdk/chat-envelope.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import { AH_ERR_AGENT_NOT_FOUND, AH_ERR_RUN_NOT_FOUND } from '../errors.js'
import type { SseWriter } from '../http/sse-writer.js'
import { HostOptions } from '../protocol/binding-envelope.js'
import { CancelAccepted } from '../protocol/cancel.js'
import { ASSIST_ERROR_RESPONSES, AgentPathParams, errorResponse } from '../protocol/openapi.js'
import { clientSignal, sendSse } from './sse.js'

/** The header that names the AI SDK's UI message stream protocol (`UI_MESSAGE_STREAM_HEADERS` of `ai`). */
const UI_MESSAGE_STREAM_HEADER = 'x-vercel-ai-ui-message-stream'

const ChatParams = Type.Object({
  agent_id: AgentPathParams.properties.agent_id,
  chat_id: Type.String({ minLength: 1, maxLength: 256, description: 'The chat\'s `id` (`useChat`\'s `id`): a CAP session' })
})
const SentPart = Type.Object({ type: Type.String({ minLength: 1 }) }, { description: 'A UI message part (`text`, a tool part, ...)' })
const SentMessage = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 256 }),
  role: Type.String(),
  parts: Type.Array(SentPart)
}, { description: 'A UI message' })
const ChatBody = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 256, description: 'The chat\'s id: every request of the chat is in the same CAP session' }),
  messages: Type.Array(SentMessage, { minItems: 1, description: 'The chat\'s messages: the last one is the user\'s question, or the assistant\'s with its questions answered' }),
  trigger: Type.Optional(Type.String({ description: '`submit-message`, or `regenerate-message` (a new run)' })),
  messageId: Type.Optional(Type.String()),
  agent_host: Type.Optional(HostOptions)
}, { description: 'What `DefaultChatTransport` posts; the other fields (its `body`) are the agent\'s arguments besides `query`, but `agent_host`: the host\'s own (the capability, the timeout, what happens to the run when its client goes away)' })
const UiMessageStream = Type.String({ description: '`text/event-stream`: the AI SDK UI message stream (`data: <chunk JSON>` each, `data: [DONE]` last), with `x-vercel-ai-ui-message-stream: v1`' })
const agentNotFound = errorResponse('No agent has this id or name', new AH_ERR_AGENT_NOT_FOUND('nobody'))

/**
 * The AI SDK UI message stream binding (`docs/ai-sdk.md`): what `useChat`'s `DefaultChatTransport`
 * sends, with `api` = `/ai-sdk/{agent}/chat`. `POST` starts a run of the agent (or joins, or
 * answers its questions) and streams it as one assistant message; `GET .../{chat}/stream` (the
 * transport's `reconnectToStream`) replays the chat's running run from its start and follows it
 * (204 when none runs); `POST .../{chat}/stop` cancels it. The same hooks as `/v1/assist` (auth,
 * scopes, rate limits, CORS); a refusal before the stream is a plain HTTP error.
 */
const aiSdkRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const chats = new Map<string, AiSdkChats>()
  const chatsOf = (agentId: string): { hosted: HostedAgent, chats: AiSdkChats } => {
    const hosted = app.agents.get(agentId)
    if (hosted === undefined) throw new AH_ERR_AGENT_NOT_FOUND(agentId)
    const id = hosted.manifest.metadata.id
    let agentChats = chats.get(id)
    if (agentChats === undefined) chats.set(id, agentChats = new AiSdkChats({ engine: app.assist, store: app.ledger, interrupts: app.stores.interrupts, hosted }))
    return { hosted, chats: agentChats }
  }

  /** Stream run `requestId` as the UI message stream; a stream cut short of its run's end is cut, not ended. */
  async function stream (request: FastifyRequest, reply: FastifyReply, chats: AiSdkChats, requestId: string, whole: boolean, release?: () => void): Promise<FastifyReply> {
    const client = clientSignal(reply)
    let writing: SseWriter | undefined
    let complete = false
    reply.header(UI_MESSAGE_STREAM_HEADER, 'v1')
    return await sendSse<ChatStreamItem>(app, request, reply, {
      source: chats.stream(requestId, { whole, signal: client.signal, onSlow: () => { writing?.cut() } }),
      retryMs: 0,
      ...(release !== undefined ? { release } : {}),
      opened: (writer) => { writing = writer },
      onGone: (why) => { client.abort(why) },
      send: (writer, item) => {
        if (item === DONE) {
          complete = true
          return writer.sendData(DONE)
        }
        return writer.sendDataAll(item)
      },
      whole: () => complete
    })
  }

  app.post('/ai-sdk/:agent_id/chat', {
    schema: {
      operationId: 'aiSdkChat',
      tags: ['ai-sdk'],
      summary: 'Chat with an agent from the AI SDK (`useChat`, `DefaultChatTransport`)',
      description: 'The AI SDK UI message stream protocol: the chat\'s `id` is a CAP session, its last user message\'s text the agent\'s `query`, the other body fields the rest of its payload; the answer streams one assistant message (`start`, text, reasoning, sources, files, `data-*` parts, tool parts for questions, `finish`). The same message sent again joins its run; `trigger: "regenerate-message"` is a new run. The last message the assistant\'s, with its questions answered (`addToolApprovalResponse`, `addToolOutput`), answers them. Errors before the stream are plain HTTP errors.',
      params: AgentPathParams,
      body: ChatBody,
      response: { 200: UiMessageStream, ...ASSIST_ERROR_RESPONSES, 404: agentNotFound }
    }
  }, async (request, reply) => {
    const { chats } = chatsOf(request.params.agent_id)
    const envelope: ServiceRequest = await chats.envelope(request.body as ChatBodyType, request.identity, request.traceId)
    let slot: (() => void) | undefined
    let requestId: string
    try {
      const prepared = await app.assist.prepare(envelope, { identity: request.identity, delivery: 'server_sent_events' })
      if (prepared.outcome === 'start') {
        slot = await app.limits.openStream(request, reply)
        await app.limits.agentRun(request, reply, prepared.agent)
      }
      const trace = request.runTrace(envelope.context.trace)
      requestId = (await app.assist.begin(prepared, { log: request.log, ...(trace !== undefined ? { trace } : {}) })).requestId
    } catch (err) {
      slot?.()
      throw err
    }
    return await stream(request, reply, chats, requestId, false, slot)
  })

  app.get('/ai-sdk/:agent_id/chat/:chat_id/stream', {
    schema: {
      operationId: 'aiSdkChatResume',
      tags: ['ai-sdk'],
      summary: 'Resume a chat\'s stream (`useChat({ resume: true })`, `resumeStream()`)',
      description: 'The caller\'s running run of the chat, replayed from its start (the journal: the message comes out whole, once, as `DefaultChatTransport` expects by default) and followed live to its end; 204 when none runs.',
      params: ChatParams,
      response: { 200: UiMessageStream, 204: Type.Null({ description: 'No run of this chat is running' }), 404: agentNotFound }
    }
  }, async (request, reply) => {
    const { chats } = chatsOf(request.params.agent_id)
    const running = await chats.running(request.params.chat_id, request.identity)
    if (running === undefined) return await reply.code(204).send(null)
    return await stream(request, reply, chats, running.request_id, true)
  })

  app.post('/ai-sdk/:agent_id/chat/:chat_id/stop', {
    schema: {
      operationId: 'aiSdkChatStop',
      tags: ['ai-sdk'],
      summary: 'Stop a chat\'s running run',
      description: 'Cancels the caller\'s running run of the chat, as `POST /v1/assist/{request_id}/cancel` does: its streams (a resumed one too) end with `abort` and `finish`, and the run is recorded `cancelled`. 404 when none of the caller\'s runs of the chat is running.',
      params: ChatParams,
      response: {
        202: CancelAccepted,
        404: errorResponse('No agent has this id or name, or none of the caller\'s runs of this chat is running', new AH_ERR_AGENT_NOT_FOUND('nobody'), new AH_ERR_RUN_NOT_FOUND('my-chat'))
      }
    }
  }, async (request, reply) => {
    const { chats } = chatsOf(request.params.agent_id)
    const running = await chats.running(request.params.chat_id, request.identity)
    if (running === undefined) throw new AH_ERR_RUN_NOT_FOUND(request.params.chat_id)
    const requestId = (JSON.parse(running.envelope) as ServiceRequest).request_id
    await app.assist.cancel(requestId, request.identity)
    request.log.info({ requestId }, 'run cancelled')
    return await reply.code(202).send({ request_id: requestId, cancelled: true as const })
  })
}

export default aiSdkRoutes
