// The floor for streaming: a bare node:http server that answers every POST with the SSE frames in
// `--frames=<file>` (one frame per line of JSON strings), written with res.write in a loop that
// honours backpressure, and nothing else: no validation, no journal, no agent.
//   node bench/raw-server.js --frames=<file> [--turns]   (--turns: one event-loop turn per frame)
// Prints one JSON line, {"url": ...}, once listening.
import { createServer } from 'node:http'
import { readFileSync } from 'node:fs'

const option = (name) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
const frames = readFileSync(option('frames'), 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l))
const turns = process.argv.includes('--turns')

const server = createServer((req, res) => {
  req.resume()
  req.on('end', () => {
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
