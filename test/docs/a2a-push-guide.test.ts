import t from 'tap'
import { spawn } from 'node:child_process'
import { connect } from 'node:net'
import { randomUUID } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { Role, type SendMessageRequest, type Task } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { harnessFreeEnv } from '../child-env.js'
import { docBlocks } from './doc-blocks.js'
import { listen } from '../helper.js'
import { freePort } from '../socket.js'

// The "Push notifications" receiver of docs/a2a.md, run as written (only its port changes), against what
// the host sends: it takes the updates signed with its token, and refuses those signed with another.

const GATED = 'f0000000-0000-4000-8000-0000000000a2'

function receiverCode (): string {
  const [code] = docBlocks('docs/a2a.md', '### Push notifications', 'js')
  if (code === undefined) throw new Error('no js block in "Push notifications" of docs/a2a.md')
  return code
}

async function eventually (what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!await check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

t.test('the guide\'s receiver takes the updates the host signs with its token, and refuses those another token signed', async (t) => {
  const code = receiverCode()
  t.match(code, /\.listen\(8080\)/, 'it listens on 8080')
  const port = await freePort()
  const child = spawn(process.execPath, ['--input-type=module', '-e', code.replace('.listen(8080)', `.listen(${port})`)], { env: { ...harnessFreeEnv(), PUSH_TOKEN: 'readme-token' }, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill() })
  let printed = ''
  child.stdout.on('data', (chunk: Buffer) => { printed += chunk.toString() })
  await eventually('the receiver listening', async () => await new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1', () => { socket.end(); resolve(true) }).on('error', () => { resolve(false) })
  }))

  const { app, url } = await listen(t, { AGENTS_DIR: fileURLToPath(new URL('../fixtures/a2a-push/', import.meta.url)), WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0', A2A_PUSH_ALLOW_PRIVATE: 'true', A2A_PUSH_POLL_MS: '20', A2A_PUSH_RETRY_BASE_MS: '50' })
  const a2a = await new ClientFactory().createFromUrl(`${url}/a2a/${GATED}/.well-known/agent-card.json`, '')
  const ask = (token: string, id: string): SendMessageRequest => ({
    tenant: '',
    message: { messageId: randomUUID(), contextId: '', taskId: '', role: Role.ROLE_USER, parts: [{ content: { $case: 'data', value: { words: ['signed ', 'updates '] } }, metadata: undefined, filename: '', mediaType: '' }], metadata: undefined, extensions: [], referenceTaskIds: [] },
    configuration: { acceptedOutputModes: [], taskPushNotificationConfig: { tenant: '', id, taskId: '', url: `http://localhost:${port}/hook`, token, authentication: undefined }, returnImmediately: false },
    metadata: undefined
  })
  const deliveries = async (): Promise<Array<{ config_id: string, state: string, delivered: number, last_status: number | null }>> => (await app.inject({ url: '/v1/a2a/push-deliveries' })).json().deliveries

  const task = await a2a.sendMessage(ask('readme-token', 'readme')) as Task
  await eventually('every update taken', async () => (await deliveries()).some((d) => d.config_id === 'readme' && d.state === 'done'))
  const done = (await deliveries()).find((d) => d.config_id === 'readme')
  t.equal(done?.last_status, 204, 'the receiver answered 204')
  const lines = printed.split('\n').filter((line) => line.startsWith('readme/'))
  t.same(lines.map((line) => line.split(' ')[0]), Array.from({ length: done?.delivered ?? 0 }, (_, i) => `readme/${i + 1}`), 'it printed each update\'s delivery id, in order')
  t.match(printed, new RegExp(`task: \\{\\s*id: '${task.id}'`), 'the first is the task')

  await a2a.sendMessage(ask('another-token', 'forged'))
  await eventually('a refused attempt', async () => (await deliveries()).some((d) => d.config_id === 'forged' && d.last_status === 401))
  t.notOk(printed.includes('forged/'), 'an update signed with another token is refused, unread')
})
