// The front-end projections of a run against the CAP stream they project: one stream of `--packets`
// words of the echo-stream agent (no delay) through POST /v1/assist (SSE), the AI SDK's UI message
// stream (POST /ai-sdk/echo-stream/chat) and AG-UI (POST /ag-ui/echo-stream), all from one server
// process, this one the client; interleaved rounds (each round starts with the next target), medians.
// Measures words a second (CAP DELTA packets, AI SDK `text-delta` chunks, AG-UI `TEXT_MESSAGE_CONTENT`
// events: one a word in each) and the time to the first `data:` line. Budget (issue 34): each
// projection ≥ 0.8× the CAP stream's words a second.
//   npm run build && node bench/projections.js [--packets=5000] [--rounds=7] [--smoke]
import { randomUUID } from 'node:crypto'
import { request } from 'node:http'
import { arg, saveResult, smoke, startServer } from './common.js'

const packets = arg('packets', 5000, 50)
const rounds = arg('rounds', 7, 1)
const ECHO_STREAM = '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02'
const words = 'w '.repeat(packets)
const user = { user_id: 'bench', tier: 'free', locale: 'en-GB' }

/** Each target: its path, its body (a new chat, thread and request each time) and how to count its words. */
const targets = {
  cap: {
    path: '/v1/assist',
    body: () => {
      const session = randomUUID()
      return { request_id: randomUUID(), context: { session_id: session, agent_id: ECHO_STREAM, user, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() }, payload: { session_id: session, payload: { query: words, delay_ms: 0 } } }
    },
    unit: /"op":"DELTA"/g
  },
  'ai-sdk': {
    path: '/ai-sdk/echo-stream/chat',
    // what DefaultChatTransport sends: the chat's id, its messages, the trigger, and the body's fields
    body: () => ({ id: randomUUID(), messages: [{ id: randomUUID(), role: 'user', parts: [{ type: 'text', text: words }] }], trigger: 'submit-message', messageId: undefined, delay_ms: 0 }),
    unit: /"type":"text-delta"/g
  },
  'ag-ui': {
    path: '/ag-ui/echo-stream',
    body: () => ({ threadId: randomUUID(), runId: randomUUID(), messages: [{ id: randomUUID(), role: 'user', content: words }], state: {}, tools: [], context: [], forwardedProps: { delay_ms: 0 } }),
    unit: /"type":"TEXT_MESSAGE_CONTENT"/g
  }
}

/** POST one stream and read all of it: its words a second and the ms to its first `data:` line. */
function one (url, target) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    let first
    let text = ''
    const req = request(`${url}${target.path}`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (c) => {
        text += c
        if (first === undefined && text.includes('data:')) first = performance.now() - started
      })
      res.on('end', () => {
        const seconds = (performance.now() - started) / 1000
        const got = (text.match(target.unit) ?? []).length
        if (res.statusCode !== 200 || got !== packets) reject(new Error(`${target.path}: status ${res.statusCode}, ${got} of ${packets} words: ${text.slice(0, 300)}`))
        else resolve({ wordsPerSecond: packets / seconds, firstMs: first })
      })
    })
    req.on('error', reject)
    req.end(JSON.stringify(target.body()))
  })
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }

const host = await startServer('./assist-server.js', ['--target=assist', ...(smoke ? ['--smoke'] : [])])
try {
  const names = Object.keys(targets)
  const results = Object.fromEntries(names.map((name) => [name, []]))
  // one of each first, off the clock: the code of each path compiled
  for (const name of names) await one(host.url, targets[name])
  for (let round = 0; round < rounds; round++) {
    for (const name of [...names.slice(round % names.length), ...names.slice(0, round % names.length)]) results[name].push(await one(host.url, targets[name]))
  }
  const summary = Object.fromEntries(names.map((name) => [name, { wordsPerSecond: median(results[name].map((r) => r.wordsPerSecond)), firstMs: median(results[name].map((r) => r.firstMs)) }]))
  const ratios = {
    'words/s ai-sdk / cap': summary['ai-sdk'].wordsPerSecond / summary.cap.wordsPerSecond,
    'words/s ag-ui / cap': summary['ag-ui'].wordsPerSecond / summary.cap.wordsPerSecond,
    'first data ai-sdk / cap': summary['ai-sdk'].firstMs / summary.cap.firstMs,
    'first data ag-ui / cap': summary['ag-ui'].firstMs / summary.cap.firstMs
  }
  console.log(`\none stream of ${packets} words each, medians of ${rounds} rounds`)
  console.log('target     words/s   first data ms')
  for (const [name, s] of Object.entries(summary)) console.log(`${name.padEnd(8)} ${s.wordsPerSecond.toFixed(0).padStart(9)} ${s.firstMs.toFixed(1).padStart(15)}`)
  console.log('')
  for (const [name, value] of Object.entries(ratios)) console.log(`${name.padEnd(26)} ${value.toFixed(3)}`)
  saveResult('projections', { settings: { packets, rounds }, rounds: results, median: summary, ratios })
} finally {
  await host.stop()
}
