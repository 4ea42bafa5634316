import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { randomUUID } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { StreamResponse, TaskState, type Message, type Task, type TaskPushNotificationConfig } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import type { FastifyInstance } from 'fastify'
import { checkPushHost, guardedLookup, nonPublicRange } from '../../src/a2a/push-address.js'
import { signPush, verifyPushSignature } from '../../src/a2a/push-signature.js'
import { AgentA2AHandler, A2A_CALL } from '../../src/a2a/request-handler.js'
import { ServerCallContext } from '@a2a-js/sdk/server'
import { buildApp } from '../../src/app.js'
import { build, listen, tempDataDir, testConfig, type Teardown } from '../helper.js'
import { holdDbLock } from '../lock-holder.js'
import { openGate } from '../fixtures/a2a-push/gated/index.js'
import { a2aClient, ADMIN, ALICE, BINDINGS, BOB, data, KEYS, merge, message as dataMessage, type Binding } from './client.js'

const AGENTS_DIR = fileURLToPath(new URL('../fixtures/a2a-push/', import.meta.url))
const GATED = 'f0000000-0000-4000-8000-0000000000a2'
/** Test settings: the fixture agent, local receivers allowed, quick polls and retries, no load shedding (a loaded machine must not fail a test). */
const FAST = { AGENTS_DIR, WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0', A2A_PUSH_ALLOW_PRIVATE: 'true', A2A_PUSH_POLL_MS: '20', A2A_PUSH_RETRY_BASE_MS: '50' }

/** An official A2A SDK client for the fixture agent of the server at `url`, over `binding`, sending `key` as a bearer token. */
async function client (url: string, binding: Binding, key?: string): Promise<Client> {
  return await a2aClient(url, GATED, binding, key)
}

const message = (payload: Record<string, unknown>): Message => dataMessage([data(payload)])
const pushConfig = (url: string, extra: Partial<TaskPushNotificationConfig> = {}): TaskPushNotificationConfig => ({ tenant: '', id: '', taskId: '', url, token: '', authentication: undefined, ...extra })
const send = (m: Message, options: { push?: TaskPushNotificationConfig, returnImmediately?: boolean } = {}) =>
  ({ tenant: '', message: m, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: options.push, returnImmediately: options.returnImmediately ?? false }, metadata: undefined })

/** What a receiver does with a request: answer with a status, never answer, or answer once the promise gives the status. */
type Answer = number | 'hang' | Promise<number>
interface Received { id: string, path: string, answer: Answer, headers: IncomingHttpHeaders, body: string }

/** A local HTTP receiver of push notifications. */
interface Receiver {
  url: string
  /** Every request, in arrival order. */
  all: Received[]
  /** The updates it took (answered 2xx), in order, as A2A events. */
  taken: () => StreamResponse[]
  /** How it answers the `n`th request (1-based). */
  answer: (n: number) => Answer
  /** Stop listening and drop every connection: a delivery now finds its connection refused. */
  close: () => Promise<void>
  /** Listen again, on the same port. */
  open: () => Promise<void>
}

async function receiver (t: Teardown, answer: (n: number) => Answer = () => 200): Promise<Receiver> {
  const all: Received[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const got: Received = { id: String(req.headers['x-agent-host-delivery-id']), path: String(req.url), answer: rx.answer(all.length + 1), headers: req.headers, body: Buffer.concat(chunks).toString('utf8') }
      all.push(got)
      if (got.answer instanceof Promise) {
        got.answer.then((status) => { got.answer = status; res.writeHead(status).end() }, () => {})
      } else if (got.answer !== 'hang') res.writeHead(got.answer).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const rx: Receiver = {
    url: `http://127.0.0.1:${port}`,
    all,
    taken: () => all.filter((r) => typeof r.answer === 'number' && r.answer < 300).map((r) => StreamResponse.fromJSON(JSON.parse(r.body))),
    answer,
    close: async () => {
      if (!server.listening) return
      const closed = new Promise((resolve) => server.close(resolve))
      server.closeAllConnections()
      await closed
    },
    open: async () => { await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve)) }
  }
  t.teardown(rx.close)
  return rx
}

/** Poll `check` until it holds; throw after `ms`. */
async function eventually (what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!await check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(10)
  }
}

interface DeliveryState { config_id: string, task_id: string, url: string, state: string, delivered: number, pending: number, attempts: number, last_status: number | null, last_error: string | null, next_attempt_at: string | null }

async function deliveries (app: FastifyInstance, key?: string, query = ''): Promise<DeliveryState[]> {
  const res = await app.inject({ url: `/v1/a2a/push-deliveries${query}`, headers: key === undefined ? {} : { authorization: `Bearer ${key}` } })
  if (res.statusCode !== 200) throw new Error(`${res.statusCode}: ${res.body}`)
  return res.json().deliveries
}

/** Wait until the task's one config is `done` (its receiver may have the final status before the delivery is stored). */
async function untilDone (app: FastifyInstance, taskId: string): Promise<void> {
  await eventually('the config done', async () => (await stateOf(app, taskId))?.state === 'done')
}

/** The state of a task's one config. */
async function stateOf (app: FastifyInstance, taskId: string): Promise<DeliveryState> {
  return (await deliveries(app, undefined, `?task_id=${taskId}`))[0] as DeliveryState
}

const finalState = (events: StreamResponse[]): TaskState | undefined => {
  const last = events.at(-1)?.payload
  return last?.$case === 'statusUpdate' ? last.value.status?.state : undefined
}
const textOf = (task: Task, name: string): string => (task.artifacts.find((a) => a.name === name)?.parts ?? []).map((p) => p.content?.$case === 'text' ? p.content.value : '').join('')

/** Every request `rx` got is an A2A push: its media type, its token, a signature its token verifies, the authentication asked for. */
function checkSigned (t: Test, rx: Receiver, token: string, authorization?: string): void {
  t.ok(rx.all.length > 0, `${rx.all.length} requests`)
  t.same(rx.all.filter((r) => r.headers['content-type'] !== 'application/a2a+json').map((r) => r.id), [], 'each one application/a2a+json')
  t.same(rx.all.filter((r) => r.headers['x-a2a-notification-token'] !== token).map((r) => r.id), [], 'each with the config\'s token')
  t.same(rx.all.filter((r) => !verifyPushSignature({ header: r.headers['x-agent-host-signature'] as string, body: r.body, token })).map((r) => r.id), [], 'each signed with the token')
  t.same(rx.all.filter((r) => r.headers.authorization !== authorization).map((r) => r.id), [], `each with authorization ${String(authorization)}`)
}

for (const binding of BINDINGS) {
  t.test(`${binding}: a config given in SendMessage gets every update of the task, in order, signed, with its token and authentication: the events a streaming client gets`, async (t) => {
    const rx = await receiver(t)
    const { app, url } = await listen(t, FAST)
    const a2a = await client(url, binding)
    const config = pushConfig(`${rx.url}/hook?from=agent-host`, { token: 'token-one', authentication: { scheme: 'Bearer', credentials: 'receiver-secret' } })
    const asked = send(message({ before: ['intro'], words: ['one ', 'two ', 'three '] }), { push: config })
    const streamed: StreamResponse[] = []
    for await (const event of a2a.sendMessageStream(asked)) streamed.push(event)
    const task = streamed[0]?.payload?.$case === 'task' ? streamed[0].payload.value : undefined
    if (task === undefined) throw new Error('no task')
    await eventually('the final status pushed', () => finalState(rx.taken()) === TaskState.TASK_STATE_COMPLETED)

    t.same(rx.taken(), streamed, 'the pushed updates are the streamed events, in order: the task first, the final status last')
    const [stored] = (await a2a.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).configs
    t.match(stored, { taskId: task.id, url: config.url, token: 'token-one', authentication: { scheme: 'Bearer', credentials: 'receiver-secret' } }, 'the config is the task\'s')
    t.same(rx.all.map((r) => r.id), streamed.map((_, i) => `${String(stored?.id)}/${i + 1}`), 'each update named by its config and number')
    checkSigned(t, rx, 'token-one', 'Bearer receiver-secret')
    await untilDone(app, task.id)
    t.match(await stateOf(app, task.id), { config_id: stored?.id, state: 'done', delivered: streamed.length, pending: 0, attempts: 0, last_status: 200, last_error: null, next_attempt_at: null })

    const pushed = rx.all.length
    const again: StreamResponse[] = []
    for await (const event of a2a.sendMessageStream(asked)) again.push(event)
    t.equal(again[0]?.payload?.$case === 'task' && again[0].payload.value.id, task.id, 'the same message sent again is the same task')
    t.equal((await a2a.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).configs.length, 1, 'with the same config')
    t.equal(rx.all.length, pushed, 'whose updates are not pushed again')
    t.equal((await stateOf(app, task.id)).state, 'done', 'it stays done')
  })

  t.test(`${binding}: a config made later on a running task gets the task as it stands, then every update after it`, async (t) => {
    const rx = await receiver(t)
    const { app, url } = await listen(t, FAST)
    const a2a = await client(url, binding)
    const gate = randomUUID()
    const running = await a2a.sendMessage(send(message({ before: ['made before the config'], words: ['after ', 'the ', 'config '], gate }), { returnImmediately: true })) as Task
    await eventually('the first packet journaled', async () => (await a2a.getTask({ tenant: '', id: running.id, historyLength: undefined })).artifacts.length > 0)

    const created = await a2a.createTaskPushNotificationConfig(pushConfig(`${rx.url}/later`, { taskId: running.id }))
    t.match(created.id, /^[0-9a-f-]{36}$/, 'the server made its id')
    t.match(created.token, /^[A-Za-z0-9_-]{43}$/, 'and a token, so every update is signed')
    t.equal(created.taskId, running.id)
    await eventually('the task as it stands pushed', () => rx.taken().length === 1)
    openGate(gate)
    await eventually('the final status pushed', () => finalState(rx.taken()) === TaskState.TASK_STATE_COMPLETED)

    const pushed = rx.taken()
    const first = pushed[0]?.payload
    t.equal(first?.$case, 'task', 'the first update is the task')
    t.equal(first?.$case === 'task' && textOf(first.value, 'response'), 'made before the config', 'as it stood: with what it made before')
    t.notOk(first?.$case === 'task' && first.value.artifacts.some((a) => a.name === 'words'), 'and nothing after')
    t.ok(pushed.slice(1).every((e) => e.payload?.$case !== 'task'), 'then updates only')
    const done = await a2a.getTask({ tenant: '', id: running.id, historyLength: undefined })
    t.same(merge(pushed), done, 'merged as a client merges them, they are the task GetTask answers')
    checkSigned(t, rx, created.token)
    await untilDone(app, running.id)
  })
}

t.test('a receiver that fails (a 500, then no answer in time, then a refused connection) gets the update again later, and then the rest up to the final status', async (t) => {
  const rx = await receiver(t, (n) => n === 1 ? 500 : 'hang')
  const { app, url } = await listen(t, { ...FAST, A2A_PUSH_TIMEOUT_MS: '300', A2A_PUSH_MAX_ATTEMPTS: '100' })
  const a2a = await client(url, 'JSONRPC')
  const task = await a2a.sendMessage(send(message({ words: ['a ', 'b '] }), { push: pushConfig(`${rx.url}/flaky`, { id: 'flaky', token: 'flaky-token' }) })) as Task
  t.equal(task.status?.state, TaskState.TASK_STATE_COMPLETED, 'the task does not wait for its receiver')

  await eventually('an attempt that got no answer in time', async () => /no answer within 300 ms/.test((await stateOf(app, task.id)).last_error ?? ''))
  t.match(rx.all.slice(0, 2), [{ id: 'flaky/1', answer: 500 }, { id: 'flaky/1', answer: 'hang' }], 'the first update, answered 500, then not at all')
  const waiting = await stateOf(app, task.id)
  t.match(waiting, { state: 'active', delivered: 0 }, 'the first update still pending')
  t.ok(waiting.attempts >= 2, `${waiting.attempts} failed attempts of it`)
  t.ok(waiting.pending > 1, `${waiting.pending} updates waiting`)
  t.ok(waiting.next_attempt_at !== null && !Number.isNaN(Date.parse(waiting.next_attempt_at)), 'with its next attempt')

  await rx.close()
  await eventually('an attempt whose connection was refused', async () => /ECONNREFUSED/.test((await stateOf(app, task.id)).last_error ?? ''))
  const refused = await stateOf(app, task.id)
  t.match(refused, { state: 'active', delivered: 0, last_status: null }, 'still the first update, no status')
  t.ok(refused.attempts >= 3, `${refused.attempts} failed attempts`)

  rx.answer = () => 204
  await rx.open()
  await eventually('the final status pushed', () => finalState(rx.taken()) === TaskState.TASK_STATE_COMPLETED)
  const taken = rx.all.filter((r) => r.answer === 204)
  t.same(taken.map((r) => r.id), taken.map((_, i) => `flaky/${i + 1}`), 'every update taken once, in order, none missed')
  t.same(merge(rx.taken()), await a2a.getTask({ tenant: '', id: task.id, historyLength: undefined }), 'the task as GetTask answers it')
  checkSigned(t, rx, 'flaky-token')
  await untilDone(app, task.id)
  t.match(await stateOf(app, task.id), { state: 'done', attempts: 0, last_status: 204, last_error: null, pending: 0 })
})

t.test('an update that fails A2A_PUSH_MAX_ATTEMPTS times marks its config failed; saving the config again tries again', async (t) => {
  const rx = await receiver(t, () => 503)
  const { app, url } = await listen(t, { ...FAST, A2A_PUSH_MAX_ATTEMPTS: '2' })
  const a2a = await client(url, 'HTTP+JSON')
  const task = await a2a.sendMessage(send(message({ words: ['x'] }))) as Task
  const config = await a2a.createTaskPushNotificationConfig(pushConfig(`${rx.url}/down`, { id: 'down', taskId: task.id }))
  await eventually('the config given up', async () => (await stateOf(app, task.id)).state === 'failed')
  t.match(await stateOf(app, task.id), { state: 'failed', attempts: 2, last_status: 503, last_error: 'HTTP 503', delivered: 0, pending: 1, next_attempt_at: null })
  t.equal(rx.all.length, 2, 'two attempts, then nothing more')
  t.same((await deliveries(app, undefined, '?state=failed')).map((d) => d.config_id), ['down'], 'listed as failed')

  rx.answer = () => 200
  const again = await a2a.createTaskPushNotificationConfig({ ...config, token: '' })
  t.equal(again.token, config.token, 'a config saved again without a token keeps the one made before')
  await eventually('the config done', async () => (await stateOf(app, task.id)).state === 'done')
  t.equal(rx.taken().length, 1, 'an ended task\'s config gets one update: the task as it ended')
  const only = rx.taken()[0]?.payload
  t.equal(only?.$case === 'task' && only.value.status?.state, TaskState.TASK_STATE_COMPLETED)
})

t.test('delivery resumes after a restart on the same DATA_DIR: the update in flight at the close is sent again, nothing is lost, in order', async (t) => {
  const dataDir = tempDataDir(t)
  const rx = await receiver(t, (n) => n <= 3 ? 200 : 'hang')
  const first = await listen(t, { ...FAST, DATA_DIR: dataDir, A2A_PUSH_MAX_ATTEMPTS: '100' })
  const a2a = await client(first.url, 'JSONRPC')
  const task = await a2a.sendMessage(send(message({ words: ['1 ', '2 ', '3 ', '4 ', '5 '] }), { push: pushConfig(`${rx.url}/restart`, { id: 'restart', token: 'restart-token' }) })) as Task
  await eventually('three updates taken and the fourth in flight', () => rx.all.length === 4)
  await first.app.close()
  t.match(rx.all[3], { id: 'restart/4', answer: 'hang' }, 'the fourth was in flight when the process closed')
  const before = rx.all.length

  rx.answer = () => 200
  const second = await build(t, { ...FAST, DATA_DIR: dataDir })
  await second.ready()
  await eventually('the final status pushed by the new process', () => finalState(rx.taken()) === TaskState.TASK_STATE_COMPLETED)
  t.ok(rx.all.length > before, 'the new process pushed the rest')
  const taken = rx.all.filter((r) => r.answer === 200)
  t.same(taken.map((r) => r.id), taken.map((_, i) => `restart/${i + 1}`), 'every update taken once, in order')
  t.equal(rx.all[4]?.id, 'restart/4', 'the new process began with the update in flight: at least once')
  const got = (await second.inject({ method: 'POST', url: `/a2a/${GATED}`, headers: { 'a2a-version': '1.0' }, payload: { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: task.id } } })).json()
  t.same(merge(rx.taken()), StreamResponse.fromJSON({ task: got.result }).payload?.value, 'the task as it ended')
  t.equal(textOf(merge(rx.taken()), 'words'), '1 2 3 4 5 ')
  checkSigned(t, rx, 'restart-token')
})

for (const binding of BINDINGS) {
  t.test(`${binding}, auth on: get, list and delete a task's configs; another key sees none of them (task not found), an admin sees all; the delivery state is the caller's`, async (t) => {
    const rx = await receiver(t)
    const { app, url } = await listen(t, { ...FAST, AUTH_MODE: 'apikey', API_KEYS: KEYS })
    const alice = await client(url, binding, ALICE)
    const bob = await client(url, binding, BOB)
    const admin = await client(url, binding, ADMIN)
    const gate = randomUUID()
    const task = await alice.sendMessage(send(message({ words: ['w'], gate }), { returnImmediately: true })) as Task
    const mine = await alice.createTaskPushNotificationConfig(pushConfig(`${rx.url}/mine`, { id: 'mine', taskId: task.id, token: 'mine-token' }))
    const other = await alice.createTaskPushNotificationConfig(pushConfig(`${rx.url}/other`, { taskId: task.id }))
    t.same(mine, { tenant: '', id: 'mine', taskId: task.id, url: `${rx.url}/mine`, token: 'mine-token', authentication: undefined })

    t.same(await alice.getTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'mine' }), mine, 'get')
    t.same((await alice.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).configs, [mine, other], 'list, oldest first')
    await t.rejects(alice.getTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'nope' }), { name: /TaskNotFoundError/ }, 'an unknown config')

    await t.rejects(bob.getTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'mine' }), { name: /TaskNotFoundError/ }, 'another key: get')
    await t.rejects(bob.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' }), { name: /TaskNotFoundError/ }, 'list')
    await t.rejects(bob.createTaskPushNotificationConfig(pushConfig(`${rx.url}/bob`, { taskId: task.id })), { name: /TaskNotFoundError/ }, 'create')
    await t.rejects(bob.deleteTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'mine' }), { name: /TaskNotFoundError/ }, 'delete')
    const bobs = await bob.sendMessage(send(message({ words: [] }), { push: pushConfig(`${rx.url}/bob`, { id: 'bobs' }) })) as Task
    t.same((await admin.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).configs.map((c) => c.id), ['mine', other.id], 'an admin sees anyone\'s')

    t.same((await deliveries(app, ALICE)).map((d) => d.config_id).sort(), ['mine', other.id].sort(), 'alice\'s delivery state: her tasks\' configs')
    t.same((await deliveries(app, BOB)).map((d) => d.config_id), ['bobs'], 'bob\'s: his')
    t.same((await deliveries(app, ADMIN)).map((d) => d.config_id).sort(), ['bobs', 'mine', other.id].sort(), 'an admin\'s: all')
    t.same((await deliveries(app, BOB, `?task_id=${task.id}`)), [], 'another\'s task: nothing')
    t.same((await deliveries(app, ALICE, '?limit=1')).length, 1, 'a page')
    t.equal((await app.inject({ url: '/v1/a2a/push-deliveries' })).statusCode, 401, 'no key: 401')
    t.ok(bobs.id)

    await alice.deleteTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'mine' })
    await alice.deleteTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'mine' })
    t.pass('a delete of a config already gone succeeds')
    await t.rejects(alice.getTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'mine' }), { name: /TaskNotFoundError/ }, 'deleted')
    t.same((await alice.listTaskPushNotificationConfig({ tenant: '', taskId: task.id, pageSize: 0, pageToken: '' })).configs, [other])
    const before = rx.all.filter((r) => r.headers['x-agent-host-delivery-id']?.toString().startsWith('mine/')).length
    openGate(gate)
    await eventually('the other config done', async () => (await deliveries(app, ALICE)).every((d) => d.state === 'done'))
    t.equal(rx.all.filter((r) => String(r.headers['x-agent-host-delivery-id']).startsWith('mine/')).length, before, 'nothing more pushed to a deleted config')
    const audit = (await app.inject({ url: '/v1/audit?action=a2a.push.delete', headers: { authorization: `Bearer ${ADMIN}` } })).json() as { rows: Array<{ actor: string }> }
    t.equal(audit.rows.length, 1, 'the delete is audited once')
  })
}

t.test('a database another process holds locked holds pushes back, and loses none of them', async (t) => {
  const dataDir = tempDataDir(t)
  const rx = await receiver(t)
  await rx.close()
  const lines: string[] = []
  const app = await buildApp(testConfig(t, { ...FAST, DATA_DIR: dataDir, LOG_LEVEL: 'error', DB_WRITE_BUDGET_MS: '50', A2A_PUSH_TIMEOUT_MS: '300', A2A_PUSH_MAX_ATTEMPTS: '100' }), { logStream: { write: (line) => { lines.push(line) } } })
  t.teardown(async () => { await app.close() })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const holder = await holdDbLock(t, dataDir, true)
  const a2a = await client(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, 'JSONRPC')
  const task = await a2a.sendMessage(send(message({ words: ['a ', 'b '] }), { push: pushConfig(`${rx.url}/busy`, { id: 'busy', token: 'busy-token' }) })) as Task
  await eventually('a refused attempt', async () => (await stateOf(app, task.id)).attempts > 0)
  await holder.lock()
  await eventually('the delivery loop to meet the lock', () => lines.some((line) => /push notifications to send failed; trying again/.test(line) && /AH_ERR_STORAGE_BUSY/.test(line)))
  await rx.open()
  await holder.release()
  await untilDone(app, task.id)
  const taken = rx.all.filter((r) => r.answer === 200)
  t.same(taken.map((r) => r.id), taken.map((_, i) => `busy/${i + 1}`), 'every update taken once, in order')
  t.equal(finalState(rx.taken()), TaskState.TASK_STATE_COMPLETED, 'up to the final status')
  checkSigned(t, rx, 'busy-token')
})

t.test('a config deleted while its update is in flight gets nothing more; the task\'s other configs go on', async (t) => {
  let release = (_status: number): void => {}
  const held = new Promise<number>((resolve) => { release = resolve })
  const rx = await receiver(t, (n) => n === 1 ? held : 200)
  const { app, url } = await listen(t, FAST)
  const a2a = await client(url, 'JSONRPC')
  const gate = randomUUID()
  const task = await a2a.sendMessage(send(message({ words: ['a ', 'b '], gate }), { returnImmediately: true })) as Task
  await a2a.createTaskPushNotificationConfig(pushConfig(`${rx.url}/doomed`, { id: 'doomed', taskId: task.id }))
  await eventually('its first update in flight', () => rx.all.length === 1)
  await a2a.deleteTaskPushNotificationConfig({ tenant: '', taskId: task.id, id: 'doomed' })
  release(200)
  await a2a.createTaskPushNotificationConfig(pushConfig(`${rx.url}/kept`, { id: 'kept', taskId: task.id }))
  openGate(gate)
  await eventually('the other config done', async () => (await deliveries(app)).some((d) => d.config_id === 'kept' && d.state === 'done'))
  t.same(rx.all.filter((r) => r.path === '/doomed').map((r) => r.id), ['doomed/1'], 'the deleted config got only the update in flight')
  t.same((await deliveries(app)).map((d) => d.config_id), ['kept'])
})

t.test('an https URL is pushed over TLS, and the receiver\'s certificate is verified', async (t) => {
  const tls = fileURLToPath(new URL('../fixtures/a2a-push/tls/', import.meta.url))
  const server = createHttpsServer({ key: readFileSync(`${tls}key.pem`), cert: readFileSync(`${tls}cert.pem`) }, (_req, res) => { res.writeHead(200).end() })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const { app, url } = await listen(t, FAST)
  const a2a = await client(url, 'JSONRPC')
  const task = await a2a.sendMessage(send(message({ words: [] }), { push: pushConfig(`https://127.0.0.1:${(server.address() as AddressInfo).port}/tls`) })) as Task
  await eventually('an attempt', async () => (await stateOf(app, task.id)).attempts > 0)
  t.match(await stateOf(app, task.id), { state: 'active', delivered: 0, last_error: /self-signed certificate/ }, 'a certificate no CA vouches for is refused')
})

t.test('no SSRF: a URL that resolves to a loopback, private, link-local or other non-public address is refused, naming the setting; SendMessage with one starts nothing', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR, WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
  const a2a = await client(url, 'JSONRPC')
  const task = await a2a.sendMessage(send(message({ words: [] }))) as Task
  for (const refused of ['http://127.0.0.1:9/', 'http://localhost:9/hook', 'http://10.1.2.3/', 'http://172.16.0.1/', 'http://192.168.1.1/', 'http://100.64.0.1/', 'http://169.254.169.254/latest/meta-data',
    'http://0.0.0.0/', 'http://[::1]/', 'http://[fd00::1]/', 'http://[fe80::1]/', 'http://[::ffff:127.0.0.1]/', 'http://224.0.0.1/', 'https://255.255.255.255/',
    // IPv4-compatible IPv6 (issue 27, fault 10: the URL parser stores [::127.0.0.1] as [::7f00:1], which was taken as public)
    'http://[::127.0.0.1]/', 'http://[::7f00:1]:8080/', 'http://[::a9fe:a9fe]/', 'http://[0:0:0:0:0:0:a00:1]/']) {
    await t.rejects(a2a.createTaskPushNotificationConfig(pushConfig(refused, { taskId: task.id })), { name: /RequestMalformedError/, message: /A2A_PUSH_ALLOW_PRIVATE=true/ }, refused)
  }
  for (const [malformed, why] of [['ftp://example.com/', /absolute http or https URL/], ['/relative/hook', /absolute http or https URL/], ['http://user:secret@example.com/', /must not carry credentials/],
    ['http://nowhere.invalid/', /host nowhere\.invalid does not resolve \(.*ENOTFOUND/], [`http://example.com/${'x'.repeat(2048)}`, /at most 2048/]] as const) {
    await t.rejects(a2a.createTaskPushNotificationConfig(pushConfig(malformed, { taskId: task.id })), { name: /RequestMalformedError/, message: why }, malformed.slice(0, 40))
  }
  for (const [config, why] of [[{ id: 'a/b' }, /id must be/], [{ token: 'two\nlines' }, /token must be/], [{ authentication: { scheme: 'Bearer', credentials: '' } }, /authentication needs/], [{ authentication: { scheme: 'Two words', credentials: 'x' } }, /authentication needs/]] as const) {
    await t.rejects(a2a.createTaskPushNotificationConfig(pushConfig('http://127.0.0.1/', { taskId: task.id, ...config })), { name: /RequestMalformedError/, message: why }, JSON.stringify(config))
  }
  await t.rejects(a2a.createTaskPushNotificationConfig(pushConfig('http://example.com/', { taskId: randomUUID() })), { name: /TaskNotFoundError/ }, 'no such task')

  const tasks = async (): Promise<number> => (await a2a.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 50, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false })).totalSize
  const count = await tasks()
  await t.rejects(a2a.sendMessage(send(message({ words: [] }), { push: pushConfig('http://127.0.0.1:9/') })), { name: /RequestMalformedError/, message: /127\.0\.0\.1 \(loopback\)/ })
  const streamed = a2a.sendMessageStream(send(message({ words: [] }), { push: pushConfig('http://localhost/') }))
  await t.rejects(streamed.next(), { name: /RequestMalformedError/, message: /localhost resolves to 127\.0\.0\.1/ })
  t.equal(await tasks(), count, 'a refused config starts no task')
  t.same(await deliveries(app), [], 'and stores no config')
})

t.test('every delivery checks the address again: a config made while private addresses were allowed is not pushed once they are not, by name (its lookup) or by address', async (t) => {
  const dataDir = tempDataDir(t)
  const rx = await receiver(t)
  await rx.close()
  const first = await listen(t, { ...FAST, DATA_DIR: dataDir })
  const a2a = await client(first.url, 'JSONRPC')
  const port = new URL(rx.url).port
  const task = await a2a.sendMessage(send(message({ words: ['w'] }), { push: pushConfig(`http://localhost:${port}/by-name`, { id: 'by-name' }) })) as Task
  await a2a.createTaskPushNotificationConfig(pushConfig(`http://127.0.0.1:${port}/by-address`, { id: 'by-address', taskId: task.id }))
  await eventually('both tried', async () => (await deliveries(first.app)).every((d) => d.attempts > 0))
  await first.app.close()

  await rx.open()
  const second = await build(t, { ...FAST, DATA_DIR: dataDir, A2A_PUSH_ALLOW_PRIVATE: 'false' })
  await second.ready()
  await eventually('both refused by the new process', async () => (await deliveries(second)).every((d) => /A2A_PUSH_ALLOW_PRIVATE/.test(d.last_error ?? '')))
  const states = await deliveries(second)
  t.match(states.find((d) => d.config_id === 'by-name')?.last_error, /localhost resolves to 127\.0\.0\.1 \(loopback\)/)
  t.match(states.find((d) => d.config_id === 'by-address')?.last_error, /127\.0\.0\.1 resolves to 127\.0\.0\.1 \(loopback\)/)
  t.same(rx.all, [], 'the receiver got nothing')
})

t.test('a task has at most 10 configs; saving one of the same id replaces its URL and keeps its delivery', async (t) => {
  const rx = await receiver(t)
  const { app, url } = await listen(t, FAST)
  const a2a = await client(url, 'HTTP+JSON')
  const gate = randomUUID()
  const task = await a2a.sendMessage(send(message({ words: ['w'], gate }), { returnImmediately: true })) as Task
  for (let i = 0; i < 10; i++) await a2a.createTaskPushNotificationConfig(pushConfig(`${rx.url}/${i}`, { id: `c${i}`, taskId: task.id }))
  await t.rejects(a2a.createTaskPushNotificationConfig(pushConfig(`${rx.url}/10`, { id: 'c10', taskId: task.id })), { name: /RequestMalformedError/, message: /has 10 configs already/ })
  const replaced = await a2a.createTaskPushNotificationConfig(pushConfig(`${rx.url}/moved`, { id: 'c0', taskId: task.id, token: 'new-token' }))
  t.match(replaced, { id: 'c0', url: `${rx.url}/moved`, token: 'new-token' })
  openGate(gate)
  await eventually('every config done', async () => (await deliveries(app)).filter((d) => d.state === 'done').length === 10)
  const moved = rx.all.filter((r) => r.path === '/moved')
  t.ok(moved.length > 0, 'the replaced config\'s updates went to its new URL')
  t.ok(moved.every((r) => r.headers['x-a2a-notification-token'] === 'new-token' && verifyPushSignature({ header: r.headers['x-agent-host-signature'] as string, body: r.body, token: 'new-token' })), 'with its new token')
  t.equal(finalState([StreamResponse.fromJSON(JSON.parse((moved.at(-1) as Received).body))]), TaskState.TASK_STATE_COMPLETED, 'up to the final status')
  const c0 = rx.all.filter((r) => r.id.startsWith('c0/')).map((r) => r.id)
  t.same(c0, c0.map((_, i) => `c0/${i + 1}`), 'its updates numbered on from where they were')
})

t.test('the HTTP+JSON binding: create answers 201, delete 204, with the A2A error bodies', async (t) => {
  const rx = await receiver(t)
  const app = await build(t, FAST)
  const headers = { 'a2a-version': '1.0' }
  const created = await app.inject({ method: 'POST', url: `/a2a/${GATED}/rest/message:send`, headers, payload: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ data: { words: [] } }] } } })
  const taskId = created.json().task.id as string
  const base = `/a2a/${GATED}/rest/tasks/${taskId}/pushNotificationConfigs`
  const made = await app.inject({ method: 'POST', url: base, headers, payload: { url: `${rx.url}/rest`, id: 'rest', taskId: 'ignored: the path names the task' } })
  t.equal(made.statusCode, 201)
  t.match(made.headers['content-type'], /application\/a2a\+json/)
  t.match(made.json(), { id: 'rest', taskId, url: `${rx.url}/rest` })
  t.match((await app.inject({ url: base, headers })).json(), { configs: [{ id: 'rest' }] })
  t.match((await app.inject({ url: `${base}/rest`, headers })).json(), { id: 'rest', taskId })
  const missing = await app.inject({ url: `${base}/nope`, headers })
  t.equal(missing.statusCode, 404)
  t.match(missing.json(), { error: { status: 'NOT_FOUND' } })
  const bad = await app.inject({ method: 'POST', url: base, headers, payload: { url: 'gopher://example.com/' } })
  t.equal(bad.statusCode, 400)
  t.match(bad.json(), { error: { status: 'INVALID_ARGUMENT', message: /absolute http or https URL/ } })
  const deleted = await app.inject({ method: 'DELETE', url: `${base}/rest`, headers })
  t.equal(deleted.statusCode, 204)
  t.equal(deleted.body, '')
  t.equal((await app.inject({ url: `/a2a/${GATED}/.well-known/agent-card.json` })).json().capabilities.pushNotifications, true, 'the card says push notifications work')
})

t.test('a handler without the push service answers "push notifications not supported"', async (t) => {
  const app = await build(t, FAST)
  await app.ready()
  const hosted = app.agents.get('gated')
  if (hosted === undefined) throw new Error('no fixture agent')
  const handler = new AgentA2AHandler({ engine: app.assist, store: app.ledger, hosted, card: () => { throw new Error('unused') } })
  const call = { identity: { id: 'anonymous', name: 'anonymous', scopes: new Set(['admin']), agents: null, anonymous: true }, traceId: '0'.repeat(32), admit: async () => {}, signal: new AbortController().signal }
  const context = new ServerCallContext({ state: new Map([[A2A_CALL, call]]) })
  await t.rejects(handler.getTaskPushNotificationConfig({ tenant: '', taskId: randomUUID(), id: 'x' }, context), { name: /PushNotificationNotSupportedError/ })
  await t.rejects(handler.sendMessage(send(message({ words: [] }), { push: pushConfig('http://example.com/') }), context), { name: /PushNotificationNotSupportedError/ })
})

t.test('verifyPushSignature: the body signed with the token, recently; nothing else', async (t) => {
  const body = '{"statusUpdate":{"taskId":"t"}}'
  const now = 1_800_000_000
  const header = signPush('the-token', body, now)
  t.match(header, /^t=1800000000,v1=[0-9a-f]{64}$/)
  t.ok(verifyPushSignature({ header, body, token: 'the-token', now }), 'genuine')
  t.ok(verifyPushSignature({ header, body: Buffer.from(body), token: 'the-token', now: now + 300 }), 'as bytes, five minutes later')
  t.notOk(verifyPushSignature({ header, body: body.replace('"t"', '"u"'), token: 'the-token', now }), 'another body')
  t.notOk(verifyPushSignature({ header, body, token: 'another-token', now }), 'another token')
  t.notOk(verifyPushSignature({ header, body, token: 'the-token', now: now + 301 }), 'too old: a replay')
  t.notOk(verifyPushSignature({ header, body, token: 'the-token', now: now + 301, toleranceSeconds: 300 }), 'with the tolerance given')
  t.ok(verifyPushSignature({ header: `v1=${'0'.repeat(64)}, ${header}`, body, token: 'the-token', now }), 'one of several signatures')
  for (const broken of [undefined, '', 't=abc,v1=00', `t=${now}`, `t=${now},v1=zz`, `v1=${header.slice(-64)}`]) {
    t.notOk(verifyPushSignature({ header: broken, body, token: 'the-token', now }), `header ${String(broken)}`)
  }
})

t.test('addresses: only public unicast ones may be pushed to, whatever their form', async (t) => {
  for (const address of ['93.184.215.14', '8.8.8.8', '2606:4700:4700::1111', '::ffff:8.8.8.8', '::1:0:0:1']) t.equal(nonPublicRange(address), undefined, `${address} is public`)
  const ranges: Array<[string, string]> = [
    ['127.0.0.1', 'loopback'], ['10.0.0.1', 'private'], ['172.31.255.255', 'private'], ['192.168.0.1', 'private'], ['100.64.0.1', 'carrierGradeNat'],
    ['169.254.169.254', 'linkLocal'], ['0.0.0.0', 'unspecified'], ['224.0.0.251', 'multicast'], ['255.255.255.255', 'broadcast'], ['192.0.2.1', 'reserved'],
    ['::1', 'loopback'], ['::', 'unspecified'], ['fe80::1', 'linkLocal'], ['fc00::1', 'uniqueLocal'], ['ff02::1', 'multicast'], ['::ffff:10.0.0.1', 'private'], ['::ffff:127.0.0.1', 'loopback'], ['fe80::1%eth0', 'not an IP address'],
    ['2002:a00:1::', '6to4'], ['64:ff9b::a00:1', 'rfc6052'], ['not-an-ip', 'not an IP address'],
    // issue 27, fault 10: all of ::/96 but :: and ::1, whichever IPv4 address it carries
    ['::7f00:1', 'ipv4Compatible'], ['::127.0.0.1', 'ipv4Compatible'], ['::a00:1', 'ipv4Compatible'], ['::808:808', 'ipv4Compatible'], ['::8.8.8.8', 'ipv4Compatible'], ['::2', 'ipv4Compatible'], ['::ffff:ffff', 'ipv4Compatible']
  ]
  for (const [address, range] of ranges) t.equal(nonPublicRange(address), range, `${address}: ${range}`)
  await checkPushHost(new URL('http://93.184.215.14/'), false)
  await checkPushHost(new URL('http://localhost/'), true)
  await t.rejects(checkPushHost(new URL('http://[::1]:8080/'), false), { code: 'AH_ERR_PUSH_ADDRESS_REFUSED', message: /::1 resolves to ::1 \(loopback\)/ })
  const lookup = async (allowPrivate: boolean, all: boolean): Promise<unknown> => await new Promise((resolve, reject) => {
    guardedLookup(allowPrivate)('localhost', { all }, (err, address, family) => { if (err !== null) reject(err); else resolve({ address, family }) })
  })
  t.match(await lookup(true, false), { address: '127.0.0.1', family: 4 }, 'allowed: one address')
  t.match(await lookup(true, true), { address: [{ address: '127.0.0.1' }] }, 'allowed: every address')
  await t.rejects(lookup(false, false), { code: 'AH_ERR_PUSH_ADDRESS_REFUSED' }, 'refused')
  await t.rejects(new Promise((resolve, reject) => { guardedLookup(true)('nowhere.invalid', {}, (err) => { if (err !== null) reject(err); else resolve(undefined) }) }), { code: 'ENOTFOUND' }, 'a name that does not resolve')
})
