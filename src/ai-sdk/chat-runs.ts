import type { UIMessageChunk } from 'ai'
import type { AssistEngine } from '../assist/engine.js'
import { packetOf, type Frame } from '../assist/frame-queue.js'
import type { HostedAgent } from '../agents/hosted-agent.js'
import { viewerOf } from '../auth/scopes.js'
import { sees } from '../storage/tenants.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import type { StreamPacket } from '../protocol/packets.js'
import type { Identity } from '../storage/api-keys.js'
import { chainOf, chainRunKeys, openInterrupts, type InterruptStore, type WaitingRun } from '../storage/interrupts.js'
import type { RunReader } from '../storage/run-ledger.js'
import type { RunRecord } from '../storage/runs.js'
import { resentAs } from '../protocol/binding-envelope.js'
import { answerEnvelope, chatSessionId, messageIdOf, questionEnvelope, type ChatBody, type ChatCaller } from './chat-envelope.js'
import { answersIn, type KindedAnswer } from './interrupts.js'
import { UiChunkProjection } from './ui-chunks.js'

/** The end of a UI message stream whose run ended: the `data: [DONE]` line the AI SDK's servers write last. */
export const DONE = '[DONE]'

/** What a chat stream yields: chunks, in batches of what is ready, then {@link DONE} once the run has ended. */
export type ChatStreamItem = UIMessageChunk[] | typeof DONE

/** How a stream follows its run. */
export interface FollowOptions {
  /** Aborted when the client goes away. */
  signal: AbortSignal
  /** The client fell too far behind a run that does not wait for it. */
  onSlow?: () => void
}

/**
 * One hosted agent's chats (the AI SDK UI message stream binding: `docs/ai-sdk.md`): a chat is a
 * CAP session, each request of it a run of the engine (same journal, idempotency, auth, limits and
 * audit as `POST /v1/assist`), each run's packets an assistant message's chunks
 * ({@link UiChunkProjection}). No run logic lives here: the engine runs, the run store and the
 * interrupt store are read.
 */
export class AiSdkChats {
  readonly #engine: AssistEngine
  readonly #store: RunReader
  readonly #interrupts: InterruptStore
  readonly #hosted: HostedAgent

  constructor (options: { engine: AssistEngine, store: RunReader, interrupts: InterruptStore, hosted: HostedAgent }) {
    this.#engine = options.engine
    this.#store = options.store
    this.#interrupts = options.interrupts
    this.#hosted = options.hosted
  }

  /**
   * The CAP envelope of a chat request: when the last message is the assistant's and settles some
   * of the chat's open questions, the run that answers them; else a new run for the last user
   * message. A request sent again (the same message, the same answers) is the envelope its run was
   * started with, so the engine joins that run.
   * @throws AH_ERR_VALIDATION for a request that neither asks nor answers
   */
  async envelope (body: ChatBody, identity: Identity, traceId: string): Promise<ServiceRequest> {
    const caller: ChatCaller = { agentId: this.#hosted.manifest.metadata.id, userId: identity.id, traceId }
    const last = body.messages.at(-1) as ChatBody['messages'][number]
    let fresh: ServiceRequest | undefined
    if (last.role === 'assistant') {
      const open = (await this.#chains(chatSessionId(body.id), identity)).filter((c) => c.state === 'waiting').flatMap(openInterrupts)
      const answers = answersIn(last.parts, open)
      if (answers.length > 0) fresh = answerEnvelope(body, caller, answers)
    }
    fresh ??= questionEnvelope(body, caller)
    return resentAs(fresh, await this.#engine.sentBefore(fresh.request_id, identity))
  }

  /** The newest running run of chat `chatId` the caller sees (`auth/scopes.ts:viewerOf`), if any. */
  async running (chatId: string, identity: Identity): Promise<RunRecord | undefined> {
    const { runs } = await this.#store.list({
      agentId: this.#hosted.manifest.metadata.id,
      sessionId: chatSessionId(chatId),
      states: [{ state: 'running' }],
      viewer: viewerOf(identity)
    }, { limit: 1 })
    return runs[0]
  }

  /**
   * The chunks of run `requestId` (a run key), from its first packet: the journal, then the live
   * run, until it ends. `whole`: a run that answered questions comes with the runs before it in its
   * chain (their journals), so the message is made from its start, as a resumed stream replays it;
   * otherwise the run alone goes on with the message the client holds.
   */
  async * stream (requestId: string, options: FollowOptions & { whole: boolean }): AsyncGenerator<ChatStreamItem, void, undefined> {
    const record = await this.#store.get(requestId) as RunRecord
    const chain = await chainOf(this.#interrupts, record)
    const earlier: RunRecord[] = []
    if (options.whole && chain !== undefined) {
      for (const key of chainRunKeys(chain)) {
        if (key === requestId) break
        const run = await this.#store.get(key)
        if (run !== undefined) earlier.push(run)
      }
    }
    const envelope = JSON.parse(record.envelope) as ServiceRequest
    const projection = new UiChunkProjection(messageIdOf(JSON.parse((earlier[0] ?? record).envelope) as ServiceRequest), {
      request_id: envelope.request_id,
      session_id: record.session_id,
      agent: this.#hosted.manifest.metadata.name
    })
    const chunks = projection.start()
    for (const run of earlier) {
      chunks.push(...projection.beginRun(run.main_stream_id, answersOf(run, chain)))
      for (const row of await this.#store.rows(run.request_id)) {
        if (row.seq !== null) chunks.push(...projection.apply(JSON.parse(row.frame) as StreamPacket))
      }
    }
    chunks.push(...projection.beginRun(record.main_stream_id, answersOf(record, chain)))
    yield chunks
    for await (const frames of this.#engine.follow(requestId, { signal: options.signal, ...(options.onSlow !== undefined ? { onSlow: options.onSlow } : {}) })) {
      const batch: UIMessageChunk[] = []
      for (const frame of frames as Frame[]) batch.push(...projection.apply(packetOf(frame)))
      if (projection.ended) {
        yield [...batch, ...projection.finish()]
        yield DONE
        return
      }
      if (batch.length > 0) yield batch
    }
  }

  /** The chains of questions of a chat that the caller sees. */
  async #chains (sessionId: string, identity: Identity): Promise<WaitingRun[]> {
    const viewer = viewerOf(identity)
    return (await this.#interrupts.inSession(sessionId)).filter((chain) => sees(viewer, chain.owner_key))
  }
}

/** The answers run `record` carried (its `payload.resume`), with the kind of each question its chain asked. */
function answersOf (record: RunRecord, chain: WaitingRun | undefined): KindedAnswer[] {
  const resume = (JSON.parse(record.envelope) as ServiceRequest).payload.payload.resume
  if (!Array.isArray(resume) || chain === undefined) return []
  const kinds = new Map(chain.interrupts.map((i) => [i.id, i.kind]))
  return (resume as Array<{ interrupt_id: string, value: unknown }>).map((answer) => ({ ...answer, kind: kinds.get(answer.interrupt_id) ?? 'input' }))
}
