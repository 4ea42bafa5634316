import { setTimeout as sleep } from 'node:timers/promises'
import { Role, type Artifact, type Message, type Part, type SendMessageRequest, type Task, type TaskStatusUpdateEvent } from '@a2a-js/sdk'
import type { A2AUpdate } from '../protocol/a2a-client.js'
import type { RemoteAgent } from './agent-cards.js'
import { contentOf, INTERRUPTED, stateName, TERMINAL, textOf, withArtifact } from './remote-content.js'

/** One call of an external agent, as {@link callRemote} makes it. */
export interface RemoteCall {
  remote: RemoteAgent
  /** The call's id: the A2A message's `messageId`. */
  callId: string
  capability: string
  payload: Record<string, unknown>
  callbackUrl?: string
  timeoutMs: number
  /** Stops the call (the run ended, the caller gave up, the server is closing). */
  signal: AbortSignal
  onUpdate?: (update: A2AUpdate) => void | Promise<void>
}

/** How long the CancelTask of a call given up may take; a call given up before its task is known reads on as long to learn it. */
const CANCEL_MS = 5000
/** The first and the longest wait between two GetTask of a task that does not stream. */
const POLL_FIRST_MS = 100
const POLL_MAX_MS = 2000

/**
 * How a call ended: with the task in a final (or interrupted) state, or a message; or given up
 * (its timeout, its signal), failed (the remote or the network), or stopped by the calling agent's
 * `onUpdate` throwing. `task` is the task as last seen; `cancelled` whether a CancelTask for it was
 * accepted; `streamed` whether it was a SendStreamingMessage.
 */
export type RemoteOutcome = { streamed: boolean } & (
  | { end: 'task', task: Task, cancelled: boolean }
  | { end: 'message', message: Message }
  | { end: 'timeout', task: Task | undefined, cancelled: boolean }
  | { end: 'aborted', task: Task | undefined, cancelled: boolean, reason: unknown }
  | { end: 'error', task: Task | undefined, cancelled: boolean, error: unknown }
  | { end: 'update_failed', task: Task | undefined, cancelled: boolean, error: unknown }
)

const text = (value: string): Part => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' })
const data = (value: unknown): Part => ({ content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: 'application/json' })

/**
 * The parts of a payload: `payload.query`, when a string, as a text part, and the rest of the
 * payload as a data part (none when nothing is left). It is how this host's own A2A server reads
 * a message back into a payload, and no part says the query twice.
 */
export function partsOf (payload: Record<string, unknown>): Part[] {
  if (typeof payload.query !== 'string') return [data(payload)]
  const { query, ...rest } = payload
  return [text(query as string), ...(Object.keys(rest).length > 0 ? [data(rest)] : [])]
}

/**
 * The A2A request of a call: the payload's parts ({@link partsOf}), and the capability as
 * `metadata.skill` of the message and of the request (A2A v1.0 has no field naming the skill a
 * message is for).
 */
export function requestOf (call: Pick<RemoteCall, 'callId' | 'capability' | 'payload' | 'callbackUrl'>, streaming: boolean): SendMessageRequest {
  const parts = partsOf(call.payload)
  return {
    tenant: '',
    message: { messageId: call.callId, contextId: '', taskId: '', role: Role.ROLE_USER, parts, metadata: { skill: call.capability }, extensions: [], referenceTaskIds: [] },
    configuration: {
      acceptedOutputModes: [],
      taskPushNotificationConfig: call.callbackUrl === undefined ? undefined : { tenant: '', id: '', taskId: '', url: call.callbackUrl, token: '', authentication: undefined },
      historyLength: 0,
      // without a stream, the task is followed with GetTask: known at once, it can be cancelled
      returnImmediately: !streaming
    },
    metadata: { skill: call.capability }
  }
}

const statusUpdate = (task: Task): A2AUpdate => {
  const message = textOf(task.status?.message)
  return { type: 'status', task_id: task.id, state: stateName(task.status?.state), ...(message !== undefined ? { message } : {}) }
}
const artifactUpdate = (taskId: string, artifact: Artifact, append: boolean, lastChunk: boolean): A2AUpdate =>
  ({ type: 'artifact', task_id: taskId, artifact_id: artifact.artifactId, ...(artifact.name !== '' ? { name: artifact.name } : {}), append, last_chunk: lastChunk, content: contentOf(artifact.parts) })
const settled = (task: Task | undefined): boolean => task?.status !== undefined && (TERMINAL.has(task.status.state) || INTERRUPTED.has(task.status.state))

/** A task made from the first update of a remote that sent no task before it. */
const taskOf = (task: Task | undefined, id: string, contextId: string): Task => task ?? { id, contextId, status: undefined, artifacts: [], history: [], metadata: undefined }

/** A status update applied to `task` (a task made from it when none was seen): its status, and its metadata merged in. */
function withStatus (task: Task | undefined, event: TaskStatusUpdateEvent): Task {
  const base = taskOf(task, event.taskId, event.contextId)
  return { ...base, status: event.status, metadata: event.metadata === undefined ? base.metadata : { ...base.metadata, ...event.metadata } }
}

/**
 * Make one call with the SDK's client: a SendStreamingMessage when the card streams (each status
 * and artifact update passed to `onUpdate` as it arrives), else a SendMessage that returns at once
 * and GetTask until the task is done. Past the timeout, or when the signal fires, the remote task
 * is cancelled (best effort, bounded in time): a call given up before the remote named its task
 * reads on, for at most the cancel's time, until it does. A task that waits for more input or for
 * authentication is cancelled too: this client cannot give either.
 */
export async function callRemote (call: RemoteCall): Promise<RemoteOutcome> {
  const { client, card } = call.remote
  const streamed = card.capabilities?.streaming === true
  const timer = new AbortController()
  const timeout = setTimeout(() => { timer.abort(new Error(`no answer within ${call.timeoutMs} ms`)) }, call.timeoutMs).unref()
  const stop = AbortSignal.any([call.signal, timer.signal])
  // the requests' signal: a call given up is read on until its task is known, so that it can be cancelled
  const transport = new AbortController()
  const signal = transport.signal
  let grace: NodeJS.Timeout | undefined
  let task: Task | undefined
  const giveUp = (): void => {
    if (task !== undefined) transport.abort(stop.reason)
    else grace = setTimeout(() => { transport.abort(stop.reason) }, CANCEL_MS).unref()
  }
  if (stop.aborted) giveUp()
  else stop.addEventListener('abort', giveUp, { once: true })
  const stopped = (): void => { if (stop.aborted) throw stop.reason }
  let updateError: { error: unknown } | undefined
  const tell = async (update: A2AUpdate): Promise<void> => {
    try {
      await call.onUpdate?.(update)
    } catch (error) {
      updateError = { error }
      throw error
    }
  }
  const cancel = async (): Promise<boolean> => {
    if (task === undefined || (task.status !== undefined && TERMINAL.has(task.status.state))) return false
    try {
      await client.cancelTask({ tenant: '', id: task.id, metadata: undefined }, { signal: AbortSignal.timeout(CANCEL_MS) })
      return true
    } catch {
      return false
    }
  }

  /** GetTask until the task is done, telling each change of state and each new or grown artifact. */
  const poll = async (): Promise<void> => {
    let wait = POLL_FIRST_MS
    while (!settled(task)) {
      await sleep(wait, undefined, { signal })
      wait = Math.min(wait * 2, POLL_MAX_MS)
      const before = task as Task
      const next = await client.getTask({ tenant: '', id: before.id, historyLength: 0 }, { signal })
      task = { ...next, metadata: next.metadata ?? before.metadata }
      stopped()
      if (next.status?.state !== before.status?.state) await tell(statusUpdate(task))
      for (const artifact of next.artifacts) {
        const seen = before.artifacts.find((a) => a.artifactId === artifact.artifactId)
        if (seen !== undefined && seen.parts.length >= artifact.parts.length) continue
        const fresh = seen === undefined ? artifact : { ...artifact, parts: artifact.parts.slice(seen.parts.length) }
        await tell(artifactUpdate(task.id, fresh, seen !== undefined, settled(task)))
      }
    }
  }

  try {
    const request = requestOf(call, streamed)
    if (streamed) {
      for await (const event of client.sendMessageStream(request, { signal })) {
        const payload = event.payload
        if (payload?.$case === 'message') {
          stopped()
          return { streamed, end: 'message', message: payload.value }
        }
        if (payload?.$case === 'task') {
          task = payload.value
          stopped()
          await tell(statusUpdate(task))
        } else if (payload?.$case === 'statusUpdate') {
          task = withStatus(task, payload.value)
          stopped()
          await tell(statusUpdate(task))
        } else if (payload?.$case === 'artifactUpdate' && payload.value.artifact !== undefined) {
          const { artifact, append, lastChunk } = payload.value
          task = withArtifact(taskOf(task, payload.value.taskId, payload.value.contextId), artifact, append)
          stopped()
          await tell(artifactUpdate(task.id, artifact, append, lastChunk))
        }
        if (settled(task)) break
      }
      if (task === undefined) throw new Error('the remote ended its stream without a task or a message')
    } else {
      const result = await client.sendMessage(request, { signal })
      if ('messageId' in result) {
        stopped()
        return { streamed, end: 'message', message: result }
      }
      task = result
      stopped()
      await tell(statusUpdate(task))
    }
    // a stream that ended early, or a task that does not stream: followed with GetTask
    await poll()
    const done = task as Task
    const cancelled = done.status !== undefined && INTERRUPTED.has(done.status.state) ? await cancel() : false
    return { streamed, end: 'task', task: done, cancelled }
  } catch (error) {
    transport.abort(error)
    const cancelled = await cancel()
    if (updateError !== undefined) return { streamed, end: 'update_failed', task, cancelled, error: updateError.error }
    if (call.signal.aborted) return { streamed, end: 'aborted', task, cancelled, reason: call.signal.reason }
    if (timer.signal.aborted) return { streamed, end: 'timeout', task, cancelled }
    return { streamed, end: 'error', task, cancelled, error }
  } finally {
    clearTimeout(timeout)
    clearTimeout(grace)
    stop.removeEventListener('abort', giveUp)
  }
}
