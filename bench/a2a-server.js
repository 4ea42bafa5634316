// The peer to beat: the official A2A JS SDK (@a2a-js/sdk, a dev dependency) with Express 5, its
// DefaultRequestHandler and in-memory task store, the JSON-RPC transport at "/" (A2A-Version: 1.0).
// SendMessage answers with a Message echoing the text; SendStreamingMessage streams one
// artifact-update per word of the text (one event-loop turn each), then completes the task.
// Prints one JSON line, {"url": ...}, once listening.
import { randomUUID } from 'node:crypto'
import express from 'express'
import { A2A_PROTOCOL_VERSION, Role, TaskState } from '@a2a-js/sdk'
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server'
import { jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express'

const card = {
  name: 'echo',
  description: 'Echoes the text it gets',
  supportedInterfaces: [{ url: 'http://127.0.0.1/', protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }],
  version: '1.0.0',
  capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text'],
  defaultOutputModes: ['text'],
  skills: [{ id: 'echo', name: 'echo', description: 'echo', tags: [], examples: [], inputModes: ['text'], outputModes: ['text'], securityRequirements: [] }],
  documentationUrl: '',
  signatures: []
}

const textOf = (message) => message.parts.map((p) => p.content?.$case === 'text' ? p.content.value : '').join('')
const part = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' })

class EchoExecutor {
  cancelTask = async () => {}

  async execute (context, bus) {
    const text = textOf(context.userMessage)
    if (context.userMessage.metadata?.stream !== true) {
      bus.publish(AgentEvent.message({ messageId: randomUUID(), role: Role.ROLE_AGENT, parts: [part(text)], contextId: context.contextId, taskId: '', referenceTaskIds: [], metadata: undefined, extensions: [] }))
      bus.finished()
      return
    }
    const { taskId, contextId } = context
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, timestamp: new Date().toISOString(), message: undefined }, artifacts: [], history: [context.userMessage], metadata: undefined }))
    const artifactId = randomUUID()
    for (const word of text.split(' ').filter((w) => w !== '')) {
      bus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact: { artifactId, name: 'echo', description: '', parts: [part(word + ' ')], metadata: undefined, extensions: [] }, append: true, lastChunk: false, metadata: undefined }))
      await new Promise((resolve) => setImmediate(resolve))
    }
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED, timestamp: new Date().toISOString(), message: undefined }, metadata: undefined }))
    bus.finished()
  }
}

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new EchoExecutor())
const app = express()
app.use(jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }))
const server = app.listen(0, '127.0.0.1', () => { process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }) + '\n') })
process.on('SIGTERM', () => { server.close(); process.exit(0) })
