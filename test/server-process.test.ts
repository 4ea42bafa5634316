import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { request } from 'node:http'
import { AGENTS, envelope, tempDataDir, TEST_ENV } from './helper.js'
import { until } from './socket.js'
import { parseSse } from './sse.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))

t.test('SIGTERM: the open stream gets the shutdown packets and the process exits 0 within CLOSE_GRACE_MS', async (t) => {
  const child = spawn(process.execPath, [...process.execArgv, 'src/server.ts'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...TEST_ENV, DATA_DIR: tempDataDir(t), CLOSE_GRACE_MS: '4000' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  t.teardown(() => { child.kill('SIGKILL') })
  let stdout = ''
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listen line within 60 s: ${stdout}`)), 60_000)
    child.stdout.on('data', () => {
      const m = /listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(stdout)
      if (m !== null) { clearTimeout(timer); resolve(Number(m[1])) }
    })
  })
  const body = JSON.stringify(envelope(AGENTS.echoStream, { query: 'one two three four five six seven eight nine ten', delay_ms: 300 }))
  const { text, ended } = await new Promise<{ text: () => string, ended: Promise<unknown> }>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/v1/assist', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString() })
      resolve({ text: () => text, ended: once(res, 'end') })
    })
    req.on('error', reject)
    req.end(body)
  })
  await until('a delta', () => text().includes('"DELTA"'), 30_000, 5).catch((err: Error) => { throw new Error(`${err.message}; the response so far: ${text()}`) })
  const sent = Date.now()
  child.kill('SIGTERM')
  await ended
  const [code] = await once(child, 'exit') as [number | null]
  const took = Date.now() - sent
  // close-with-grace exits 1 (after "killed by timeout") when the close outlasts CLOSE_GRACE_MS, so
  // a 0 is a close within it; the time to exit after that (the coverage a test child writes as it
  // ends) is the machine's, and a CPU hog beside the suite once made it 4.1 s
  t.equal(code, 0, `a clean exit, within CLOSE_GRACE_MS (${took} ms after SIGTERM)`)
  t.notMatch(stdout, /killed by timeout/)
  const { packets } = parseSse(text())
  t.same(packets.slice(-3).map((p) => [p.op, p.p]), [
    ['ERROR', { code: 'shutting_down', message: 'The server is shutting down; retry the request', severity: 'TRANSIENT' }],
    ['CLOSE', 'shutdown'],
    ['CLOSE', 'shutdown']
  ])
  t.match(stdout, /shutting down/)
})
