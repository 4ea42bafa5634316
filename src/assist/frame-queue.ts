import type { StreamPacket } from '../protocol/packets.js'
import type { PacketSink } from './run.js'

/** One packet as a follower yields it: the journaled JSON, ready for the wire. */
export interface Frame {
  /** The packet's place in the run's journal. */
  ord: number
  stream_id: string
  seq: number
  /** The packet as compact JSON (what goes on an SSE `data:` line). */
  json: string
  /** True for the main stream's CLOSE: the last packet of the response. */
  final: boolean
  /** The packet itself, when the frame comes from the live run (not read back from the journal): see {@link packetOf}. */
  packet?: StreamPacket
}

/** A frame's packet: the live run's own (read only: every follower shares it), else parsed from its JSON. */
export function packetOf (frame: Frame): StreamPacket {
  return frame.packet ?? JSON.parse(frame.json) as StreamPacket
}

/** How a queue stopped taking packets. */
export type QueueEnd = 'ended' | 'lost' | 'overflow'

/**
 * The bridge from a live run (which pushes) to a follower (which pulls): a {@link PacketSink}
 * whose packets are taken with {@link take}. Past `highWaterBytes` it asks the run to wait until
 * the follower has taken them; past `maxBytes` (a run that ignores backpressure) it stops and
 * reports `overflow`, so a client that cannot keep up costs at most that much memory.
 */
export class FrameQueue implements PacketSink {
  #frames: Frame[] = []
  readonly #mainStreamId: string
  readonly #highWater: number
  readonly #max: number
  #bytes = 0
  #end: QueueEnd | undefined
  #wake: (() => void) | undefined
  #space: { promise: Promise<void>, resolve: () => void } | undefined

  readonly #onOverflow: () => void

  /** @param onOverflow called once when the queue passes `maxBytes` (the client is too slow) */
  constructor (mainStreamId: string, highWaterBytes: number, maxBytes: number, onOverflow: () => void) {
    this.#mainStreamId = mainStreamId
    this.#highWater = highWaterBytes
    this.#max = maxBytes
    this.#onOverflow = onOverflow
  }

  /** Why the queue stopped, once it has. */
  get ended (): QueueEnd | undefined { return this.#end }

  write (packet: StreamPacket, json: string, ord: number): Promise<void> | undefined {
    if (this.#end !== undefined) return undefined
    this.#frames.push({ ord, stream_id: packet.stream_id, seq: packet.seq, json, final: packet.op === 'CLOSE' && packet.stream_id === this.#mainStreamId, packet })
    this.#bytes += json.length
    this.#notify()
    if (this.#bytes > this.#max) {
      this.#stop('overflow')
      this.#frames.length = 0
      this.#onOverflow()
      return undefined
    }
    if (this.#bytes <= this.#highWater) return undefined
    if (this.#space === undefined) {
      let resolve!: () => void
      const promise = new Promise<void>((_resolve) => { resolve = _resolve })
      this.#space = { promise, resolve }
    }
    return this.#space.promise
  }

  end (lost = false): void {
    this.#stop(lost ? 'lost' : 'ended')
  }

  /** The follower went away: release a run waiting for space. */
  close (): void {
    this.#stop('ended')
    this.#frames.length = 0
  }

  /**
   * Every frame queued so far, in order; waits for one; undefined once the queue has ended and is
   * empty (see {@link ended}). Taken in batches, a fast run's packets cross to the socket in one
   * write each (bench/stream.js: one take() per frame cost ~1.8 µs of a packet's ~6.7 µs).
   */
  async take (): Promise<Frame[] | undefined> {
    for (;;) {
      if (this.#frames.length > 0) {
        const frames = this.#frames
        this.#frames = []
        this.#bytes = 0
        this.#space?.resolve()
        this.#space = undefined
        return frames
      }
      if (this.#end !== undefined) return undefined
      await new Promise<void>((resolve) => { this.#wake = resolve })
    }
  }

  #notify (): void {
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }

  #stop (why: QueueEnd): void {
    this.#end ??= why
    this.#space?.resolve()
    this.#space = undefined
    this.#notify()
  }
}
