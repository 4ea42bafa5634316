import type { Message, Task } from '@a2a-js/sdk'
import type { A2AResponse } from '../protocol/a2a-client.js'
import { reasonOf } from './agent-cards.js'
import type { RemoteOutcome } from './remote-call.js'
import { artifactsResult, billingOf, contentOf, INTERRUPTED, stateName, textOf } from './remote-content.js'

/** What every answer of a call says besides its outcome. */
export interface CallFacts {
  /** The external agent's name (A2A_AGENTS_FILE). */
  agent: string
  /** The call's id (`request_id`). */
  callId: string
  capability: string
  durationMs: number
}

/** The longest `metadata.error` kept: much of it may be the remote's words, and it is stored with the call's event. */
const MAX_ERROR = 2000

const metadataOf = (facts: CallFacts, more: Record<string, unknown>): Record<string, unknown> => {
  const error = more.error
  const bounded = typeof error === 'string' && error.length > MAX_ERROR ? { error: `${error.slice(0, MAX_ERROR)}…` } : {}
  return { capability: facts.capability, duration_ms: Math.round(facts.durationMs), ...more, ...bounded }
}

/** A call refused or failed before it reached the remote: `failure`, the reason in `metadata.error`. */
export function refusal (facts: CallFacts, reason: string): A2AResponse {
  return { agent_id: facts.agent, request_id: facts.callId, status: 'failure', result: null, metadata: metadataOf(facts, { error: reason }) }
}

function taskFacts (task: Task | undefined): Record<string, unknown> {
  if (task === undefined) return {}
  return {
    task_id: task.id,
    context_id: task.contextId,
    state: stateName(task.status?.state),
    ...(task.artifacts.length > 0 ? { artifacts: task.artifacts.map((a) => ({ artifact_id: a.artifactId, ...(a.name !== '' ? { name: a.name } : {}) })) } : {}),
    ...(task.metadata !== undefined && Object.keys(task.metadata).length > 0 ? { remote: task.metadata } : {})
  }
}

const withBilling = (response: A2AResponse, metadata: Record<string, unknown> | undefined): A2AResponse => {
  const billing = billingOf(metadata)
  return billing === undefined ? response : { ...response, billing }
}

/**
 * The seed's `A2AResponse` of a call that reached the remote. `success`: a task completed (its
 * artifacts' content as `result`, else its final message's) or a message answered (its content).
 * `failure`: the task failed, was rejected or canceled, asked for input or authentication, or the
 * call failed (the reason in `metadata.error`). `timeout`: no answer in time (`result`: what the
 * artifacts held by then). `metadata` holds the remote task's id, context, state, artifacts and
 * own metadata (`remote`), and `cancelled` when the call gave the task up; `billing` what the
 * remote reported it cost ({@link billingOf}).
 */
export function answerOf (facts: CallFacts, outcome: RemoteOutcome, timeoutS: number): A2AResponse {
  const base = { agent_id: facts.agent, request_id: facts.callId }
  const { streamed } = outcome
  if (outcome.end === 'message') {
    const message: Message = outcome.message
    const metadata = metadataOf(facts, { streamed, context_id: message.contextId, message_id: message.messageId, ...(message.metadata !== undefined && Object.keys(message.metadata).length > 0 ? { remote: message.metadata } : {}) })
    return withBilling({ ...base, status: 'success', result: message.parts.length > 0 ? contentOf(message.parts) : null, metadata }, message.metadata)
  }
  const task = outcome.task
  const produced = task === undefined ? undefined : artifactsResult(task.artifacts)
  const seen = { streamed, ...taskFacts(task) }
  if (outcome.end === 'task') {
    const state = outcome.task.status?.state
    const said = textOf(outcome.task.status?.message)
    if (stateName(state) === 'completed') {
      const spoken = outcome.task.status?.message !== undefined && outcome.task.status.message.parts.length > 0 ? contentOf(outcome.task.status.message.parts) : null
      return withBilling({ ...base, status: 'success', result: produced ?? spoken, metadata: metadataOf(facts, seen) }, outcome.task.metadata)
    }
    const error = state !== undefined && INTERRUPTED.has(state)
      ? `"${facts.agent}" asks for ${stateName(state) === 'input_required' ? 'more input' : 'authentication'}, which host.a2a.call cannot give${said !== undefined ? `: ${said}` : ''}`
      : `"${facts.agent}" ended the task ${stateName(state)}${said !== undefined ? `: ${said}` : ''}`
    const cancelled = state !== undefined && INTERRUPTED.has(state) ? { cancelled: outcome.cancelled } : {}
    return withBilling({ ...base, status: 'failure', result: produced ?? null, metadata: metadataOf(facts, { ...seen, ...cancelled, error }) }, outcome.task.metadata)
  }
  const given = { cancelled: outcome.cancelled }
  if (outcome.end === 'timeout') {
    return withBilling({ ...base, status: 'timeout', result: produced ?? null, metadata: metadataOf(facts, { ...seen, ...given, error: `no answer from "${facts.agent}" within ${timeoutS} s` }) }, task?.metadata)
  }
  const error = outcome.end === 'error'
    ? `"${facts.agent}" failed: ${reasonOf(outcome.error)}`
    : outcome.end === 'aborted'
      ? `the call was stopped: ${reasonOf(outcome.reason)}`
      : `the calling agent's onUpdate threw: ${reasonOf(outcome.error)}`
  return withBilling({ ...base, status: 'failure', result: produced ?? null, metadata: metadataOf(facts, { ...seen, ...given, error }) }, task?.metadata)
}
