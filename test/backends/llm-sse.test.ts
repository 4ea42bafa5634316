import t from 'tap'
import { parseSse } from '../../src/backends/llm/sse.js'
import { ParseState, type ParseResult } from '../../src/backends/protocol.js'
import { anthropic } from '../fixtures/providers.js'

/** Feed `parts` to one stream, then end it; the results without the `partial`s. */
function read (parts: Array<string | Uint8Array>, state = new ParseState()): ParseResult[] {
  const out = parts.flatMap((p) => parseSse(p, state))
  return [...out, ...parseSse(null, state)].filter((r) => r.type !== 'partial')
}

const message = (data: unknown, event?: string): ParseResult => ({ type: 'message', message: event === undefined ? { data } : { event, data } })

t.test('LF, CRLF and bare CR line endings give the same events, however the stream is split', async (t) => {
  const lf = [...anthropic.text(['Grüße ', '🌍'], [5, 2]), ': comment\nid: 7\nretry: 100\n\n'].join('')
  const expected = read([lf])
  t.equal(expected.filter((r) => r.type === 'message').length, 7, 'every event but message_stop')
  t.same(expected.at(-1), { type: 'eof' })
  for (const [name, ending] of [['CRLF', '\r\n'], ['CR', '\r']] as const) {
    const bytes = Buffer.from(lf.replace(/\n/g, ending))
    t.same(read([bytes]), expected, `${name}: whole`)
    let same = 0
    for (let cut = 0; cut <= bytes.length; cut++) {
      if (JSON.stringify(read([bytes.subarray(0, cut), bytes.subarray(cut)])) === JSON.stringify(expected)) same++
    }
    t.equal(same, bytes.length + 1, `${name}: split in two at every byte boundary`)
  }
})

t.test('a multi-byte UTF-8 character split across chunks arrives whole', async (t) => {
  const bytes = Buffer.from('data: {"text":"日🌍"}\n\n')
  const start = bytes.indexOf(Buffer.from('🌍'))
  const parts = [bytes.subarray(0, start + 1), bytes.subarray(start + 1, start + 3), bytes.subarray(start + 3)]
  t.same(read(parts), [message({ text: '日🌍' })])
  t.same(read([...bytes].map((b) => Uint8Array.of(b))), [message({ text: '日🌍' })], 'one byte at a time')
})

t.test('fields without the space after the colon, and a field split across chunks', async (t) => {
  t.same(read(['data:{"a":1}\n\n']), [message({ a: 1 })], 'data: with no space')
  t.same(read(['event:content_block_stop\ndata:{"index":0}\n\n']), [message({ index: 0 }, 'content_block_stop')], 'event: with no space')
  t.same(read(['event:message_stop\ndata:{}\n\n']), [{ type: 'eof' }])
  t.same(read(['da', 'ta: {"a"', ':1}\n', '\n']), [message({ a: 1 })], 'a data field split in its name, its value and before its blank line')
  t.same(read(['eve', 'nt: message_st', 'op\ndata: {}\n\n']), [{ type: 'eof' }], 'an event name split across chunks')
  const state = new ParseState()
  t.same(parseSse('data: {"a"', state), [{ type: 'partial' }], 'nothing complete yet')
  t.same(parseSse(':1}\n\ndata: {"b":2}\n\n', state), [message({ a: 1 }), message({ b: 2 })], 'the rest completes the carried event and the next')
})

t.test('several data lines are one event, joined by newlines', async (t) => {
  t.same(read(['data: {"a":\ndata: [1,\ndata: 2]}\n\n']), [message({ a: [1, 2] })])
})

t.test('a stream that ends without a blank line still completes its last event', async (t) => {
  t.same(read(['data: {"a":1}\n']), [message({ a: 1 })], 'after its last line break')
  t.same(read(['data: {"a":1}']), [message({ a: 1 })], 'in the middle of its last line')
  t.same(read(['data: {"a":1}\r']), [message({ a: 1 })], 'after a CR that might have begun a CRLF')
  t.same(read(['data: [DONE]']), [{ type: 'eof' }], 'the end marker too')
  t.same(read([]), [], 'an empty stream: nothing')
  t.same(read(['data: {"a":1}\n\n']), [message({ a: 1 })], 'a finished event is not given twice')
  const state = new ParseState()
  read(['data: {"a":1}'], state)
  t.equal(state.ended, true, 'the state says the input ended')
})

t.test('each stream has its own parse state: interleaved streams do not mix', async (t) => {
  const a = new ParseState()
  const b = new ParseState()
  t.same(parseSse('data: {"fr', a), [{ type: 'partial' }])
  t.same(parseSse('event: content_block_stop\ndata: {"fr', b), [{ type: 'partial' }])
  t.same(parseSse('om":"a"}\n\n', a), [message({ from: 'a' })])
  t.same(parseSse('om":"b"}\n\n', b), [message({ from: 'b' }, 'content_block_stop')])
})

t.test('data that is not a JSON object is an error result; the stream goes on', async (t) => {
  t.match(read(['data: {not json}\n\ndata: {"a":1}\n\n']), [{ type: 'error', error: /unparsable event data "\{not json\}"/ }, message({ a: 1 })])
  t.match(read(['data: "text"\n\n']), [{ type: 'error', error: /not a JSON object/ }])
  t.match(read(['data: null\n\n']), [{ type: 'error', error: /not a JSON object/ }])
  t.match(read(['data\n\n']), [{ type: 'error', error: /unparsable event data ""/ }], 'a data field with no colon is an empty value')
  t.same(read(['event: ping\n\n', 'id: 1\nretry: x\nunknown: y\n\n']), [], 'events without data and other fields give nothing')
})
