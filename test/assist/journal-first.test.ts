import t from 'tap'
import { spawn } from 'node:child_process'
import { request } from 'node:http'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import Database from 'better-sqlite3'
import { envelope, FIXTURE_AGENTS_DIR, tempDataDir, TEST_ENV } from '../helper.js'
import { parseSse } from '../sse.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

t.test('a packet reaches the client only once it is in the journal (another process reads it there)', async (t) => {
  const dataDir = tempDataDir(t)
  const child = spawn(process.execPath, [...process.execArgv, 'src/server.ts'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...TEST_ENV, DATA_DIR: dataDir, AGENTS_DIR: FIXTURE_AGENTS_DIR },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(() => { child.kill('SIGKILL') })
  let stdout = ''
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
  const deadline = Date.now() + 20_000
  while (!/listening at http:\/\/127\.0\.0\.1:\d+/.test(stdout) && Date.now() < deadline) await sleep(20)
  const port = /listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(stdout)?.[1] ?? ''
  const db = new Database(join(dataDir, 'agent-host.db'), { readonly: true, fileMustExist: true })
  t.teardown(() => db.close())
  // a journal row holds a flush's frames, one a line, each starting with its stream id and seq
  const journaled = db.prepare('SELECT 1 FROM journal WHERE run_id = (SELECT run_id FROM runs WHERE request_id = ?) AND instr(char(10) || frames, ?) > 0')

  // the agent writes, then holds its event loop: a packet sent before the journal commit would arrive first
  const script = [{ op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'one' }, { op: 'block', ms: 400 }, { op: 'write', name: 's', chunk: 'two' }, { op: 'block', ms: 200 }]
  const body = envelope(SCRIPTED, { script })
  const missing: string[] = []
  let text = ''
  await new Promise<void>((resolve, reject) => {
    const req = request(`http://127.0.0.1:${port}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        text += chunk
        for (const line of chunk.split('\n').filter((l) => l.startsWith('data: '))) {
          const packet = JSON.parse(line.slice(6)) as { stream_id: string, seq: number }
          if (journaled.get(body.request_id, `\n{"stream_id":"${packet.stream_id}","seq":${packet.seq},`) === undefined) missing.push(`${packet.stream_id}:${packet.seq}`)
        }
      })
      res.on('end', resolve)
    })
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
  const packets = parseSse(text).packets
  t.equal(packets.filter((p) => p.op === 'DELTA').length, 2)
  t.same(missing, [], 'every packet was journaled before the client had it')
})
