import type { ServiceRequest } from '../protocol/envelope.js'
import type { StreamPacket } from '../protocol/packets.js'
import type { AuditLog } from '../storage/audit.js'
import type { Db } from '../storage/database.js'
import type { JournalRow, RunRecord, RunStore } from '../storage/runs.js'
import type { SqliteSessionStore } from '../storage/sessions.js'
import { resolveAgentRequest } from '../agents/resolve-request.js'
import { answerOf } from './answers.js'
import { PacketFactory, streamError } from './packets.js'
import { TranscriptBuilder } from './transcript.js'

/** What recovery writes to. */
export interface RecoveryStores {
  db: Db
  store: RunStore
  sessions: SqliteSessionStore
  audit: AuditLog
}

/**
 * Finish a run whose owner's lease lapsed (its process died, or was paused past its lease):
 * ERROR `run_interrupted` and CLOSE `"aborted"` for every stream left open are appended to its
 * journal, its answer is stored, the session records a summary and the audit log says so.
 *
 * All of it is one immediate transaction that first checks the run is still running under the
 * lease it was found with and that the lease has lapsed, so across any number of processes a run
 * is recovered exactly once, and an owner that comes back later is fenced out.
 * @returns the run as it is now, and whether this call recovered it
 * @throws SQLITE_BUSY while another process holds the write lock (the caller retries)
 */
export function recoverRun (stores: RecoveryStores, requestId: string, summaryBytes: number): { record: RunRecord | undefined, recovered: boolean } {
  const { db, store, sessions, audit } = stores
  return db.transaction(() => {
    const record = store.get(requestId)
    if (record === undefined || record.state !== 'running' || (record.lease_expires_at !== null && record.lease_expires_at >= Date.now())) {
      return { record, recovered: false }
    }
    const rows = store.rows(requestId)
    const factory = PacketFactory.fromJournal(record.main_stream_id, rows)
    const transcript = new TranscriptBuilder(summaryBytes)
    for (const row of rows) transcript.add(JSON.parse(row.frame) as StreamPacket, row.frame.length)
    const added: JournalRow[] = []
    if (!factory.ended) {
      let ord = rows.at(-1)?.ord ?? 0
      for (const packet of factory.failAll(streamError('run_interrupted', 'The server running this request stopped before it finished', 'FATAL'))) {
        const frame = JSON.stringify(packet)
        transcript.add(packet, frame.length)
        added.push({ ord: ++ord, stream_id: packet.stream_id, seq: packet.seq, frame })
      }
      store.appendNow(requestId, added)
    }
    const envelope = JSON.parse(record.envelope) as ServiceRequest
    const answer = answerOf({
      requestId: envelope.request_id,
      reason: 'interrupted',
      produced: transcript.produced,
      ...(transcript.lastError !== undefined ? { lastError: transcript.lastError } : {}),
      metrics: { latency_ms: Date.now() - record.started_at, packets: rows.length + added.length }
    })
    store.finishOrphan(record, answer.status, answer.body)
    const resolved = resolveAgentRequest(envelope)
    sessions.recordNow({
      request_id: envelope.request_id,
      session_id: record.session_id,
      user_id: envelope.context.user.user_id,
      agent_id: record.agent_id,
      agent_request_id: resolved.request_id,
      root_request_id: resolved.root_request_id,
      ...(resolved.parent_request_id !== undefined ? { parent_request_id: resolved.parent_request_id } : {}),
      timestamp: resolved.timestamp,
      status: 'interrupted',
      input: resolved.payload,
      output: transcript.summary()
    })
    audit.append({ actor: 'agent-host', action: 'assist.interrupted', resource: record.agent_id, success: false, request_id: envelope.request_id, details: { packets: rows.length + added.length } })
    return { record: store.get(requestId), recovered: true }
  }).immediate()
}
