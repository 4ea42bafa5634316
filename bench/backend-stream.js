// What the host adds per streamed token: a fake OpenAI-compatible server streams N tokens; the
// client reads them (a) straight from that server, and (b) through POST /v1/assist (llm-chat, SSE)
// on a real socket, the host calling the same server through the OpenAI SDK and re-streaming
// each token as a journaled DELTA packet. Alternating rounds in one process.
// Run: npm run build && node bench/backend-stream.js   Options: --tokens=<per answer> --rounds=<n>
import { createServer, request } from 'node:http'
import { randomUUID } from 'node:crypto'
import { arg, load, mean, saveResult, tempDir } from './common.js'

const { buildApp } = await load('app')
const { loadConfig } = await load('config')
const tokens = arg('tokens', 2000, 50)
const rounds = arg('rounds', 5, 1)
const chunk = (content) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'bench', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`
const frames = [...Array.from({ length: tokens }, (_, i) => chunk(`tok${i} `)), `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'bench', choices: [], usage: { prompt_tokens: 5, completion_tokens: tokens } })}\n\n`, 'data: [DONE]\n\n']

const provider = createServer((req, res) => {
  req.resume()
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    // one write per token, as a provider streams them, yielding to the event loop in between
    let i = 0
    const next = () => {
      while (i < frames.length) {
        if (!res.write(frames[i++])) { res.once('drain', next); return }
        if (i % 16 === 0) { setImmediate(next); return }
      }
      res.end()
    }
    next()
  })
})
await new Promise((resolve) => provider.listen(0, '127.0.0.1', resolve))
const providerUrl = `http://127.0.0.1:${provider.address().port}`

const data = tempDir()
const app = await buildApp(loadConfig({ DATA_DIR: data.dir, LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '0', RATE_LIMIT_AGENT_MAX: '0', OPENAI_BASE_URL: `${providerUrl}/v1`, OPENAI_MODEL: 'bench', LLM_MAX_RETRIES: '0' }))
await app.listen({ host: '127.0.0.1', port: 0 })
const hostUrl = `http://127.0.0.1:${app.server.address().port}`

/** POST and read the whole answer; counts the tokens that arrived (`tok<i>` markers). */
function post (url, body, headers) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    let first
    let text = ''
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (c) => { first ??= performance.now(); text += c })
      res.on('end', () => {
        const got = (text.match(/tok\d+ /g) ?? []).length
        if (res.statusCode !== 200 || got !== tokens) reject(new Error(`${url}: status ${res.statusCode}, ${got} of ${tokens} tokens: ${text.slice(0, 300)}`))
        else resolve({ ms: performance.now() - started, firstMs: first - started })
      })
    })
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
}

const direct = () => post(`${providerUrl}/v1/chat/completions`, { model: 'bench', stream: true, messages: [{ role: 'user', content: 'go' }] }, { accept: 'text/event-stream' })
const viaHost = () => {
  const session = randomUUID()
  return post(`${hostUrl}/v1/assist`, {
    request_id: randomUUID(),
    context: { session_id: session, agent_id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a06', user: { user_id: 'bench', tier: 'free', locale: 'en' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
    payload: { session_id: session, payload: { query: 'go' } }
  }, { accept: 'text/event-stream' })
}

await direct()
await viaHost()
const d = []
const h = []
for (let r = 0; r < rounds; r++) {
  d.push(await direct())
  h.push(await viaHost())
}
const perToken = (runs) => mean(runs.map((x) => x.ms)) / tokens * 1000
const result = {
  tokens,
  rounds,
  direct_us_per_token: perToken(d),
  host_us_per_token: perToken(h),
  ratio_host_over_direct: perToken(h) / perToken(d),
  added_us_per_token: perToken(h) - perToken(d),
  direct_first_byte_ms: mean(d.map((x) => x.firstMs)),
  host_first_byte_ms: mean(h.map((x) => x.firstMs))
}
console.table({
  direct: { 'µs/token': result.direct_us_per_token.toFixed(1), 'first byte ms': result.direct_first_byte_ms.toFixed(1) },
  'via host': { 'µs/token': result.host_us_per_token.toFixed(1), 'first byte ms': result.host_first_byte_ms.toFixed(1) }
})
console.log(`host / direct per token: ${result.ratio_host_over_direct.toFixed(2)}×  (+${result.added_us_per_token.toFixed(1)} µs per token)`)
saveResult('backend-stream', result)
await app.close()
provider.close()
data.remove()
