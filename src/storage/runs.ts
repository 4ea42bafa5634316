import type { Awaitable } from './awaitable.js'
import type { Viewer } from './tenants.js'

/** A run as stored: its envelope's hash, who runs it under which lease, and (once ended) its JSON answer. */
export interface RunRecord {
  /** The run's key in the journal (runs are found by `request_id`; their journal rows by this). */
  run_id: number
  request_id: string
  envelope_hash: string
  /** The validated envelope, as JSON. */
  envelope: string
  session_id: string
  agent_id: string
  /** The run's main stream (its CLOSE ends the response). */
  main_stream_id: string
  state: 'running' | 'ended'
  end_reason: string | null
  /** Diagnostics only: ownership is the lease below, never the instance or the PID. */
  owner_instance: string
  owner_pid: number
  /** The caller who submitted the run (a key id, `jwt:<sub>`, or `anonymous`); null for runs stored before it was recorded. */
  owner_key: string | null
  /** The current owner's fencing token: only the holder of this token may write the run. */
  lease_token: string | null
  /** When the owner's lease lapses unless renewed (ms since epoch); a running run past it is an orphan. */
  lease_expires_at: number | null
  /** Another process asked for the run to be cancelled; its owner does so at its next heartbeat. */
  cancel_requested: number
  started_at: number
  ended_at: number | null
  response_status: number | null
  /** The JSON answer; for a 200 without `output`, the output is rebuilt from the journal. */
  response: string | null
}

/** One journaled packet: `seq` is null for an event kept off the wire (client `supported_events`). */
export interface JournalRow {
  ord: number
  stream_id: string
  seq: number | null
  frame: string
}

/** A journal row as stored: the frames of one flush (ords `ord - count + 1` to `ord`), newline-separated. */
export interface StoredBatch { ord: number, count: number, frames: string }

/** A frame's stream id and seq (absent: kept off the wire); every frame starts so (`assist/packets.ts:packetJson`). */
const FRAME_HEAD = /^\{"stream_id":"([^"]+)"(?:,"seq":(\d+))?/

/** The journal rows after `afterOrd` in stored batches (in order), at most `limit` of them (-1: all). */
export function journalRows (batches: readonly StoredBatch[], afterOrd: number, limit: number): JournalRow[] {
  const out: JournalRow[] = []
  for (const batch of batches) {
    let ord = batch.ord - batch.count
    for (const frame of batch.frames.split('\n')) {
      if (++ord <= afterOrd) continue
      if (out.length === limit) return out
      const [, streamId, seq] = FRAME_HEAD.exec(frame) as RegExpExecArray
      out.push({ ord, stream_id: streamId as string, seq: seq === undefined ? null : Number(seq), frame })
    }
  }
  return out
}

/** How the frame of wire packet `streamId`/`seq` begins (a payload's nested object never begins a line). */
export function frameHead (streamId: string, seq: number): string {
  return `{"stream_id":"${streamId}","seq":${seq},`
}

/** The ord of the frame beginning with `head` in `batch`, found by searching for it. */
export function ordIn (batch: StoredBatch | undefined, head: string): number | undefined {
  if (batch === undefined) return undefined
  const index = batch.frames.split('\n').findIndex((frame) => frame.startsWith(head))
  return batch.ord - batch.count + 1 + index
}

/** The stored form of consecutive journal rows of one run. */
export function batchOf (rows: readonly JournalRow[]): StoredBatch {
  return { ord: (rows.at(-1) as JournalRow).ord, count: rows.length, frames: rows.length === 1 ? (rows[0] as JournalRow).frame : rows.map((r) => r.frame).join('\n') }
}

/** What a new run is stored with. */
/** Which runs {@link SqliteRunStore.list} returns. */
export interface RunFilter {
  agentId: string
  /** Only the runs this viewer sees (by owner: `storage/tenants.ts`). */
  viewer?: Viewer
  sessionId?: string
  /** Only runs in one of these states (an ended one with one of the end reasons, when given). */
  states?: Array<{ state: 'running' | 'ended', endReason?: string[] }>
  /** Only runs started or ended after this time (ms since epoch). */
  changedAfter?: number
}

export type NewRun = Pick<RunRecord, 'request_id' | 'envelope_hash' | 'envelope' | 'session_id' | 'agent_id' | 'main_stream_id' | 'owner_instance' | 'owner_pid' | 'owner_key' | 'lease_token' | 'lease_expires_at'>

/** The outcome of renewing this process's leases. */
export interface Renewal {
  /** Runs whose lease was taken (they were recovered elsewhere): their holder must stop writing. */
  lost: string[]
  /** Runs another process asked to cancel. */
  cancelled: string[]
}

/** Where a page of runs, newest first, goes on from: the last run of the page before. */
export interface RunCursor {
  startedAt: number
  runId: number
}

/**
 * Which runs {@link RunReader.marked} returns: one principal's runs of some agents whose envelope's
 * `payload.metadata` carries `mark` (a key a protocol binding sets on the runs it starts in a way
 * of its own: MCP's `mcp_task` on a task-augmented tool call's).
 */
export interface MarkFilter {
  ownerKey: string
  agentIds: readonly string[]
  /** A metadata key (letters, digits and `_`). */
  mark: string
}

const MARK = /^[A-Za-z0-9_]{1,64}$/

/**
 * The text every envelope carrying `mark` in its metadata contains (envelopes are stored as
 * `JSON.stringify` writes them: no blanks, and a key of these characters is never escaped), which
 * a driver's query looks for before {@link carriesMark} decides: a JSON operator of the database
 * could refuse an envelope whose JSON it cannot hold (PostgreSQL's jsonb and a `\u0000`).
 * @throws Error when `mark` is not a plain key
 */
export function markNeedle (mark: string): string {
  if (!MARK.test(mark)) throw new Error(`a run mark is 1 to 64 letters, digits and _: ${JSON.stringify(mark)}`)
  return `"${mark}":`
}

/** Whether the run's envelope carries `mark` in its `payload.metadata`. */
export function carriesMark (run: Pick<RunRecord, 'envelope'>, mark: string): boolean {
  const metadata = (JSON.parse(run.envelope) as { payload?: { metadata?: Record<string, unknown> } }).payload?.metadata
  return metadata !== undefined && Object.hasOwn(metadata, mark)
}

/**
 * The marked runs of a page, from a driver's `candidates` (newest first, every run whose envelope
 * contains {@link markNeedle}, at most `limit` before the cursor): pages of candidates are read
 * until `limit` of them carry the mark, or there are no more.
 */
export async function markedRuns (mark: string, page: { limit: number, before?: RunCursor }, candidates: (before: RunCursor | undefined, limit: number) => Awaitable<RunRecord[]>): Promise<RunRecord[]> {
  const out: RunRecord[] = []
  let before = page.before
  for (;;) {
    const batch = await candidates(before, page.limit)
    for (const run of batch) {
      if (carriesMark(run, mark)) out.push(run)
      if (out.length === page.limit) return out
    }
    const last = batch.at(-1)
    if (last === undefined || batch.length < page.limit) return out
    before = { startedAt: last.started_at, runId: last.run_id }
  }
}
