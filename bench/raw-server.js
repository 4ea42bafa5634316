// The floor: a bare node:http server and nothing else (no validation, no journal, no agent).
// --frames=<file>: every POST is answered with the SSE frames in the file (one JSON string a line),
//   written with res.write in a loop that honours backpressure (--turns: one event-loop turn a frame);
// --echo: every POST is answered with a small JSON object echoing the body's payload query.
// Prints one JSON line, {"url": ...}, once listening.
import { createServer } from 'node:http'
import { readFileSync } from 'node:fs'

const option = (name) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
const frames = process.argv.includes('--echo') ? undefined : readFileSync(option('frames'), 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l))
const turns = process.argv.includes('--turns')

const server = createServer((req, res) => {
  let body = ''
  req.setEncoding('utf8')
  req.on('data', (c) => { body += c })
  req.on('end', () => {
    if (frames === undefined) {
      const envelope = JSON.parse(body)
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ request_id: envelope.request_id, output: { echo: envelope.payload?.payload?.query } }))
      return
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    let i = 0
    const next = () => {
      while (i < frames.length) {
        const more = res.write(frames[i++])
        if (!more) { res.once('drain', next); return }
        if (turns) { setImmediate(next); return }
      }
      res.end()
    }
    next()
  })
})
server.listen(0, '127.0.0.1', () => { process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }) + '\n') })
process.on('SIGTERM', () => { server.close(); process.exit(0) })
