import { AH_ERR_AGENT_FAILED, errorBody, AH_ERR_RUN_TIMEOUT, AH_ERR_SHUTTING_DOWN, withDetails } from '../errors.js'
import type { JsonObject } from '../agents/contract.js'
import type { StreamError, StreamPacket } from '../protocol/packets.js'
import type { RunReader } from '../storage/run-ledger.js'
import type { JournalRow, RunRecord } from '../storage/runs.js'
import { TranscriptBuilder } from './transcript.js'

/** The JSON answer of a run: what the first request and every retry of it get. */
export interface RunAnswer {
  status: number
  body: JsonObject
}

/** How a run ended, as the answer needs it. */
export interface RunOutcome {
  requestId: string
  /** The main stream's close reason (or `interrupted` for a recovered run). */
  reason: string
  produced: boolean
  fatal?: StreamError
  lastError?: StreamError
  metrics: JsonObject
}

/**
 * The answer of an ended run (CAP.md §4): a 200 whose `output` is filled by the caller, or, when the
 * run produced nothing, the error body: 503 after a shutdown, 504 after a timeout, else 502.
 */
export function answerOf (outcome: RunOutcome): RunAnswer {
  if (outcome.reason !== 'done' && !outcome.produced) {
    if (outcome.reason === 'shutdown') return { status: 503, body: errorBody(new AH_ERR_SHUTTING_DOWN()) }
    if (outcome.fatal?.code === 'run_timeout') return { status: 504, body: errorBody(withDetails(new AH_ERR_RUN_TIMEOUT(), { error: outcome.fatal })) }
    return { status: 502, body: errorBody(withDetails(new AH_ERR_AGENT_FAILED(), { error: outcome.fatal ?? outcome.lastError ?? null })) }
  }
  return { status: 200, body: { request_id: outcome.requestId, created_at: new Date().toISOString(), metrics: outcome.metrics } }
}

/** The output of a run rebuilt from its journal: the `result()` object of a run that ended `done`, else the lossless transcript. */
export function outputFromJournal (rows: readonly JournalRow[], endReason: string | null): JsonObject {
  const transcript = new TranscriptBuilder()
  let result: JsonObject | undefined
  for (const row of rows) {
    const packet = JSON.parse(row.frame) as StreamPacket
    transcript.add(packet)
    if (packet.op === 'EVENT' && (packet.p as { type?: unknown }).type === 'RESULT') result = (packet.p as { data: JsonObject }).data
  }
  return endReason === 'done' && result !== undefined ? result : transcript.build()
}

/**
 * The stored answer of an ended run. A 200 is stored without its output (the journal is the one
 * copy of it): the output is rebuilt from the journal here.
 */
export async function storedAnswer (record: RunRecord, store: RunReader): Promise<RunAnswer> {
  const body = JSON.parse(record.response ?? '{}') as JsonObject
  const status = record.response_status ?? 500
  if (status !== 200 || 'output' in body) return { status, body }
  const { metrics, ...head } = body
  return { status, body: { ...head, output: outputFromJournal(await store.rows(record.request_id), record.end_reason), ...(metrics !== undefined ? { metrics } : {}) } }
}
