import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser'
import type { ParseResult, ParseState } from '../protocol.js'

/** One stream's event parser and the events it completed since the last call. */
interface SseReader {
  parser: EventSourceParser
  events: EventSourceMessage[]
}

// kept beside each stream's ParseState rather than in it, so the protocol's types stay free of the parser's
const readers = new WeakMap<ParseState, SseReader>()

function readerOf (state: ParseState): SseReader {
  let reader = readers.get(state)
  if (reader === undefined) {
    const events: EventSourceMessage[] = []
    reader = { parser: createParser({ onEvent: (event) => { events.push(event) } }), events }
    readers.set(state, reader)
  }
  return reader
}

/**
 * Parse a provider's Server-Sent Events stream (OpenAI chat completions, Anthropic messages) with
 * `eventsource-parser`: each event whose `data` is JSON becomes `{ type: 'message', message: { event?, data } }`;
 * `data: [DONE]` (OpenAI) and `event: message_stop` (Anthropic) are `eof`. Comments, `id:` and
 * `retry:` lines are skipped; lines may end in LF, CRLF or CR. Bytes split anywhere (even inside a
 * UTF-8 character) are carried in `state`. `chunk === null` ends the input: an event the stream did
 * not close with a blank line is completed, not dropped.
 */
export function parseSse (chunk: Uint8Array | string | null, state: ParseState): ParseResult[] {
  const { parser, events } = readerOf(state)
  if (chunk === null) {
    parser.feed(state.decoder.decode())
    // an unterminated last line, then the blank line that dispatches its event
    parser.feed('\n\n')
    state.ended = true
  } else {
    parser.feed(typeof chunk === 'string' ? chunk : state.decoder.decode(chunk, { stream: true }))
  }
  const results = events.splice(0).map(dispatch)
  if (results.length === 0 && chunk !== null) results.push({ type: 'partial' })
  return results
}

function dispatch ({ event, data }: EventSourceMessage): ParseResult {
  if (data === '[DONE]' || event === 'message_stop') return { type: 'eof' }
  try {
    const parsed: unknown = JSON.parse(data)
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not a JSON object')
    return { type: 'message', message: event === undefined ? { data: parsed } : { event, data: parsed } }
  } catch (err) {
    return { type: 'error', error: new Error(`unparsable event data ${JSON.stringify(data.slice(0, 200))}: ${(err as Error).message}`) }
  }
}
