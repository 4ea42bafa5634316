import t from 'tap'
import { CallResultBuilder, mcpLogLevel } from '../../src/mcp/call-result.js'
import type { StreamPacket } from '../../src/protocol/packets.js'

const STREAM = '0c6f4e2a-9b1d-4f3e-8a57-2d9e6b1c4a01'
let seq = 0
const packet = (op: StreamPacket['op'], p: unknown): StreamPacket => ({ stream_id: STREAM, seq: ++seq, t: '2026-01-01T00:00:00.000Z', op, p } as StreamPacket)
const close = (reason: string): StreamPacket => packet('CLOSE', reason)

t.test('agent log levels (pino\'s) as MCP\'s', async (t) => {
  t.same(['trace', 'debug', 'info', 'warn', 'error', 'fatal'].map(mcpLogLevel), ['debug', 'debug', 'info', 'warning', 'error', 'critical'])
  t.equal(mcpLogLevel('loud'), 'info')
  t.equal(mcpLogLevel(7), 'info')
})

t.test('the text is markdown and stream text in order; the main stream\'s close ends the run; other events say nothing', async (t) => {
  const result = new CallResultBuilder('agent')
  t.same(result.add(packet('EVENT', { type: 'MARKDOWN_BLOCK', id: STREAM, timestamp: '2026-01-01T00:00:00.000Z', data: { content: '# Title\n' } })), {})
  t.same(result.add(packet('EVENT', { type: 'STREAM_START', title: 's' })), {})
  t.same(result.add(packet('DELTA', 'chunk ')), {})
  t.same(result.add(packet('DELTA', 'two')), {})
  t.same(result.add(packet('EVENT', { type: 'DATA', id: STREAM, timestamp: '2026-01-01T00:00:00.000Z', view_hint: 'JSON', data: { a: 1 } })), {})
  t.same(result.add(close('done')), {}, 'a sub-stream\'s close')
  t.equal(result.build({}).isError, true, 'not over until the main stream closes')
  result.add(close('done'), true)
  t.same(result.build({ m: 1 }), {
    content: [
      { type: 'text', text: '# Title\nchunk two' },
      { type: 'resource', resource: { uri: `urn:uuid:${STREAM}`, mimeType: 'application/json', text: '{"a":1}' }, _meta: { view_hint: 'JSON' } }
    ],
    _meta: { m: 1 }
  }, 'the text, then the data as an embedded JSON resource')
})

t.test('media and sources as MCP content: an image or audio in a data: URL is the content itself, anything else a link; a citation a link with its snippet', async (t) => {
  const result = new CallResultBuilder('agent')
  const png = Buffer.from('not really a png').toString('base64')
  const svg = '<svg xmlns="http://www.w3.org/2000/svg"/>'
  result.add(packet('EVENT', {
    type: 'MEDIA_CAROUSEL',
    id: STREAM,
    timestamp: '2026-01-01T00:00:00.000Z',
    data: {
      items: [
        { url: `data:image/png;base64,${png}`, mime_type: 'image/png', alt_text: 'a chart' },
        { url: 'data:audio/wav;base64,UklGRg==', mime_type: 'audio/wav' },
        { url: `data:image/svg+xml,${encodeURIComponent(svg)}`, mime_type: 'image/svg+xml' },
        { url: 'https://example.org/diagram.png', mime_type: 'image/png', alt_text: 'a diagram' },
        { url: 'data:application/pdf;base64,JVBERg==', mime_type: 'application/pdf' }
      ]
    }
  }))
  result.add(packet('EVENT', { type: 'CITATION_BLOCK', id: STREAM, timestamp: '2026-01-01T00:00:00.000Z', data: { citations: [{ source_id: 's1', uri: 'https://example.org/a', title: 'A', snippet: 'said so', confidence: 0.9 }] } }))
  result.add(packet('DELTA', 'words'))
  result.add(close('done'), true)
  t.same(result.build({}).content, [
    { type: 'text', text: 'words' },
    { type: 'image', data: png, mimeType: 'image/png', _meta: { alt_text: 'a chart' } },
    { type: 'audio', data: 'UklGRg==', mimeType: 'audio/wav' },
    { type: 'image', data: Buffer.from(svg).toString('base64'), mimeType: 'image/svg+xml' },
    { type: 'resource_link', uri: 'https://example.org/diagram.png', name: 'a diagram', mimeType: 'image/png' },
    { type: 'resource_link', uri: 'data:application/pdf;base64,JVBERg==', name: 'application/pdf', mimeType: 'application/pdf' },
    { type: 'resource_link', uri: 'https://example.org/a', name: 's1', title: 'A', description: 'said so', _meta: { confidence: 0.9 } }
  ], 'the text first, then what the run showed, in order')
})

t.test('errors: a WARNING is a warning log line; a fatal one is the result\'s error; a run cut without one says how it ended', async (t) => {
  const warned = new CallResultBuilder('agent')
  t.same(warned.add(packet('ERROR', { code: 'agent_error', message: 'hm', severity: 'WARNING' })), { log: { level: 'warning', logger: 'agent', data: { error: 'agent_error', message: 'hm', severity: 'WARNING' } } })
  warned.add(close('done'), true)
  t.notOk(warned.build({}).isError, 'a warning does not fail the call')

  const timedOut = new CallResultBuilder('agent')
  t.match(timedOut.add(packet('ERROR', { code: 'run_timeout', message: 'too long', severity: 'TRANSIENT' })), { log: { level: 'error' } })
  timedOut.add(close('aborted'), true)
  t.same(timedOut.build({}), { content: [{ type: 'text', text: 'run_timeout: too long' }], isError: true, _meta: {} })

  const cancelled = new CallResultBuilder('agent')
  cancelled.add(close('cancelled'), true)
  t.same(cancelled.build({}).content, [{ type: 'text', text: 'cancelled: the run was cancelled' }])

  const cut = new CallResultBuilder('agent')
  t.same(cut.build({}).content, [{ type: 'text', text: 'aborted: the run ended before it finished' }], 'no close at all')
})
