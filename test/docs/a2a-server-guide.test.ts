import t from 'tap'
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { harnessFreeEnv } from '../child-env.js'
import { startServer } from '../server-child.js'
import { tempDataDir } from '../helper.js'
import { docBlocks } from './doc-blocks.js'
import { freePort } from '../socket.js'

// The "A2A server" section of docs/a2a.md, run as written (only the port changes): curl on both bindings,
// then the official SDK client from a node one-liner in the repository, and the "Push notifications"
// registration on the task it made (the reader's hook replaced by a port of this machine).

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

t.test('the A2A server section of docs/a2a.md works as written: the card, SendMessage over JSON-RPC, a stream over HTTP+JSON, the SDK client', { timeout: 120_000 }, async (t) => {
  // a push hook on this machine is allowed (A2A_PUSH_ALLOW_PRIVATE): the guide's own hook is outside it
  const server = await startServer(t, { DATA_DIR: tempDataDir(t), WORKERS_PER_TYPE: '0', A2A_PUSH_ALLOW_PRIVATE: 'true' })
  const [curls, client] = docBlocks('docs/a2a.md', '### A2A server')
  t.ok(curls !== undefined && client !== undefined, 'two shell blocks')
  const run = async (script: string): Promise<string> => await new Promise((resolve, reject) => {
    execFile('bash', ['-euo', 'pipefail', '-c', script.replaceAll('http://127.0.0.1:3000', server.url)], { cwd: ROOT, env: harnessFreeEnv(), timeout: 60_000 }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`${error.message}\n${stderr}`))
      else resolve(stdout)
    })
  })
  const first = await run(curls as string)
  t.match(first, /"name":"echo".*"protocolBinding":"JSONRPC"/, 'the card')
  t.match(first, /"state":"TASK_STATE_COMPLETED".*"data":\{"echo":"hello over A2A","calls":1\}/, 'SendMessage: the completed task and its result')
  t.match(first, /data: \{"task":.*data: \{"artifactUpdate":.*"text":"one ".*"TASK_STATE_COMPLETED"/s, 'the HTTP+JSON stream: the task, chunks, the final status')
  const second = await run(client as string)
  t.same(second.trim().split('\n').filter((line) => !line.startsWith('statusUpdate TASK_STATE_WORKING')), [
    'task TASK_STATE_WORKING',
    'chunk: streamed ',
    'chunk: word ',
    'chunk: by ',
    'chunk: word ',
    'statusUpdate TASK_STATE_COMPLETED'
  ], 'the SDK client\'s stream, word by word')

  // "Push notifications": the reader registers their hook on the task SendMessage made
  const taskId = /"task":\{"id":"([^"]+)"/.exec(first)?.[1]
  t.ok(taskId, 'SendMessage answered a task id')
  const [register] = docBlocks('docs/a2a.md', '### Push notifications')
  t.match(register, 'https://hooks.example.com/a2a', 'the guide registers a hook of its reader\'s')
  // the reader's hook, here a port of this machine nothing listens on: the test reaches no other machine
  const hook = `http://127.0.0.1:${await freePort()}/a2a`
  const registered = JSON.parse(await run(`TASK_ID=${taskId ?? ''}\n${(register as string).replace('https://hooks.example.com/a2a', hook)}`)) as Record<string, unknown>
  t.match(registered, { taskId, url: hook, token: 'a-long-random-secret', id: String }, 'the config, with the id the server made')
})
