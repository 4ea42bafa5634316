import type { ServiceRequest } from '../protocol/envelope.js'
import type { StreamPacket } from '../protocol/packets.js'
import type { Recovery, RunLedger } from '../storage/run-ledger.js'
import type { JournalRow, RunRecord } from '../storage/runs.js'
import { resolveAgentRequest } from '../agents/resolve-request.js'
import { answerOf } from './answers.js'
import { PacketFactory, streamError } from './packets.js'
import { TranscriptBuilder } from './transcript.js'

/**
 * What recovering an orphan writes (its process died, or was paused past its lease): ERROR
 * `run_interrupted` and CLOSE `"aborted"` for every stream left open, its answer, a summary for the
 * session and an audit row. Worked out from the run and its journal; the ledger writes it in one
 * transaction that first checks the run is still running under a lapsed lease, so across any number
 * of processes a run is recovered exactly once, and an owner that comes back later is fenced out.
 */
export function recoveryOf (record: RunRecord, rows: JournalRow[], summaryBytes: number): Recovery {
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
  }
  const envelope = JSON.parse(record.envelope) as ServiceRequest
  const answer = answerOf({
    requestId: envelope.request_id,
    reason: 'interrupted',
    produced: transcript.produced,
    ...(transcript.lastError !== undefined ? { lastError: transcript.lastError } : {}),
    metrics: { latency_ms: Date.now() - record.started_at, packets: rows.length + added.length }
  })
  const resolved = resolveAgentRequest(envelope)
  return {
    added,
    status: answer.status,
    response: answer.body,
    interaction: {
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
    },
    audit: { actor: 'agent-host', action: 'assist.interrupted', resource: record.agent_id, success: false, request_id: envelope.request_id, details: { packets: rows.length + added.length } }
  }
}

/**
 * Recover the run `requestId` if its owner's lease has lapsed (see {@link recoveryOf}).
 * @returns the run as it is now, and whether this call recovered it
 * @throws SQLITE_BUSY while another process holds the write lock (the caller retries)
 */
export async function recoverRun (ledger: RunLedger, requestId: string, summaryBytes: number): Promise<{ record: RunRecord | undefined, recovered: boolean }> {
  return await ledger.recover(requestId, Date.now(), (record, rows) => recoveryOf(record, rows, summaryBytes))
}
