import { randomUUID } from 'node:crypto'
import { HttpAgent } from '@ag-ui/client'
import type { BaseEvent, RunAgentInput } from '@ag-ui/core'
import { EventSchema } from '@ag-ui/core/schemas'

/** API keys of the AG-UI tests (`API_KEYS`): two callers. */
export const ALICE = 'alice-key-'.padEnd(40, 'b')
export const BOB = 'bob-key-'.padEnd(40, 'c')
export const KEYS = JSON.stringify([
  { name: 'alice', key: ALICE, scopes: ['assist:invoke'] },
  { name: 'bob', key: BOB, scopes: ['assist:invoke'] }
])

/** `@ag-ui/client`'s HttpAgent for agent `agent` of the server at `url`, sending `key` as a bearer token, on thread `threadId` (a new one unless given). */
export function agUiAgent (url: string, agent: string, options: { key?: string, threadId?: string } = {}): HttpAgent {
  return new HttpAgent({
    url: `${url}/ag-ui/${agent}`,
    ...(options.key !== undefined ? { headers: { authorization: `Bearer ${options.key}` } } : {}),
    threadId: options.threadId ?? `thread-${randomUUID()}`
  })
}

/** A RunAgentInput as HttpAgent sends one (a new run id unless given). */
export function runInput (agent: HttpAgent, extra: Partial<RunAgentInput> = {}): RunAgentInput {
  return { threadId: agent.threadId, runId: `run-${randomUUID()}`, messages: [], tools: [], context: [], state: {}, forwardedProps: {}, ...extra }
}

/**
 * Every event the server sends for `input`, as HttpAgent's transport parses them (`agent.run`, the
 * events observable, before the client's own checks), each checked against `@ag-ui/core`'s schema:
 * an event that is not valid AG-UI rejects.
 */
export async function rawEvents (agent: HttpAgent, input: RunAgentInput): Promise<BaseEvent[]> {
  return await new Promise((resolve, reject) => {
    const events: BaseEvent[] = []
    agent.run(input).subscribe({
      next: (event) => {
        const checked = EventSchema.safeParse(event)
        if (!checked.success) reject(new Error(`not a valid AG-UI event: ${JSON.stringify(event)}: ${checked.error.message}`))
        events.push(event)
      },
      error: reject,
      complete: () => { resolve(events) }
    })
  })
}
