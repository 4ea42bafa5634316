import t from 'tap'
import { listen } from '../helper.js'
import { parseSse } from '../sse.js'
import { docBlocks, runShell } from './doc-blocks.js'

// docs/getting-started.md as a reader follows it after the README's first calls: the README's two
// calls in the other mode (the header the page says to add), then every endpoint of its block,
// each line run as written (only the port changes) and checked against what its comment says.

t.test('one agent, either mode: the README\'s JSON call as a stream, its SSE call as a JSON transcript', async (t) => {
  const { url } = await listen(t)
  const [json, sse] = docBlocks('README.md', '## A first call, in JSON and in SSE').map((b) => b.replaceAll('http://127.0.0.1:3000', url))
  const header = (block: string | undefined, value: string): string => (block as string).replace(" -H 'content-type: application/json'", ` -H 'content-type: application/json' -H 'accept: ${value}'`)
  const streamed = parseSse(await runShell(header(json, 'text/event-stream'))).packets
  t.match(streamed.find((p) => p.op === 'EVENT' && p.p.type === 'RESULT'), { p: { data: { echo: 'hello world' } } }, 'the echo agent\'s result, as a RESULT event')
  const transcript = JSON.parse(await runShell(header(sse, 'application/json').replace('"query": "hello streaming world" }', '"query": "hello streaming world", "delay_ms": 0 }'))) as { output: Record<string, unknown> }
  t.same(Object.keys(transcript.output).sort(), ['errors', 'events', 'streams', 'text'], 'output: { text, events, streams, errors }')
  t.equal(transcript.output.text, 'hello streaming world ')
})

t.test('the endpoints around a run answer as their comments say', async (t) => {
  const { url } = await listen(t)
  const lines = (docBlocks('docs/getting-started.md', '## One agent, either mode, and the endpoints around it')[0] as string).trim().split('\n')
  const run = async (i: number): Promise<string> => await runShell((lines[i] as string).replaceAll('http://127.0.0.1:3000', url))
  t.equal(lines.length, 8, 'eight endpoints')
  t.ok((JSON.parse(await run(0)) as { agents: Array<{ metadata: { name: string } }> }).agents.some((m) => m.metadata.name === 'echo'), 'every manifest, echo among them')
  t.match(JSON.parse(await run(1)), { metadata: { id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01', name: 'echo' } }, 'one, by name')
  t.match(JSON.parse(await run(2)), { name: 'echo', calls: Number, failures: Number, latency_ms: null }, 'its calls, failures and latency')
  t.same(Object.keys(JSON.parse(await run(3))).sort(), ['instance_id', 'status', 'uptime_seconds', 'version'], '{ status, instance_id, version, uptime_seconds }')
  t.match(await run(4), /^# HELP agent_host_/m, 'Prometheus metrics')
  t.match(JSON.parse(await run(5)), { statusCode: 404, code: 'AH_ERR_RUN_NOT_FOUND' }, 'no such running request: 404')
  t.match(JSON.parse(await run(6)), { openapi: /^3\.1/ }, 'the OpenAPI document')
  t.match(JSON.parse(await run(7)), { name: 'agent-host', links: { playground: '/playground/', docs: '/docs', assist: '/v1/assist' } }, 'what is here')
})
