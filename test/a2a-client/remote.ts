import { randomUUID } from 'node:crypto'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
// @ts-expect-error express ships no types of its own, and @types/express is not a dependency: only its app and use() are needed here
import express from 'express'
import { A2A_PROTOCOL_VERSION, Role, TaskState, type AgentCard, type Message, type Part } from '@a2a-js/sdk'
import {
  AgentEvent, DefaultRequestHandler, InMemoryPushNotificationStore, InMemoryTaskStore, type AgentExecutor, type ExecutionEventBus, type RequestContext
} from '@a2a-js/sdk/server'
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { build, tempDataDir, type Teardown } from '../helper.js'

// External A2A agents for the client's tests, served by the A2A SDK's own server (its
// DefaultRequestHandler, in-memory task store and Express transport), in this process on a
// random port. One executor serves every agent; the skill a message asks for (its
// `metadata.skill`) says what it does.

/** The skills the test agents offer, and what each does. */
export const SKILLS = {
  /** An artifact holding the data part it got, then completed. */
  echo: 'echo',
  /** Three text chunks of one artifact ("a", "b", "c"), the last two once the test opens its gate; then completed with a status message. */
  chunks: 'chunks',
  /** Failed, with a status message. */
  fail: 'fail',
  /** Rejected, with no message. */
  reject: 'reject',
  /** Working until cancelled. */
  slow: 'slow',
  /** Completed with an unnamed artifact, its status update carrying billing metadata. */
  billing: 'billing',
  /** Input required, with a question. */
  ask: 'ask',
  /** A message, no task (its metadata reports a cost). */
  message: 'message',
  /** Authentication required, with no message. */
  auth: 'auth',
  /** Working until the test ends: it refuses to be cancelled. */
  stubborn: 'stubborn',
  /** Declared by the card, never allowed by the test's file. */
  secret: 'secret'
} as const

/** The test agents: each a path of the server with its card at `<path>/.well-known/agent-card.json`. */
export type RemoteName = 'stream' | 'plain' | 'push' | 'elsewhere' | 'secure' | 'textonly'

export interface Remote {
  /** Each agent's card URL. */
  cards: Record<RemoteName, string>
  /** The second port's host (`127.0.0.1:<port>`): `elsewhere`'s interface points there. */
  otherHost: string
  /** Tasks the executor was asked to cancel, in order. */
  cancels: string[]
  /** Messages the executor got, in order. */
  received: Message[]
  /** Card requests each agent answered (by name), and the Authorization and X-Tenant headers of the last request to `secure`. */
  cardFetches: Record<string, number>
  /** JSON-RPC requests `plain` got. */
  plainCalls: number
  secureHeaders: { authorization?: string, tenant?: string }
  /** Open the gate of the `chunks` task running: its last two chunks follow. */
  openGate: () => void
  /** Drop every open connection to the agents (a remote that goes away mid-call). */
  drop: () => void
}

const text = (value: string): Part => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' })
const data = (value: unknown): Part => ({ content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: 'application/json' })
const agentMessage = (parts: Part[], contextId: string, taskId = ''): Message =>
  ({ messageId: randomUUID(), contextId, taskId, role: Role.ROLE_AGENT, parts, metadata: undefined, extensions: [], referenceTaskIds: [] })
const now = (): string => new Date().toISOString()

class Executor implements AgentExecutor {
  readonly #waiting = new Map<string, () => void>()
  readonly #stubborn = new Set<string>()
  readonly #remote: Remote

  constructor (remote: Remote) {
    this.#remote = remote
  }

  cancelTask = async (taskId: string, bus: ExecutionEventBus): Promise<void> => {
    this.#remote.cancels.push(taskId)
    if (this.#stubborn.has(taskId)) throw new Error('this task cannot be cancelled')
    const waiting = this.#waiting.get(taskId)
    if (waiting !== undefined) waiting()
    else bus.publish(AgentEvent.statusUpdate({ taskId, contextId: '', status: { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: now() }, metadata: undefined }))
  }

  execute = async (context: RequestContext, bus: ExecutionEventBus): Promise<void> => {
    const { taskId, contextId, userMessage } = context
    this.#remote.received.push(userMessage)
    const skill = String(userMessage.metadata?.skill)
    if (skill === SKILLS.message) {
      bus.publish(AgentEvent.message({ ...agentMessage([text('pong')], contextId), metadata: { cost: 0.01 } }))
      bus.finished()
      return
    }
    const status = (state: TaskState, message?: string, metadata?: Record<string, unknown>): void => {
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state, message: message === undefined ? undefined : agentMessage([text(message)], contextId, taskId), timestamp: now() }, metadata }))
    }
    const artifact = (artifactId: string, parts: Part[], append = false, lastChunk = true, name = 'out'): void => {
      bus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact: { artifactId, name, description: '', parts, metadata: undefined, extensions: [] }, append, lastChunk, metadata: undefined }))
    }
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: now() }, artifacts: [], history: [], metadata: undefined }))
    switch (skill) {
      case SKILLS.echo: {
        const got = userMessage.parts.find((p) => p.content?.$case === 'data')
        artifact('echo', [data(got?.content?.value)])
        status(TaskState.TASK_STATE_COMPLETED)
        break
      }
      case SKILLS.chunks: {
        const gate = new Promise<void>((resolve) => { this.#remote.openGate = resolve })
        artifact('text', [text('a')], false, false)
        await gate
        artifact('text', [text('b')], true, false)
        artifact('text', [text('c')], true, true)
        status(TaskState.TASK_STATE_COMPLETED, 'done')
        break
      }
      case SKILLS.fail:
        status(TaskState.TASK_STATE_FAILED, 'the scanner broke')
        break
      case SKILLS.reject:
        status(TaskState.TASK_STATE_REJECTED, undefined, {})
        break
      case SKILLS.auth:
        status(TaskState.TASK_STATE_AUTH_REQUIRED)
        await new Promise<void>((resolve) => { this.#waiting.set(taskId, resolve) })
        status(TaskState.TASK_STATE_CANCELED)
        break
      case SKILLS.stubborn:
        this.#stubborn.add(taskId)
        await new Promise<void>(() => {})
        break
      case SKILLS.billing:
        artifact('bill', [data({ ok: true })], false, true, '')
        status(TaskState.TASK_STATE_COMPLETED, undefined, { billing: { cost_usd: 0.25, input_tokens: 100, output_tokens: 20, note: 'dropped: not a number' } })
        break
      case SKILLS.ask:
        status(TaskState.TASK_STATE_INPUT_REQUIRED, 'which branch?')
        // the client cancels a task that waits for input: the executor waits for that
        await new Promise<void>((resolve) => { this.#waiting.set(taskId, resolve) })
        status(TaskState.TASK_STATE_CANCELED)
        break
      default:
        // slow, and anything else: work until cancelled
        await new Promise<void>((resolve) => { this.#waiting.set(taskId, resolve) })
        status(TaskState.TASK_STATE_CANCELED)
    }
    this.#waiting.delete(taskId)
    bus.finished()
  }
}

function cardOf (url: string, options: { streaming: boolean, push?: boolean, inputModes?: string[] }): AgentCard {
  const skill = (id: string): AgentCard['skills'][number] => ({ id, name: id, description: `the ${id} skill`, tags: [], examples: [], inputModes: [], outputModes: [], securityRequirements: [] })
  return {
    name: 'test agent',
    description: 'An A2A agent for the client tests',
    supportedInterfaces: [{ url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }],
    provider: undefined,
    version: '1.0.0',
    capabilities: { streaming: options.streaming, pushNotifications: options.push === true, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: options.inputModes ?? ['text/plain', 'application/json'],
    defaultOutputModes: ['text/plain', 'application/json'],
    skills: Object.values(SKILLS).map(skill),
    signatures: []
  }
}

/** An Express app, as far as these agents use one. */
interface App {
  (req: IncomingMessage, res: ServerResponse): void
  use: (path: string, ...handlers: unknown[]) => void
  listen: (port: number, host: string, ready: () => void) => Server
}

async function listen (app: App): Promise<Server> {
  return await new Promise((resolve) => { const server = app.listen(0, '127.0.0.1', () => { resolve(server) }) })
}

/** Start the test agents; they stop after the test. */
export async function startRemote (t: Teardown): Promise<Remote> {
  const app = express() as App
  const server = await listen(app)
  const other = await listen(app)
  t.teardown(async () => {
    server.closeAllConnections()
    other.closeAllConnections()
    await Promise.all([new Promise((resolve) => server.close(resolve)), new Promise((resolve) => other.close(resolve))])
  })
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const otherHost = `127.0.0.1:${(other.address() as AddressInfo).port}`
  const remote: Remote = {
    cards: { stream: '', plain: '', push: '', elsewhere: '', secure: '', textonly: '' },
    otherHost,
    cancels: [],
    received: [],
    cardFetches: {},
    plainCalls: 0,
    secureHeaders: {},
    openGate: () => {},
    drop: () => { server.closeAllConnections() }
  }
  const executor = new Executor(remote)
  app.use('/secure', (req: IncomingMessage, res: ServerResponse, next: () => void) => {
    remote.secureHeaders = { ...(req.headers.authorization !== undefined ? { authorization: req.headers.authorization } : {}), ...(typeof req.headers['x-tenant'] === 'string' ? { tenant: req.headers['x-tenant'] } : {}) }
    if (req.headers.authorization !== 'Bearer s3cret') { res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"unauthorized"}'); return }
    next()
  })
  app.use('/plain', (req: IncomingMessage, _res: ServerResponse, next: () => void) => {
    if (req.method === 'POST') remote.plainCalls++
    next()
  })
  const mount = (name: RemoteName, card: AgentCard): void => {
    const push = card.capabilities?.pushNotifications === true ? new InMemoryPushNotificationStore() : undefined
    const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor, undefined, push, undefined, undefined, undefined, { validateInputModes: true })
    app.use(`/${name}/.well-known/agent-card.json`, (_req: IncomingMessage, _res: ServerResponse, next: () => void) => { remote.cardFetches[name] = (remote.cardFetches[name] ?? 0) + 1; next() },
      agentCardHandler({ agentCardProvider: handler, cache: { maxAge: 0 } }))
    app.use(`/${name}`, jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }))
    remote.cards[name] = `${base}/${name}/.well-known/agent-card.json`
  }
  mount('stream', cardOf(`${base}/stream`, { streaming: true }))
  mount('plain', cardOf(`${base}/plain`, { streaming: false }))
  mount('push', cardOf(`${base}/push`, { streaming: false, push: true }))
  mount('secure', cardOf(`${base}/secure`, { streaming: true }))
  // its interface is on the other port: another host than its card's
  mount('elsewhere', cardOf(`http://${otherHost}/elsewhere`, { streaming: true }))
  // takes text only: the data part of every call is refused (a JSON-RPC error)
  mount('textonly', cardOf(`${base}/textonly`, { streaming: false, inputModes: ['text/plain'] }))
  return remote
}

const AGENTS_DIR = fileURLToPath(new URL('../fixtures/a2a-client/agents/', import.meta.url))
/** The calling agents (test/fixtures/a2a-client/agents): `a2a-caller`, and `other-caller`, whom no entry's `callers` lists. */
export const CALLER = 'f0000000-0000-4000-8000-0000000000c1'
export const OTHER_CALLER = 'f0000000-0000-4000-8000-0000000000c2'
/** The skills the file allows of `scanner` and `plain` (not `secret`). */
export const ALLOWED = ['echo', 'chunks', 'fail', 'reject', 'slow', 'billing', 'ask', 'message', 'auth', 'stubborn']

/**
 * The test agents, an A2A_AGENTS_FILE naming them, and a server (no task workers) whose agents may
 * call them: `scanner` (streams; only `a2a-caller` may call it), `plain` (does not stream),
 * `pusher` (push notifications), `elsewhere` (its interface on another host), `allowed` (the same,
 * allowed), `secure` (a bearer token from the environment), `ghost` (unreachable), `unskilled`
 * (allows a skill its card lacks), `quick` (a timeout of 1 s), `textonly` (refuses data parts).
 */
export async function serveRemoteAgents (t: Teardown): Promise<{ app: FastifyInstance, remote: Remote }> {
  const remote = await startRemote(t)
  const file = join(tempDataDir(t), 'a2a-agents.json')
  writeFileSync(file, JSON.stringify({
    agents: {
      scanner: { card_url: remote.cards.stream, capabilities: ALLOWED, callers: ['a2a-caller'] },
      plain: { card_url: remote.cards.plain, capabilities: ALLOWED },
      pusher: { card_url: remote.cards.push, capabilities: ['echo'] },
      elsewhere: { card_url: remote.cards.elsewhere, capabilities: ['echo'] },
      allowed: { card_url: remote.cards.elsewhere, capabilities: ['echo'], allowed_hosts: [remote.otherHost] },
      // eslint-disable-next-line no-template-curly-in-string -- the file's reference to the environment, as an operator writes it
      secure: { card_url: remote.cards.secure, capabilities: ['echo'], bearer_token: '${A2A_TEST_TOKEN}', headers: { 'X-Tenant': 'acme' } },
      ghost: { card_url: 'http://127.0.0.1:1/.well-known/agent-card.json', capabilities: ['echo'] },
      unskilled: { card_url: remote.cards.stream, capabilities: ['not-a-skill'] },
      quick: { card_url: remote.cards.stream, capabilities: ['slow'], timeout: 1 },
      textonly: { card_url: remote.cards.textonly, capabilities: ['echo'] }
    }
  }))
  const app = await build(t, { AGENTS_DIR, A2A_AGENTS_FILE: file, A2A_TEST_TOKEN: 's3cret', WORKERS_PER_TYPE: '0' })
  return { app, remote }
}
