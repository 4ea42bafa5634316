import { Type, type Static } from 'typebox'
import { A2ARequest, A2AResponse } from './contract.js'

// Calling external A2A (v1.0) agents through the host (`host.a2a.call`): the seed's request and
// response (seed 003 "A2A External Agent Contracts", defined with the other contracts), what a
// calling agent is told while the remote works, and the operator's file of external agents
// (A2A_AGENTS_FILE). See docs/a2a.md, "Calling external A2A agents".

export { A2ARequest, A2AResponse }

/**
 * An A2A task's state, as the calling agent is told it: the specification's `TASK_STATE_*` names in
 * lower case without the prefix (`input_required`, not `TASK_STATE_INPUT_REQUIRED`).
 */
export const A2ATaskState = Type.Union([
  Type.Literal('submitted'), Type.Literal('working'), Type.Literal('completed'), Type.Literal('failed'), Type.Literal('canceled'),
  Type.Literal('rejected'), Type.Literal('input_required'), Type.Literal('auth_required'), Type.Literal('unknown')
], { title: 'A2ATaskState' })
export type A2ATaskState = Static<typeof A2ATaskState>

/**
 * What a calling agent's `onUpdate` gets while the remote works, in the order the remote sent it:
 * a status update (the task's new state, with the text of its status message if any), or an
 * artifact update (a new artifact, or with `append` a chunk to add to one already sent). An
 * artifact's `content` is its parts as JSON: their text joined when every part is text, the value
 * of its one data part, else a list with one entry per part (text as a string, data as its value,
 * a file as `{ url | bytes, media_type, filename }`).
 */
export const A2AUpdate = Type.Union([
  Type.Object({
    type: Type.Literal('status'),
    task_id: Type.String(),
    state: A2ATaskState,
    message: Type.Optional(Type.String())
  }, { additionalProperties: false }),
  Type.Object({
    type: Type.Literal('artifact'),
    task_id: Type.String(),
    artifact_id: Type.String(),
    name: Type.Optional(Type.String()),
    /** Add `content` to the artifact of this id sent before (a streamed chunk), instead of replacing it. */
    append: Type.Boolean(),
    /** The last chunk of this artifact. */
    last_chunk: Type.Boolean(),
    content: Type.Unknown()
  }, { additionalProperties: false })
], { title: 'A2AUpdate' })
export type A2AUpdate = Static<typeof A2AUpdate>

/** How one call runs. */
export interface A2ACallOptions {
  /**
   * Seconds to wait for the remote's answer (an integer, 1 to 86 400). Default: the agent's
   * `timeout` in A2A_AGENTS_FILE, else 300. Past it the remote task is cancelled and the answer's
   * `status` is `timeout`.
   */
  timeout?: number
  /**
   * Stops the call: the remote task is cancelled (best effort, at most a few seconds) and the call
   * rejects with the signal's reason. The run's own signal does the same without being passed.
   */
  signal?: AbortSignal
  /** Each status and artifact update, as it arrives; awaited before the next one is read. A throw cancels the remote task and rejects the call. */
  onUpdate?: (update: A2AUpdate) => void | Promise<void>
  /**
   * The seed's `callback_url`: where the remote agent should POST its task updates (A2A push
   * notifications). Refused (`failure`) when the remote's card does not offer push notifications.
   */
  callback_url?: string
}

/**
 * External A2A agents an agent may call, as the operator configured them (A2A_AGENTS_FILE). Every
 * call is checked (the agent is in the file, the calling agent may call it, the capability is
 * allowed and is one of the remote card's skills), recorded in the run's events and the audit log,
 * and its billing counted in the metrics.
 */
export interface A2ACaller {
  /**
   * Ask the external agent `agent` (its name in A2A_AGENTS_FILE) for `capability` (one of its skills)
   * with `payload` (`payload.query`, when a string, as a text part; the rest as a data part).
   * Resolves with the seed's `A2AResponse`: `success` with the result, `failure` with the reason in
   * `metadata.error` (a refusal, the remote's failure, an unreachable agent), or `timeout`.
   * @throws AH_ERR_REMOTE_CALL_INVALID when the call itself is malformed (not a name, not an object, a bad timeout)
   * @throws the signal's reason when `options.signal` or the run's signal fires
   */
  call(agent: string, capability: string, payload: Record<string, unknown>, options?: A2ACallOptions): Promise<A2AResponse>
}

const Name = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' })
const Strings = Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { maxItems: 1000 })

/** One external agent of A2A_AGENTS_FILE, as the operator writes it. */
export const A2AAgentEntry = Type.Object({
  /** The agent card's URL, usually `https://<host>/.well-known/agent-card.json`. */
  card_url: Type.String({ minLength: 1, maxLength: 2048 }),
  /** Sent as `Authorization: Bearer <token>` with the card request and every call. `${NAME}` takes the server's environment variable NAME. */
  bearer_token: Type.Optional(Type.String({ minLength: 1, maxLength: 8192 })),
  /** More headers sent with the card request and every call (`${NAME}` as above). */
  headers: Type.Optional(Type.Record(Type.String({ pattern: '^[!#$%&\'*+.^_`|~0-9A-Za-z-]+$' }), Type.String({ maxLength: 8192 }), { additionalProperties: false })),
  /** The skills (skill ids of its card) agents may ask of it. */
  capabilities: Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { minItems: 1, maxItems: 1000 }),
  /** The local agents (manifest names) that may call it; absent: every agent. */
  callers: Type.Optional(Strings),
  /** Seconds a call waits for the answer when it does not say (default 300). */
  timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
  /** Hosts (`host` or `host:port`) the card's interface URLs may point to besides the card URL's own host. */
  allowed_hosts: Type.Optional(Strings),
  /** true: every call waits for a person's approval (an `approval` interrupt of the run showing the call) before it reaches the agent; a rejected call is a `failure`. Default false. */
  require_approval: Type.Optional(Type.Boolean()),
  /** A file holding the agent's public key (PEM, or a JWK); a relative path is from the agents file's folder. With it, its card is used only if one of its `signatures` is a valid JWS by this key (A2A v1.0 §8.4). */
  card_key: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 }))
}, { additionalProperties: false, title: 'A2AAgentEntry' })
export type A2AAgentEntry = Static<typeof A2AAgentEntry>

/** A2A_AGENTS_FILE: the external agents agents may call, by the name they call them. */
export const A2AAgentsFile = Type.Object({
  agents: Type.Record(Name, A2AAgentEntry, { additionalProperties: false })
}, { additionalProperties: false, title: 'A2AAgentsFile' })
export type A2AAgentsFile = Static<typeof A2AAgentsFile>
