import t from 'tap'
import { once } from 'node:events'
import { createServer, get, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { SseWriter } from '../../src/http/sse-writer.js'

// the AI SDK and AG-UI streams wrote one socket write a chunk: a fast run's batch of chunks is one
// (bench/projections.js: 0.72x and 0.77x the CAP stream's words a second before, ~0.95x after)
t.test('sendDataAll writes a batch of values as data lines in one write, and nothing for none', async (t) => {
  let writes = 0
  let written: Promise<void> | undefined
  const server = createServer((_req, res: ServerResponse) => {
    const write = res.write.bind(res) as (chunk: string) => boolean
    const writer = new SseWriter(res, { heartbeatMs: 60_000, retryMs: 0, stallMs: 60_000, onGone: () => {} })
    res.write = ((chunk: string) => { writes++; return write(chunk) }) as typeof res.write
    written = writer.sendDataAll([])
    written ??= writer.sendDataAll([{ type: 'text-delta', delta: 'a' }, 'two', 3])
    writer.end()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const res = await new Promise<import('node:http').IncomingMessage>((resolve) => get(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, resolve))
  let body = ''
  res.setEncoding('utf8')
  res.on('data', (c: string) => { body += c })
  await once(res, 'end')
  t.equal(written, undefined, 'no backpressure for a small batch')
  t.equal(writes, 1, 'three values, one write')
  t.equal(body, 'data: {"type":"text-delta","delta":"a"}\n\ndata: "two"\n\ndata: 3\n\n')
})
