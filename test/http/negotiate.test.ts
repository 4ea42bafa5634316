import t from 'tap'
import { chooseDeliveryMode } from '../../src/http/negotiate.js'
import { AGENTS, build, envelope } from '../helper.js'
import { checkErrorBody, checkServiceResponse, parseSse } from '../sse.js'

t.test('chooseDeliveryMode follows CAP.md §3', async (t) => {
  const rr = 'request_response'
  const sse = 'server_sent_events'
  const table: Array<[string | undefined, typeof rr | typeof sse, string | undefined]> = [
    [undefined, rr, rr], [undefined, sse, sse], ['', sse, sse], ['  ', rr, rr],
    ['application/json', sse, rr], ['text/event-stream', rr, sse],
    ['Application/JSON; charset=utf-8', sse, rr], ['text/event-stream;q=0.9', rr, sse],
    ['application/json, text/event-stream', rr, rr], ['application/json, text/event-stream', sse, sse],
    ['application/json;q=0, text/event-stream', rr, sse], ['text/event-stream;q=0.0', sse, undefined],
    ['*/*', sse, sse], ['*/*', rr, rr], ['application/*', sse, rr], ['text/*', rr, sse],
    ['application/*, text/*', sse, sse], ['text/html', rr, undefined], ['text/html, image/png', sse, undefined],
    [',,', rr, undefined], ['text/html;q=1, application/json;q=0', rr, undefined],
    // a type refused by name stays refused under a wildcard (the more specific range wins)
    ['text/event-stream;q=0, */*', sse, rr], ['application/json;q=0, */*', rr, sse], ['text/event-stream;q=0, text/*', sse, undefined],
    ['application/json;q=0, text/event-stream;q=0, */*', rr, undefined], ['application/json;q=0, application/*, text/*', rr, sse]
  ]
  for (const [accept, preferred, expected] of table) t.equal(chooseDeliveryMode(accept, preferred), expected, `${String(accept)} / ${preferred}`)
})

t.test('both modes for both example agents, chosen by Accept', async (t) => {
  const app = await build(t)
  const post = async (agent: string, accept?: string) => await app.inject({
    method: 'POST', url: '/v1/assist', headers: accept === undefined ? {} : { accept }, payload: envelope(agent, { query: 'a b', delay_ms: 0 })
  })
  const echoJson = await post(AGENTS.echo)
  t.equal(echoJson.headers['content-type'], 'application/json; charset=utf-8')
  t.same(checkServiceResponse(echoJson.json()).output, { echo: 'a b', calls: 1 })
  const echoSse = await post(AGENTS.echo, 'text/event-stream')
  t.same(parseSse(echoSse.body).packets.map((p) => [p.op, p.p]), [['EVENT', { type: 'RESULT', data: { echo: 'a b', calls: 1 } }], ['CLOSE', 'done']])
  const streamSse = await post(AGENTS.echoStream)
  t.equal(streamSse.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.same(parseSse(streamSse.body).packets.filter((p) => p.op === 'DELTA').map((p) => p.p), ['a ', 'b '])
  const streamJson = await post(AGENTS.echoStream, 'application/json')
  const transcript = checkServiceResponse(streamJson.json(), true).output as { streams: Array<{ text: string, state: string, title: string }>, text: string }
  t.match(transcript.streams, [{ text: 'a b ', state: 'closed', title: 'Echo Response' }])
  t.equal(transcript.text, 'a b ')
  const showcase = await post(AGENTS.showcase, 'application/json')
  const types = (checkServiceResponse(showcase.json(), true).output as { events: Array<{ type: string }> }).events.map((e) => e.type)
  for (const type of ['THOUGHT_TRACE', 'PROGRESS_INDICATOR', 'CITATION_BLOCK', 'MARKDOWN_BLOCK', 'DATA', 'MEDIA_CAROUSEL', 'STREAM_START']) t.ok(types.includes(type), type)
  parseSse((await post(AGENTS.showcase)).body)
})

t.test('406 when Accept admits neither', async (t) => {
  const app = await build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/html' }, payload: envelope(AGENTS.echo) })
  t.equal(res.statusCode, 406)
  t.equal(checkErrorBody(res.json()).code, 'AH_ERR_NOT_ACCEPTABLE')
})

t.test('SSE headers are exactly CAP.md §5\'s, never compressed', async (t) => {
  const app = await build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { 'accept-encoding': 'gzip, br' }, payload: envelope(AGENTS.echoStream, { query: 'x', delay_ms: 0 }) })
  t.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(res.headers['cache-control'], 'no-cache, no-transform')
  t.equal(res.headers['x-accel-buffering'], 'no')
  t.equal(res.headers.connection, 'keep-alive')
  t.equal(res.headers['content-encoding'], undefined)
})
