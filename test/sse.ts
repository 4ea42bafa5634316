import { compileSchema, toIssues } from '../src/agents/json-schema.js'
import { ErrorBody, ServiceResponse, Transcript } from '../src/protocol/response.js'
import { SSE_EVENT_NAME, StreamPacket } from '../src/protocol/packets.js'
import type { ErrorBody as ErrorBodyType, ServiceResponse as ServiceResponseType, Transcript as TranscriptType } from '../src/protocol/response.js'
import type { StreamPacket as StreamPacketType } from '../src/protocol/packets.js'

const checkPacket = compileSchema<StreamPacketType>(StreamPacket)
const checkResponse = compileSchema<ServiceResponseType>(ServiceResponse)
const checkTranscript = compileSchema<TranscriptType>(Transcript)
const validErrorBody = compileSchema<ErrorBodyType>(ErrorBody)
const T_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/

/** Every packet parsed in this test process (each one was checked against the strict schema). */
export const seenPackets: StreamPacketType[] = []

/** What an SSE body contained. */
export interface ParsedStream {
  packets: StreamPacketType[]
  /** Comment lines (without the leading colon and space). */
  comments: string[]
  retry: number | undefined
}

/**
 * Parse an SSE body into packets, failing on anything CAP.md §5 forbids: an event that is not
 * exactly `event: stream.packet` / `id: <stream_id>` / `data: <one-line JSON>`, a packet that does
 * not match the strict StreamPacket schema, or a `t` that is not UTC with milliseconds.
 * `complete` (default true) also checks the stream rules of {@link assertStreamRules}.
 */
export function parseSse (body: string, complete = true): ParsedStream {
  const packets: StreamPacketType[] = []
  const comments: string[] = []
  let retry: number | undefined
  const blocks = body.split('\n\n')
  const tail = blocks.pop()
  if (tail !== '' && complete) throw new Error(`SSE body does not end with a blank line: ${JSON.stringify(tail)}`)
  for (const block of blocks) {
    const lines = block.split('\n')
    if (lines.every((l) => l.startsWith(':'))) { comments.push(...lines.map((l) => l.slice(1).trim())); continue }
    if (lines.length === 1 && lines[0]?.startsWith('retry: ') === true) { retry = Number(lines[0].slice(7)); continue }
    if (lines.length !== 3) throw new Error(`SSE event is not three lines: ${JSON.stringify(block)}`)
    const [event, id, data] = lines as [string, string, string]
    if (event !== `event: ${SSE_EVENT_NAME}`) throw new Error(`bad event line: ${event}`)
    if (!id.startsWith('id: ')) throw new Error(`bad id line: ${id}`)
    if (!data.startsWith('data: ')) throw new Error(`bad data line: ${data}`)
    const packet = JSON.parse(data.slice(6)) as StreamPacketType
    if (!checkPacket(packet)) throw new Error(`packet breaks the schema: ${JSON.stringify(toIssues(checkPacket.errors))} in ${data}`)
    if (id.slice(4) !== packet.stream_id) throw new Error(`id line ${id} differs from stream_id ${packet.stream_id}`)
    if (!T_UTC.test(packet.t)) throw new Error(`t is not UTC with milliseconds: ${packet.t}`)
    if (JSON.stringify(packet) !== data.slice(6)) throw new Error(`data is not compact JSON: ${data}`)
    packets.push(packet)
    seenPackets.push(packet)
  }
  if (complete) assertStreamRules(packets)
  return { packets, comments, retry }
}

/**
 * CAP.md §5's stream rules: `seq` starts at 1 per stream with no gaps; exactly one CLOSE per
 * stream and nothing after it; every sub-stream opens with STREAM_START and closes before the
 * main stream, whose CLOSE is the last packet. Returns the main stream's id.
 */
export function assertStreamRules (packets: StreamPacketType[]): string {
  const last = packets.at(-1)
  if (last === undefined) throw new Error('no packets')
  if (last.op !== 'CLOSE') throw new Error(`last packet is ${last.op}, not CLOSE`)
  const main = last.stream_id
  const seqs = new Map<string, number>()
  const closed = new Set<string>()
  for (const p of packets) {
    const expected = (seqs.get(p.stream_id) ?? 0) + 1
    if (p.seq !== expected) throw new Error(`stream ${p.stream_id}: seq ${p.seq}, expected ${expected}`)
    if (closed.has(p.stream_id)) throw new Error(`stream ${p.stream_id}: packet after CLOSE`)
    if (p.stream_id !== main && expected === 1 && !(p.op === 'EVENT' && p.p.type === 'STREAM_START')) {
      throw new Error(`stream ${p.stream_id} does not open with STREAM_START`)
    }
    if (p.op === 'CLOSE') closed.add(p.stream_id)
    seqs.set(p.stream_id, p.seq)
  }
  for (const id of seqs.keys()) if (!closed.has(id)) throw new Error(`stream ${id} never closed`)
  const mainClose = packets.findIndex((p) => p.op === 'CLOSE' && p.stream_id === main)
  if (mainClose !== packets.length - 1) throw new Error('the main stream closed before its last packet')
  return main
}

/** Assert a JSON `ServiceResponse` (and its transcript, when it is one) match the strict schemas. */
export function checkServiceResponse (body: unknown, transcript = false): ServiceResponseType {
  if (!checkResponse(body)) throw new Error(`ServiceResponse breaks the schema: ${JSON.stringify(toIssues(checkResponse.errors))}`)
  if (transcript && !checkTranscript(body.output)) throw new Error(`transcript breaks the schema: ${JSON.stringify(toIssues(checkTranscript.errors))}`)
  return body
}

/** Assert an error body matches the strict schema, and return it. */
export function checkErrorBody (body: unknown): ErrorBodyType {
  if (!validErrorBody(body)) throw new Error(`error body breaks the schema: ${JSON.stringify(toIssues(validErrorBody.errors))}`)
  return body
}
