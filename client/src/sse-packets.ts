import { createParser } from 'eventsource-parser'
import { AgentHostError } from './agent-host-error.js'
import { SSE_EVENT_NAME, type StreamPacket } from './protocol.js'

/**
 * The packets of one SSE response body, in order: the data of each `stream.packet` event
 * (CAP.md §5), parsed with eventsource-parser; comments (`: ping`), `retry:` and other events are
 * skipped, and an event cut off by the end of the body is dropped. Ends when the body ends, throws
 * what reading it throws (a dropped connection), and cancels the body when the caller stops early.
 * @throws AgentHostError `invalid_response` for an event whose data is not JSON
 */
export async function * readPackets (body: ReadableStream<Uint8Array>): AsyncGenerator<StreamPacket, void, undefined> {
  const packets: StreamPacket[] = []
  let invalid: string | undefined
  const parser = createParser({
    onEvent (event) {
      if (event.event !== SSE_EVENT_NAME) return
      try {
        packets.push(JSON.parse(event.data) as StreamPacket)
      } catch {
        invalid ??= event.data
      }
    }
  })
  const reader = body.getReader()
  const decoder = new TextDecoder()
  try {
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      parser.feed(decoder.decode(chunk.value, { stream: true }))
      if (invalid !== undefined) throw new AgentHostError(`A ${SSE_EVENT_NAME} event whose data is not JSON: ${invalid.slice(0, 200)}`, { status: 200, code: 'invalid_response' })
      yield * packets.splice(0)
    }
  } finally {
    // a no-op once the body has ended; otherwise it lets go of the connection
    reader.cancel().catch(() => {})
  }
}
