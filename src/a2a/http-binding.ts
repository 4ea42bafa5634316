import { A2A_PROTOCOL_VERSION, StreamResponse, type AgentCard } from '@a2a-js/sdk'
import { A2AError, RequestMalformedError, restStatusFor, toRestErrorBody, VersionNotSupportedError } from '@a2a-js/sdk/errors'
import { JsonRpcTransportHandler, ServerCallContext, validateVersion } from '@a2a-js/sdk/server'
import { agentRefusal } from '../auth/agent-access.js'
import type { Identity } from '../storage/api-keys.js'
import { A2A_CALL, type A2ACall } from './request-handler.js'

/** What an HTTP request brings to one A2A call. */
export interface CallRequest {
  identity: Identity
  traceId: string
  /** The agent called (its card's security follows `requires_auth`). */
  agent: { id: string, name: string, requires_auth: boolean }
  card: AgentCard
  binding: 'JSONRPC' | 'HTTP+JSON'
  /** The `A2A-Version` header as sent. */
  version: string | string[] | undefined
  /** Count a new run against the per-agent rate limit (throws to refuse). */
  admit: (agent: { id: string, name: string }) => Promise<void>
  /** Aborted when the client goes away. */
  signal: AbortSignal
}

/**
 * The call's context for the SDK's handler: the caller, the trace, the rate limit, the client's
 * signal. The agent must be one the caller may invoke (the CAP refusal, 403, is thrown), and the A2A
 * version one the card declares (an A2A error is thrown: a client that sent no version learns what
 * to send, not only that the 0.3 the specification reads it as is refused).
 */
export function callContextOf (request: CallRequest): { context: ServerCallContext, call: A2ACall } {
  const refusal = agentRefusal(request.identity, { id: request.agent.id, name: request.agent.name, requiresAuth: request.agent.requires_auth })
  if (refusal !== undefined) throw refusal.error
  const call: A2ACall = { identity: request.identity, traceId: request.traceId, admit: request.admit, signal: request.signal }
  const header = request.version
  const asked = typeof header === 'string' && header !== ''
  const context = new ServerCallContext({ ...(asked ? { requestedVersion: header } : {}), state: new Map([[A2A_CALL, call]]) })
  try {
    validateVersion(context.requestedVersion, request.card, request.binding)
  } catch (err) {
    if (asked || !(err instanceof VersionNotSupportedError)) throw err
    throw new VersionNotSupportedError(`The request has no A2A-Version header, which A2A reads as version ${context.requestedVersion}, not served here: send the header A2A-Version: ${A2A_PROTOCOL_VERSION}`)
  }
  return { context, call }
}

/**
 * A streaming method's events, their first awaited before any header is sent (so a refusal is
 * still a plain answer): the events from the first on, or why the first failed.
 */
export async function firstEvent<T> (events: AsyncGenerator<T, void, undefined>): Promise<{ events: AsyncIterator<T, void, undefined> } | { failed: unknown }> {
  let first: IteratorResult<T, void>
  try {
    first = await events.next()
  } catch (err) {
    return { failed: err }
  }
  let taken = false
  return {
    events: {
      next: async () => {
        if (taken) return await events.next()
        taken = true
        return first
      },
      return: async () => await events.return(undefined)
    }
  }
}

/** The JSON-RPC binding's error object for request `id`. */
export function jsonRpcError (id: string | number | null, err: unknown): { jsonrpc: '2.0', id: string | number | null, error: ReturnType<typeof JsonRpcTransportHandler.mapToJSONRPCError> } {
  return { jsonrpc: '2.0', id, error: JsonRpcTransportHandler.mapToJSONRPCError(err as A2AError) }
}

/** The HTTP+JSON binding's answer to an A2A error (`{ error: { code, status, message, details } }` with its HTTP status); undefined for any other failure. */
export function restError (err: unknown): { status: number, body: ReturnType<typeof toRestErrorBody> } | undefined {
  if (!(err instanceof A2AError)) return undefined
  const status = restStatusFor(err)
  return { status, body: toRestErrorBody(err, status) }
}

/** One event of an HTTP+JSON stream, as its `data:` line. */
export function restFrame (event: StreamResponse): string {
  return JSON.stringify(StreamResponse.toJSON(event))
}

/** The last event of an HTTP+JSON stream that failed: the REST error body of the failure. */
export function restErrorFrame (err: unknown): string {
  return JSON.stringify(toRestErrorBody(err as A2AError, restStatusFor(err as A2AError)))
}

/** An HTTP+JSON task path's last segment, `{id}`, `{id}:cancel` or `{id}:subscribe`: the task id and its verb (`''` for none). */
export function taskRef (ref: string): { id: string, verb: string } {
  const at = ref.indexOf(':')
  return at < 0 ? { id: ref, verb: '' } : { id: ref.slice(0, at), verb: ref.slice(at + 1) }
}

/** A task verb the binding does not have: A2A's malformed request. */
export function unknownVerb (verb: string): never {
  throw new RequestMalformedError(`Unknown method ":${verb}" of a task`)
}
