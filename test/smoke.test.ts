import t from 'tap'
import { AGENTS, build, envelope } from './helper.js'
import { checkServiceResponse, parseSse } from './sse.js'

t.test('echo answers in JSON', async (t) => {
  const app = await build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo) })
  t.equal(res.statusCode, 200)
  const body = checkServiceResponse(res.json())
  t.same(body.output, { echo: 'hello world', calls: 1 })
})

t.test('echo-stream answers in SSE', async (t) => {
  const app = await build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echoStream, { query: 'a b c', delay_ms: 0 }) })
  t.equal(res.statusCode, 200)
  const { packets } = parseSse(res.body)
  t.equal(packets.length, 7)
})
