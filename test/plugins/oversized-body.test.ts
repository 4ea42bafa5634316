// Real sockets: what is under test is what a client sending a large body reads back on the wire.
import t from 'tap'
import { request } from 'node:http'
import { listen } from '../helper.js'
import { checkErrorBody } from '../sse.js'

interface Sent {
  status?: number
  body: string
  /** The error the client saw sending the body or reading the answer (the server cut the connection). */
  error?: string
  /** Whether the socket was closed before the whole body was written. */
  cut: boolean
}

/**
 * POST `size` bytes to `/v1/assist` as curl does: in chunks, each once the last is written, and with
 * `Expect: 100-continue` only after the server's `100 Continue`. Resolves with what the client read.
 */
async function post (url: string, size: number, expectContinue: boolean): Promise<Sent> {
  return await new Promise((resolve) => {
    const sent: Sent = { body: '', cut: false }
    const chunk = Buffer.alloc(64 * 1024, 'x')
    const req = request(`${url}/v1/assist`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': size, ...(expectContinue ? { expect: '100-continue' } : {}) }
    })
    let written = 0
    // one chunk at a time, the next once the last is written: Node's client may never emit 'drain' once the answer has come
    const write = (): void => {
      if (req.destroyed) return
      if (written >= size) {
        req.end()
        return
      }
      const piece = chunk.subarray(0, Math.min(chunk.length, size - written))
      written += piece.length
      req.write(piece, (err) => { if (err == null) write() })
    }
    req.on('response', (res) => {
      sent.status = res.statusCode
      res.setEncoding('utf8')
      res.on('data', (text: string) => { sent.body += text })
    })
    // as curl does, a client that cannot send its body fails, even when an answer came back meanwhile
    req.on('error', (err) => { sent.error = err.message })
    req.on('close', () => {
      sent.cut = written < size
      resolve(sent)
    })
    if (expectContinue) req.on('continue', write)
    else write()
  })
}

t.test('a body past BODY_LIMIT always gets its 413 JSON answer, with and without Expect: 100-continue', async (t) => {
  const { url } = await listen(t)
  for (let round = 0; round < 4; round++) {
    for (const expectContinue of [false, true]) {
      const sent = await post(url, 5 * 1024 * 1024, expectContinue)
      const what = `round ${round}, ${expectContinue ? 'with' : 'without'} Expect: 100-continue`
      t.equal(sent.error, undefined, `${what}: the client sent its body and read the answer`)
      t.equal(sent.status, 413, what)
      if (sent.status === 413) t.equal(checkErrorBody(JSON.parse(sent.body)).code, 'AH_ERR_BODY_TOO_LARGE', what)
    }
  }
})

t.test('a body far past BODY_LIMIT is not read to its end: the server closes the connection', async (t) => {
  const { url } = await listen(t, { BODY_LIMIT: '1024' })
  const sent = await post(url, 64 * 1024 * 1024, false)
  t.ok(sent.cut, 'the connection closed before the client had sent the whole body')
  t.not(sent.error, undefined)
})
