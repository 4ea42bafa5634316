import { randomUUID } from 'node:crypto'
import type { JsonObject } from '../agents/contract.js'
import type { StreamErrorCode } from '../errors.js'
import type { CloseReason, StreamError, StreamErrorSeverity, StreamOpCode, StreamPacket } from '../protocol/packets.js'
import type { JournalRow } from '../storage/runs.js'

/** A StreamError (CAP.md §5): `details` only when given. */
export function streamError (code: StreamErrorCode, message: string, severity: StreamErrorSeverity, details?: JsonObject): StreamError {
  const error: StreamError = { code, message, severity }
  if (details !== undefined) error.details = details
  return error
}

/** A packet kept off the wire (an event the client does not render): journaled without a `seq`. */
export interface UnsequencedPacket {
  stream_id: string
  op: StreamOpCode
  t: string
  p: StreamPacket['p']
}

/**
 * A packet's compact JSON, given its payload's: byte for byte what `JSON.stringify(packet)` gives
 * (same key order; ids, op and time never need escaping), so the payload is serialised once, and
 * its size is known before the packet takes a `seq`.
 */
export function packetJson (packet: { stream_id: string, seq?: number, op: StreamOpCode, t: string }, payloadJson: string): string {
  return packet.seq === undefined
    ? `{"stream_id":"${packet.stream_id}","op":"${packet.op}","t":"${packet.t}","p":${payloadJson}}`
    : `{"stream_id":"${packet.stream_id}","seq":${packet.seq},"op":"${packet.op}","t":"${packet.t}","p":${payloadJson}}`
}

const CLOSE_OP = /^\{"stream_id":"[^"]+","seq":\d+,"op":"CLOSE"/

/** Whether a journaled frame is a CLOSE (without parsing it). */
export function isCloseFrame (frame: string): boolean {
  return CLOSE_OP.test(frame)
}

let clockMs = 0
let clockIso = ''

/** Now as an ISO 8601 string, made once per millisecond (a fast run makes many packets in one). */
function nowIso (): string {
  const ms = Date.now()
  if (ms !== clockMs) {
    clockMs = ms
    clockIso = new Date(ms).toISOString()
  }
  return clockIso
}

/**
 * The one place packets are made: the live run, recovery after a crash and `resume_gap` all build
 * theirs here. It numbers each stream's packets from 1 without gaps, knows which streams are open,
 * and applies CAP.md §5's terminal rules: every stream gets exactly one CLOSE, sub-streams close
 * before the main stream, and the main stream's CLOSE is the last packet.
 */
export class PacketFactory {
  readonly mainStreamId: string
  readonly #seq = new Map<string, number>()
  /** Sub-streams opened (STREAM_START) and not yet closed. */
  readonly #open = new Set<string>()
  #mainClosed = false

  constructor (mainStreamId: string = randomUUID()) {
    this.mainStreamId = mainStreamId
  }

  /** A factory that goes on from a journal (recovery): the same counters and open streams as the run that wrote it. */
  static fromJournal (mainStreamId: string, rows: readonly JournalRow[]): PacketFactory {
    const factory = new PacketFactory(mainStreamId)
    for (const row of rows) {
      if (row.seq === null) continue
      factory.#seq.set(row.stream_id, row.seq)
      if (isCloseFrame(row.frame)) factory.#closed(row.stream_id)
      else if (row.stream_id !== mainStreamId) factory.#open.add(row.stream_id)
    }
    return factory
  }

  /** True once the main stream's CLOSE was made: nothing may follow it. */
  get ended (): boolean { return this.#mainClosed }

  /** Whether `streamId` is a sub-stream that is open. */
  isOpen (streamId: string): boolean { return this.#open.has(streamId) }

  /** The next packet of a stream. A new sub-stream's first packet must be its STREAM_START. */
  packet (streamId: string, op: StreamOpCode, p: StreamPacket['p']): StreamPacket {
    const seq = (this.#seq.get(streamId) ?? 0) + 1
    this.#seq.set(streamId, seq)
    if (seq === 1 && streamId !== this.mainStreamId) this.#open.add(streamId)
    if (op === 'CLOSE') this.#closed(streamId)
    return { stream_id: streamId, seq, op, t: nowIso(), p } as StreamPacket
  }

  /** An event kept off this client's wire (it still reaches the journal and the transcript). */
  unsequenced (streamId: string, op: StreamOpCode, p: StreamPacket['p']): UnsequencedPacket {
    return { stream_id: streamId, op, t: nowIso(), p }
  }

  /** CLOSE `reason` on every open sub-stream, then on the main stream. */
  closeAll (reason: CloseReason): StreamPacket[] {
    const packets = [...this.#open].map((id) => this.packet(id, 'CLOSE', reason))
    packets.push(this.packet(this.mainStreamId, 'CLOSE', reason))
    return packets
  }

  /** A FATAL (or TRANSIENT) end: the error on the main stream, then every stream closes with `reason`. */
  failAll (error: StreamError, reason: CloseReason = 'aborted'): StreamPacket[] {
    return [this.packet(this.mainStreamId, 'ERROR', error), ...this.closeAll(reason)]
  }

  #closed (streamId: string): void {
    this.#open.delete(streamId)
    if (streamId === this.mainStreamId) this.#mainClosed = true
  }
}

/**
 * What a client resuming a request the journal no longer holds gets: ERROR `resume_gap` (FATAL) and
 * CLOSE `"aborted"`, on the stream its cursor names, numbered after the `seq` it has.
 */
export function resumeGapPackets (streamId: string, seq = 0): StreamPacket[] {
  const factory = PacketFactory.fromJournal(streamId, seq === 0 ? [] : [{ ord: 0, stream_id: streamId, seq, frame: '' }])
  return factory.failAll(streamError('resume_gap', 'This request is no longer in the journal (it is older than its retention); send a new request', 'FATAL'))
}
