import { TaskState, type Artifact, type Message, type Part, type Task } from '@a2a-js/sdk'
import type { A2ATaskState } from '../protocol/a2a-client.js'

// What the remote sent, as plain JSON for the calling agent: parts, artifacts, states, and billing.

/** One part as JSON: text as a string, data as its value, a file as `{ url | bytes, media_type, filename }`. */
export function partValue (part: Part): unknown {
  const content = part.content
  switch (content?.$case) {
    case 'text': return content.value
    case 'data': return content.value ?? null
    case 'url': return { url: content.value, media_type: part.mediaType, filename: part.filename }
    case 'raw': return { bytes: Buffer.from(content.value).toString('base64'), media_type: part.mediaType, filename: part.filename }
    default: return null
  }
}

/** Parts as one JSON value: their text joined when all are text, the value of a lone data part, else one value per part. */
export function contentOf (parts: readonly Part[]): unknown {
  if (parts.length > 0 && parts.every((p) => p.content?.$case === 'text')) return parts.map((p) => partValue(p)).join('')
  if (parts.length === 1) return partValue(parts[0] as Part)
  return parts.map(partValue)
}

/** The text of a message's text parts, or undefined when it has none. */
export function textOf (message: Message | undefined): string | undefined {
  const texts = (message?.parts ?? []).flatMap((p) => p.content?.$case === 'text' ? [p.content.value] : [])
  return texts.length > 0 ? texts.join('') : undefined
}

const STATES: Partial<Record<TaskState, A2ATaskState>> = {
  [TaskState.TASK_STATE_SUBMITTED]: 'submitted',
  [TaskState.TASK_STATE_WORKING]: 'working',
  [TaskState.TASK_STATE_COMPLETED]: 'completed',
  [TaskState.TASK_STATE_FAILED]: 'failed',
  [TaskState.TASK_STATE_CANCELED]: 'canceled',
  [TaskState.TASK_STATE_REJECTED]: 'rejected',
  [TaskState.TASK_STATE_INPUT_REQUIRED]: 'input_required',
  [TaskState.TASK_STATE_AUTH_REQUIRED]: 'auth_required'
}

/** A task state by the name the calling agent is told. */
export function stateName (state: TaskState | undefined): A2ATaskState {
  return (state === undefined ? undefined : STATES[state]) ?? 'unknown'
}

/** States after which the remote does no more work on the task. */
export const TERMINAL: ReadonlySet<TaskState> = new Set([TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED])
/** States where the remote waits for the client (more input, authentication), which this client does not give. */
export const INTERRUPTED: ReadonlySet<TaskState> = new Set([TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED])

/** The artifacts' content: that of the only one, else a list of each one's; undefined when there is none. */
export function artifactsResult (artifacts: readonly Artifact[]): unknown {
  if (artifacts.length === 0) return undefined
  if (artifacts.length === 1) return contentOf((artifacts[0] as Artifact).parts)
  return artifacts.map((a) => contentOf(a.parts))
}

/** `task` with an artifact update applied: a new artifact, a replaced one, or (`append`) its parts added to the one of the same id. */
export function withArtifact (task: Task, artifact: Artifact, append: boolean): Task {
  const at = task.artifacts.findIndex((a) => a.artifactId === artifact.artifactId)
  const artifacts = [...task.artifacts]
  if (at === -1) artifacts.push(artifact)
  else artifacts[at] = append ? { ...(artifacts[at] as Artifact), parts: [...(artifacts[at] as Artifact).parts, ...artifact.parts] } : artifact
  return { ...task, artifacts }
}

/** The most entries of a remote's `billing` taken (it is the remote's to fill, and it is stored with the call's event). */
const MAX_BILLING_ENTRIES = 64
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v)
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * What the remote says the call cost, from its metadata (the task's, with its status updates'
 * merged in; a lone message's): `billing`, an object whose numeric entries are taken as they are
 * (the seed's `Dict[str, float]`, e.g. `{ "cost_usd": 0.02, "input_tokens": 1200 }`); else `cost`
 * or `cost_usd` (→ `cost_usd`) and `usage.input_tokens` / `usage.output_tokens`. Undefined when it
 * reports none.
 */
export function billingOf (metadata: Record<string, unknown> | undefined): Record<string, number> | undefined {
  if (metadata === undefined) return undefined
  const billing: Record<string, number> = {}
  if (isObject(metadata.billing)) {
    for (const [key, value] of Object.entries(metadata.billing).slice(0, MAX_BILLING_ENTRIES)) if (isNumber(value)) billing[key] = value
  } else {
    const cost = isNumber(metadata.cost_usd) ? metadata.cost_usd : metadata.cost
    if (isNumber(cost)) billing.cost_usd = cost
    const usage = isObject(metadata.usage) ? metadata.usage : {}
    if (isNumber(usage.input_tokens)) billing.input_tokens = usage.input_tokens
    if (isNumber(usage.output_tokens)) billing.output_tokens = usage.output_tokens
  }
  return Object.keys(billing).length > 0 ? billing : undefined
}

/**
 * The tokens and cost a billing counts, for the host's usage metrics: `input_tokens` and
 * `output_tokens` (whole, non-negative), and the cost from `cost_usd` (else `cost`). Undefined when it counts none.
 */
export function usageOf (billing: Record<string, number> | undefined): { input: number, output: number, cost?: number } | undefined {
  if (billing === undefined) return undefined
  const tokens = (v: number | undefined): number => v !== undefined && Number.isInteger(v) && v >= 0 ? v : 0
  const cost = billing.cost_usd ?? billing.cost
  const usage = { input: tokens(billing.input_tokens), output: tokens(billing.output_tokens), ...(cost !== undefined && cost >= 0 ? { cost } : {}) }
  return usage.input === 0 && usage.output === 0 && usage.cost === undefined ? undefined : usage
}
