import { randomUUID } from 'node:crypto'
import { Role, type Message, type Part, type StreamResponse, type Task } from '@a2a-js/sdk'
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory, RestTransportFactory, type Client } from '@a2a-js/sdk/client'

/** API keys of the A2A tests (`API_KEYS`): an admin, two callers, and one that may invoke only `echo`. */
export const ADMIN = 'admin-key-'.padEnd(40, 'a')
export const ALICE = 'alice-key-'.padEnd(40, 'b')
export const BOB = 'bob-key-'.padEnd(40, 'c')
export const ECHO_ONLY = 'echo-only-'.padEnd(40, 'd')
export const KEYS = JSON.stringify([
  { name: 'admin', key: ADMIN, scopes: ['admin'] },
  { name: 'alice', key: ALICE, scopes: ['assist:invoke'] },
  { name: 'bob', key: BOB, scopes: ['assist:invoke'] },
  { name: 'echo-only', key: ECHO_ONLY, scopes: ['assist:invoke'], agents: ['echo'] }
])

/** The two A2A bindings this server serves, by the names agent cards give them. */
export const BINDINGS = ['JSONRPC', 'HTTP+JSON'] as const
export type Binding = typeof BINDINGS[number]

/** An official A2A SDK client for agent `agentId` of the server at `url`, over `binding`, sending `key` as a bearer token. */
export async function a2aClient (url: string, agentId: string, binding: Binding, key?: string): Promise<Client> {
  const fetchImpl: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers)
    if (key !== undefined) headers.set('authorization', `Bearer ${key}`)
    return await fetch(input, { ...init, headers })
  }
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
    preferredTransports: [binding]
  }))
  return await factory.createFromUrl(`${url}/a2a/${agentId}/.well-known/agent-card.json`, '')
}

/** A text part. */
export const text = (value: string): Part => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: '' })

/** A data part. */
export const data = (value: Record<string, unknown>): Part => ({ content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: '' })

/** A user message with `parts` (a fresh message id). */
export const message = (parts: Part[], extra: Partial<Message> = {}): Message =>
  ({ messageId: randomUUID(), contextId: '', taskId: '', role: Role.ROLE_USER, parts, metadata: undefined, extensions: [], referenceTaskIds: [], ...extra })

/** Merge stream events into a task, as an A2A client does (status replaced, artifact chunks appended). */
export function merge (events: StreamResponse[]): Task {
  let task: Task | undefined
  for (const { payload } of events) {
    if (payload?.$case === 'task') task = structuredClone(payload.value)
    else if (payload?.$case === 'statusUpdate' && task !== undefined) task.status = payload.value.status
    else if (payload?.$case === 'artifactUpdate' && task !== undefined && payload.value.artifact !== undefined) {
      const artifact = payload.value.artifact
      const known = task.artifacts.find((a) => a.artifactId === artifact.artifactId)
      if (known !== undefined && payload.value.append) known.parts.push(...artifact.parts)
      else task.artifacts = [...task.artifacts.filter((a) => a.artifactId !== artifact.artifactId), structuredClone(artifact)]
    }
  }
  if (task === undefined) throw new Error('no task in the events')
  return task
}
