import { createHash } from 'node:crypto'
import canonicalize from 'canonicalize'
import { AgentFailedError, errorBody, RunTimeoutError, ShuttingDownError, withDetails } from '../errors.js'
import type { ResolvedAgentRequest, ServiceRequest } from '../protocol/envelope.js'
import type { StreamPacket } from '../protocol/packets.js'
import type { AuditLog } from '../storage/audit.js'
import type { EventStore } from '../storage/events.js'
import type { RunRecord, RunStore } from '../storage/runs.js'
import { AssistRun, type DisconnectPolicy, type PacketSink, type RunLogger } from './assist-run.js'
import type { HostedAgent, HostedCapability } from './hosted-agent.js'
import type { AgentHost } from './contract.js'
import type { RunRegistry } from './run-registry.js'
import type { Db } from '../storage/database.js'
import type { SqliteSessionStore } from '../storage/sessions.js'
import { TranscriptBuilder } from './transcript.js'
import { resolveAgentRequest } from './resolve-request.js'

/** The JSON answer of a run: what the first request and every retry of it get. */
export interface RunAnswer {
  status: number
  body: Record<string, unknown>
}

/** SHA-256 of the envelope's canonical JSON (after validation dropped unknown keys and filled defaults). */
export function envelopeHash (envelope: ServiceRequest): string {
  return createHash('sha256').update(canonicalize(envelope) as string).digest('hex')
}

function pidAlive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

export interface RunServiceOptions {
  db: Db
  store: RunStore
  sessions: SqliteSessionStore
  audit: AuditLog
  events: EventStore
  live: RunRegistry
  instanceId: string
  log: RunLogger
  /** What agents get as their fourth argument. */
  host: AgentHost
}

export interface StartOptions {
  envelope: ServiceRequest
  envelopeHash: string
  resolved: ResolvedAgentRequest
  hosted: HostedAgent
  capability: HostedCapability
  log: RunLogger
  onDisconnect: DisconnectPolicy
  /** The first client (SSE mode), attached before the agent starts so it misses nothing. */
  sink?: PacketSink
  /** End the run with `run_timeout` after this long (0: never). */
  timeoutMs?: number
}

/**
 * Starts runs and sees them through: journals their packets, stores their events and audit rows,
 * and when a run ends stores its JSON answer, records the interaction in the session and audits
 * the call. It also finishes runs that a dead process left behind.
 */
export class RunService {
  readonly #o: RunServiceOptions
  readonly #answers = new Map<string, Promise<RunAnswer>>()

  constructor (options: RunServiceOptions) {
    this.#o = options
  }

  /** The stored run with this request id, if any. */
  find (requestId: string): RunRecord | undefined {
    return this.#o.store.get(requestId)
  }

  /** Start a new run (the request id must be unknown). */
  start (options: StartOptions): AssistRun {
    const { envelope, resolved, hosted, capability } = options
    const { store, events, audit } = this.#o
    const requestId = envelope.request_id
    const traceId = envelope.context.trace.trace_id
    const run = new AssistRun({
      requestId,
      capability,
      log: options.log,
      supportedEvents: resolved.capabilities.supported_events,
      onDisconnect: options.onDisconnect,
      recorder: {
        packet: (ord, streamId, seq, json) => { store.append(requestId, { ord, stream_id: streamId, seq, frame: json }) },
        event: (kind, event) => {
          events.append({
            kind,
            id: String(kind === 'cloudevent' ? event.id : `${String(event.run_id)}:${String(event.node_id)}:${String(event.timestamp)}`),
            type: String(kind === 'cloudevent' ? event.type : event.event_type),
            source: kind === 'cloudevent' ? String(event.source) : `agents/${hosted.manifest.metadata.name}`,
            time: String(kind === 'cloudevent' ? (event.time ?? new Date().toISOString()) : event.timestamp),
            session_id: resolved.session_id,
            request_id: requestId,
            trace_id: traceId,
            event
          })
        },
        flush: () => { store.flush() },
        audit: (actor, action, resource, success) => {
          audit.append({ actor, action, resource, success, request_id: requestId, root_request_id: resolved.root_request_id, trace_id: traceId, details: { by: `agent:${hosted.manifest.metadata.name}` } })
        }
      }
    })
    store.start({
      request_id: requestId,
      envelope_hash: options.envelopeHash,
      envelope: JSON.stringify(envelope),
      session_id: resolved.session_id,
      agent_id: hosted.manifest.metadata.id,
      main_stream_id: run.mainStreamId,
      owner_instance: this.#o.instanceId,
      owner_pid: process.pid
    })
    const session = this.#o.sessions.open(resolved.session_id, envelope.context.user)
    if (options.sink !== undefined) run.attach(options.sink)
    if (options.timeoutMs !== undefined && options.timeoutMs > 0) run.expireAfter(options.timeoutMs)
    const answer = run.ended.then(() => this.#finish(run, options))
    this.#answers.set(requestId, answer)
    const settled = run.execute(hosted.agent, resolved, session, this.#o.host)
    this.#o.live.track(run, Promise.all([settled, answer]).then(() => { this.#answers.delete(requestId) }))
    return run
  }

  /** The JSON answer of a run: waits for a live one; finishes one left behind by a dead process. */
  async answer (record: RunRecord): Promise<RunAnswer> {
    const pending = this.#answers.get(record.request_id)
    if (pending !== undefined) return await pending
    let current: RunRecord | undefined = record
    while (current !== undefined && current.state === 'running') {
      if (!this.orphaned(current)) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        current = this.#o.store.get(record.request_id)
      } else {
        current = this.recover(current)
      }
    }
    if (current === undefined) throw new Error(`run ${record.request_id} vanished`)
    return { status: current.response_status ?? 500, body: JSON.parse(current.response ?? '{}') as Record<string, unknown> }
  }

  /** A run marked running that no live process is running. */
  orphaned (record: RunRecord): boolean {
    if (record.state !== 'running' || this.#o.live.has(record.request_id)) return false
    return record.owner_instance !== this.#o.instanceId && !pidAlive(record.owner_pid)
  }

  /**
   * Finish a run whose process died: ERROR `run_interrupted` and CLOSE `"aborted"` for every stream
   * left open are appended to its journal; its transcript is rebuilt from the journal and recorded.
   */
  recover (record: RunRecord): RunRecord {
    const { store } = this.#o
    const rows = store.rows(record.request_id)
    const transcript = new TranscriptBuilder()
    const seqs = new Map<string, number>()
    const open = new Set<string>([record.main_stream_id])
    for (const row of rows) {
      const packet = JSON.parse(row.frame) as StreamPacket
      transcript.add(packet)
      if (row.seq !== null) seqs.set(row.stream_id, row.seq)
      open.add(row.stream_id)
      if (packet.op === 'CLOSE') open.delete(row.stream_id)
    }
    let ord = rows.at(-1)?.ord ?? 0
    const append = (streamId: string, op: StreamPacket['op'], p: StreamPacket['p']): void => {
      const seq = (seqs.get(streamId) ?? 0) + 1
      seqs.set(streamId, seq)
      const packet = { stream_id: streamId, seq, op, t: new Date().toISOString(), p } as StreamPacket
      transcript.add(packet)
      store.append(record.request_id, { ord: ++ord, stream_id: streamId, seq, frame: JSON.stringify(packet) })
    }
    if (open.has(record.main_stream_id)) {
      append(record.main_stream_id, 'ERROR', { code: 'run_interrupted', message: 'The server running this request stopped before it finished', severity: 'FATAL' })
      for (const id of open) if (id !== record.main_stream_id) append(id, 'CLOSE', 'aborted')
      append(record.main_stream_id, 'CLOSE', 'aborted')
    }
    const answer = transcript.produced
      ? { status: 200, body: { request_id: record.request_id, created_at: new Date().toISOString(), output: transcript.build(), metrics: { latency_ms: Date.now() - record.started_at, packets: rows.length } } }
      : { status: 502, body: errorBody(withDetails(new AgentFailedError(), { error: transcript.errors.at(-1) ?? null })) }
    const envelope = JSON.parse(record.envelope) as ServiceRequest
    const resolved = resolveAgentRequest(envelope)
    this.#o.db.transaction(() => {
      store.finish(record.request_id, 'interrupted', answer.status, answer.body)
      this.#o.sessions.recordNow({
        request_id: record.request_id,
        session_id: record.session_id,
        user_id: envelope.context.user.user_id,
        agent_id: record.agent_id,
        agent_request_id: resolved.request_id,
        root_request_id: resolved.root_request_id,
        ...(resolved.parent_request_id !== undefined ? { parent_request_id: resolved.parent_request_id } : {}),
        timestamp: resolved.timestamp,
        status: 'interrupted',
        input: resolved.payload,
        output: transcript.build()
      })
      this.#o.audit.append({ actor: 'agent-host', action: 'assist.interrupted', resource: record.agent_id, success: false, request_id: record.request_id })
    }).immediate()
    this.#o.log.warn({ requestId: record.request_id }, 'finished a run left behind by a process that died')
    return store.get(record.request_id) as RunRecord
  }

  /** Cancel this process's live runs of a session and wait until they are recorded (before erasure). */
  async cancelSession (sessionId: string): Promise<void> {
    const pending: Array<Promise<RunAnswer>> = []
    for (const run of this.#o.live.list()) {
      if (this.#o.store.get(run.requestId)?.session_id !== sessionId) continue
      run.cancel()
      const answer = this.#answers.get(run.requestId)
      if (answer !== undefined) pending.push(answer)
    }
    await Promise.all(pending)
  }

  /** Finish every orphaned run (at boot). */
  recoverOrphans (): number {
    let n = 0
    for (const record of this.#o.store.orphans(this.#o.instanceId)) {
      if (this.orphaned(record)) { this.recover(record); n++ }
    }
    return n
  }

  /** Store the answer, record the interaction and audit the call, in one transaction. */
  async #finish (run: AssistRun, options: StartOptions): Promise<RunAnswer> {
    const { envelope, resolved, hosted } = options
    const reason = run.endReason ?? 'aborted'
    const answer = this.#jsonAnswer(run, envelope.request_id)
    const record = this.#o.db.transaction(() => {
      this.#o.store.finish(envelope.request_id, reason, answer.status, answer.body)
      this.#o.sessions.recordNow({
        request_id: envelope.request_id,
        session_id: resolved.session_id,
        user_id: envelope.context.user.user_id,
        agent_id: hosted.manifest.metadata.id,
        agent_request_id: resolved.request_id,
        root_request_id: resolved.root_request_id,
        ...(resolved.parent_request_id !== undefined ? { parent_request_id: resolved.parent_request_id } : {}),
        timestamp: resolved.timestamp,
        status: reason,
        input: resolved.payload,
        output: reason === 'done' && run.result !== undefined ? run.result : run.transcript.build()
      })
      this.#o.audit.append({
        actor: envelope.context.user.user_id,
        action: 'assist',
        resource: hosted.manifest.metadata.id,
        success: reason === 'done' && run.fatalError === undefined,
        request_id: envelope.request_id,
        root_request_id: resolved.root_request_id,
        trace_id: envelope.context.trace.trace_id,
        details: { agent: hosted.manifest.metadata.name, end: reason, packets: run.packets }
      })
    })
    try {
      record.immediate()
    } catch (err) {
      options.log.error({ err }, 'recording the run failed')
    }
    return answer
  }

  #jsonAnswer (run: AssistRun, requestId: string): RunAnswer {
    const reason = run.endReason
    if (reason !== 'done' && !run.transcript.produced) {
      if (reason === 'shutdown') return { status: 503, body: errorBody(new ShuttingDownError()) }
      if (run.fatalError?.code === 'run_timeout') return { status: 504, body: errorBody(withDetails(new RunTimeoutError(), { error: run.fatalError })) }
      return { status: 502, body: errorBody(withDetails(new AgentFailedError(), { error: run.fatalError ?? run.transcript.errors.at(-1) ?? null })) }
    }
    return {
      status: 200,
      body: {
        request_id: requestId,
        created_at: new Date().toISOString(),
        output: reason === 'done' && run.result !== undefined ? run.result : run.transcript.build(),
        metrics: { latency_ms: Math.round((performance.now() - run.startedAt) * 1000) / 1000, packets: run.packets, ...run.usage }
      }
    }
  }
}
