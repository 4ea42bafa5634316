import type { Cursor } from '../assist/engine.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import type { StreamPacket } from '../protocol/packets.js'
import { chainRunKeys, openInterrupts, waitsForAnswer, type WaitingRun } from '../storage/interrupts.js'
import type { RunReader } from '../storage/run-ledger.js'
import type { RunRecord } from '../storage/runs.js'
import { requestMessage } from './message-envelope.js'
import { projectionOf, type TaskProjection } from './task-projection.js'

/** A chain's task: the projection of its runs, its latest run (the one a follower follows) and the last of its packets taken. */
export interface ChainTask {
  projection: TaskProjection
  latest: RunRecord
  after: Cursor | undefined
}

/**
 * The task of a chain of runs, one task under the first run's request id: each run's journal in
 * turn (`TaskProjection.continueWith` between them); when the latest run is `fresh` (a run key),
 * none of its packets (its follower starts at its beginning). A task whose latest run
 * stopped to ask but whose chain ended without another run was cancelled; one whose question
 * expired failed.
 */
export async function chainTask (runs: RunReader, chain: WaitingRun, agentName: string, options: { fresh?: string } = {}): Promise<ChainTask | undefined> {
  const records: RunRecord[] = []
  for (const key of chainRunKeys(chain)) {
    const record = await runs.get(key)
    // a run whose answers were taken but that is not stored yet (or never was) is not part of the task
    if (record !== undefined) records.push(record)
  }
  const first = records[0]
  if (first === undefined || first.request_id !== chain.run_key) return undefined
  const projection = projectionOf(first, agentName)
  const latest = records.at(-1) as RunRecord
  let after: Cursor | undefined
  for (const record of records) {
    if (record !== first) {
      const envelope = JSON.parse(record.envelope) as ServiceRequest
      projection.continueWith({
        mainStreamId: record.main_stream_id,
        request: { ...requestMessage(envelope), taskId: chain.request_id, contextId: chain.session_id },
        startedAt: new Date(record.started_at).toISOString()
      })
    }
    if (record === latest && record.request_id === options.fresh) continue
    for (const row of await runs.rows(record.request_id)) {
      if (row.seq === null) continue
      projection.apply(JSON.parse(row.frame) as StreamPacket)
      if (record === latest) after = { streamId: row.stream_id, seq: row.seq }
    }
  }
  if (latest.state === 'ended' && latest.end_reason === 'input_required' && latest.request_id !== options.fresh) {
    if (chain.state === 'ended') projection.endWaiting('canceled', new Date(chain.updated_at).toISOString())
    else if (chain.state === 'expired' || (chain.state === 'waiting' && !waitsForAnswer(chain))) {
      const lapsed = openInterrupts(chain).map((i) => i.expires_at).sort((a, b) => a - b)[0] ?? chain.updated_at
      projection.endWaiting('expired', new Date(lapsed).toISOString())
    }
  }
  return { projection, latest, after }
}
