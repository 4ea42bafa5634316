import t from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { request, type IncomingMessage } from 'node:http'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { AGENTS, build, envelope, listen } from '../helper.js'
import { until } from '../socket.js'
import { checkErrorBody } from '../sse.js'
import { busTaskId } from '../../src/bus/agent-subscriptions.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const BUS_AGENTS = fileURLToPath(new URL('../fixtures/bus-agents/', import.meta.url))

const publication = (type: string, key: string, data: unknown = {}, extra: Record<string, unknown> = {}): Record<string, unknown> =>
  ({ event: { type, key, data, visibility: 'a2a' }, ...extra })

async function publish (app: FastifyInstance, body: Record<string, unknown>, key?: string): Promise<{ status: number, body: Record<string, any> }> {
  const res = await app.inject({ method: 'POST', url: '/v1/bus/events', payload: body, headers: key === undefined ? {} : { authorization: `Bearer ${key}` } })
  return { status: res.statusCode, body: res.json() }
}

/** An SSE GET over a real socket, its `bus.event` frames parsed as they arrive. */
async function follow (url: string, headers: Record<string, string> = {}): Promise<{ res: IncomingMessage, events: () => Array<{ id: string, data: Record<string, any> }>, close: () => void }> {
  return await new Promise((resolve, reject) => {
    const req = request(url, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString('utf8') })
      const events = (): Array<{ id: string, data: Record<string, any> }> => text.split('\n\n').filter((f) => f.includes('event: bus.event')).map((frame) => ({
        id: /^id: (.*)$/m.exec(frame)?.[1] as string,
        data: JSON.parse(/^data: (.*)$/m.exec(frame)?.[1] as string)
      }))
      resolve({ res, events, close: () => { req.destroy() } })
    })
    req.on('error', reject)
    req.end()
  })
}

t.test('publish over HTTP: 202 with the stored event, a duplicate key answers the live one, bad input is a 400 with its paths', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const first = await publish(app, publication('demo.happened', 'k-1', { n: 1 }, { priority: 7, ttl: 60 }))
  t.equal(first.status, 202)
  t.match(first.body, { duplicate: false, event: { seq: 1, type: 'demo.happened', key: 'k-1', data: { n: 1 }, priority: 7, visibility: 'a2a', source: 'api', target_agents: null } })
  t.equal(Date.parse(first.body.event.expires_at) - Date.parse(first.body.event.published_at), 60_000)
  t.notOk('owner_key' in first.body.event, 'whose it is stays in the server')
  const again = await publish(app, publication('demo.happened', 'k-1', { n: 2 }))
  t.match(again.body, { duplicate: true, event: { id: first.body.event.id, data: { n: 1 } } })
  const common = await publish(app, publication('evaluation.complete', 'e', { passed: 'yes' }))
  t.equal(common.status, 400)
  t.match(checkErrorBody(common.body), { code: 'AH_ERR_BUS_EVENT_INVALID', message: /evaluation\.complete/ })
  t.same(common.body.details.errors.map((e: { path: string }) => e.path).sort(), ['/event/data', '/event/data/passed'], 'metrics missing, passed not a boolean')
  const shape = await publish(app, { event: { type: 'x', key: 'k', data: {} }, priority: 0 })
  t.equal(shape.status, 400)
  t.equal(shape.body.code, 'AH_ERR_VALIDATION', 'the body schema catches it first')
})

t.test('the feed: a page by pattern, then a live SSE stream, resumed after a disconnect by Last-Event-ID', async (t) => {
  const { app, url } = await listen(t, { WORKERS_PER_TYPE: '0', BUS_POLL_MS: '20' })
  await publish(app, publication('code.pushed', 'a'))
  await publish(app, { event: { type: 'code.pushed', key: 'hidden', data: {}, visibility: 'internal' } })
  await publish(app, publication('other.thing', 'b'))
  const page = (await app.inject({ url: '/v1/bus/events?pattern=code.*&pattern=nothing.here' })).json()
  t.same(page.events.map((e: { key: string }) => e.key), ['a'])
  t.equal(page.next, 3)
  t.same((await app.inject({ url: '/v1/bus/events?after=1' })).json().events.map((e: { key: string }) => e.key), ['b'])

  const live = await follow(`${url}/v1/bus/events?follow=true&pattern=code.*`)
  t.match(live.res.headers['content-type'], /^text\/event-stream/)
  await publish(app, publication('code.pushed', 'c'))
  await publish(app, publication('other.thing', 'd'))
  await publish(app, publication('code.pushed', 'e'))
  await until('two live events', () => live.events().length === 2)
  t.same(live.events().map((e) => e.data.key), ['c', 'e'], 'from now on, by pattern (no history without a cursor)')
  const cursor = live.events()[0]?.id as string
  live.close()
  await publish(app, publication('code.pushed', 'f'))
  const resumed = await follow(`${url}/v1/bus/events?follow=true&pattern=code.*`, { 'last-event-id': cursor })
  await until('the resumed events', () => resumed.events().length === 2)
  t.same(resumed.events().map((e) => e.data.key), ['e', 'f'], 'everything after the cursor, once')
  await publish(app, publication('code.pushed', 'g'))
  await until('a live event after the resume', () => resumed.events().length === 3)
  t.same(resumed.events().map((e) => Number(e.id)), [...resumed.events().map((e) => e.data.seq)])
  resumed.close()
  const bad = await app.inject({ url: '/v1/bus/events', headers: { 'last-event-id': 'yesterday' } })
  t.equal(bad.statusCode, 400)
})

t.test('regression (issue 31): Accept: text/event-stream alone is a follow, as follow=true; JSON or both types are a page; follow=false is a page whatever Accept says', async (t) => {
  const { app, url } = await listen(t, { WORKERS_PER_TYPE: '0', BUS_POLL_MS: '20' })
  await publish(app, publication('code.pushed', 'old'))
  const live = await follow(`${url}/v1/bus/events?pattern=code.*`)
  t.match(live.res.headers['content-type'], /^text\/event-stream/)
  await publish(app, publication('code.pushed', 'new'))
  await until('the live event', () => live.events().length === 1)
  t.same(live.events().map((e) => e.data.key), ['new'], 'from now on, as follow=true')
  live.close()
  for (const accept of ['application/json', 'application/json, text/event-stream', '*/*']) {
    const page = await app.inject({ url: '/v1/bus/events', headers: { accept } })
    t.same(page.json().events.map((e: { key: string }) => e.key), ['old', 'new'], `Accept: ${accept}`)
  }
  const page = await app.inject({ url: '/v1/bus/events?follow=false', headers: { accept: 'text/event-stream' } })
  t.same(page.json().events.map((e: { key: string }) => e.key), ['old', 'new'], 'follow=false')
})

t.test('scoped by auth: a key sees its own events and dead letters, an admin all, and each route needs its scope', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '0', AGENTS_DIR: BUS_AGENTS })
  const alice = (await app.keys.create({ name: 'alice', scopes: ['bus:publish', 'bus:read'] })).key
  const bob = (await app.keys.create({ name: 'bob', scopes: ['bus:publish', 'bus:read'] })).key
  const admin = (await app.keys.create({ name: 'root', scopes: ['admin'] })).key
  const reader = (await app.keys.create({ name: 'reader', scopes: ['bus:read'] })).key
  await publish(app, publication('demo.one', 'alice-1'), alice)
  await publish(app, publication('demo.one', 'bob-1'), bob)
  await publish(app, publication('poison.pill', 'alice-poison'), alice)
  const seen = async (key: string): Promise<string[]> => (await app.inject({ url: '/v1/bus/events', headers: { authorization: `Bearer ${key}` } })).json().events.map((e: { key: string }) => e.key)
  t.same(await seen(alice), ['alice-1', 'alice-poison'])
  t.same(await seen(bob), ['bob-1'])
  t.same(await seen(admin), ['alice-1', 'bob-1', 'alice-poison'])
  t.equal((await app.inject({ method: 'POST', url: '/v1/bus/events', payload: publication('x.y', 'z'), headers: { authorization: `Bearer ${reader}` } })).statusCode, 403)
  const letters = async (key: string): Promise<Array<Record<string, any>>> => (await app.inject({ url: '/v1/bus/dead-letters', headers: { authorization: `Bearer ${key}` } })).json().dead_letters
  await until('the poison pill dead-lettered', async () => (await app.bus.deadLetters({})).length === 1)
  t.match(await letters(alice), [{ subscription_id: 'listener:always-fails', attempts: 2, last_error: 'cannot digest this', event: { key: 'alice-poison' } }])
  t.same(await letters(bob), [])
  t.equal((await letters(admin)).length, 1)
  const [letter] = await letters(alice)
  const retry = async (key: string): Promise<{ statusCode: number, json: () => Record<string, any> }> => await app.inject({ method: 'POST', url: `/v1/bus/dead-letters/${letter?.id as number}/retry`, headers: { authorization: `Bearer ${key}` } })
  t.equal((await retry(bob)).statusCode, 404, 'not bob\'s to retry')
  t.equal((await retry(alice)).statusCode, 202)
  t.equal((await retry(alice)).json().code, 'AH_ERR_BUS_DEAD_LETTER_NOT_FOUND', 'the letter went back to the queue')
  await until('dead again: the handler is still broken', async () => (await app.bus.deadLetters({})).length === 1 && (await app.bus.deadLetters({}))[0]?.id !== letter?.id)
  const subs = (await app.inject({ url: '/v1/bus/subscriptions', headers: { authorization: `Bearer ${reader}` } })).json().subscriptions
  t.match(subs, [
    { id: 'listener:always-fails', agent: 'listener', patterns: ['poison.**'], max_attempts: 2 },
    { id: 'listener:on-probe', agent: 'listener', patterns: ['probe.*'], filter: { wanted: true } }
  ])
})

t.test('a duplicate key is the publisher\'s own: another key\'s publication with it is its own event, never the first one\'s answer, and cannot suppress it (issue 27, fault 3)', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '0', AGENTS_DIR: BUS_AGENTS })
  const alice = (await app.keys.create({ name: 'alice', scopes: ['bus:publish', 'bus:read'] })).key
  const bob = (await app.keys.create({ name: 'bob', scopes: ['bus:publish', 'bus:read'] })).key
  const admin = (await app.keys.create({ name: 'root', scopes: ['admin'] })).key
  const seen = async (key: string): Promise<Array<Record<string, any>>> => (await app.inject({ url: '/v1/bus/events', headers: { authorization: `Bearer ${key}` } })).json().events

  const hers = await publish(app, publication('demo.one', 'ka1', { secret: 'alice only' }), alice)
  const his = await publish(app, publication('demo.one', 'ka1', { n: 2 }), bob)
  t.equal(his.status, 202)
  t.equal(his.body.duplicate, false, 'bob\'s publication is his own event (was: duplicate: true)')
  t.not(his.body.event.id, hers.body.event.id)
  t.notMatch(JSON.stringify(his.body), /alice only/, 'alice\'s data is never in bob\'s answer')
  t.match((await publish(app, publication('demo.one', 'ka1', { n: 3 }), bob)).body, { duplicate: true, event: { id: his.body.event.id, data: { n: 2 } } }, 'bob\'s own key still dedups his own publications')
  t.match((await publish(app, publication('demo.one', 'ka1', { n: 4 }), alice)).body, { duplicate: true, event: { id: hers.body.event.id } }, '... and alice\'s hers')

  // bob claims a key first, for a day: alice's event with that key is still stored and delivered
  await publish(app, publication('probe.ping', 'kb1', { wanted: false, n: 0 }, { ttl: 86_400 }), bob)
  const first = await publish(app, publication('probe.ping', 'kb1', { wanted: true, n: 7 }), alice)
  t.equal(first.body.duplicate, false, 'alice\'s event is stored (was: bob\'s squatted key made it a duplicate of his)')
  t.same((await seen(alice)).map((e) => [e.key, e.data]), [['ka1', { secret: 'alice only' }], ['kb1', { wanted: true, n: 7 }]])
  t.same((await seen(bob)).map((e) => [e.key, e.data]), [['ka1', { n: 2 }], ['kb1', { wanted: false, n: 0 }]])
  t.equal((await seen(admin)).length, 4, 'four events in all')
  await until('alice\'s event started its task', async () => (await app.tasks.get(busTaskId(first.body.event, 'listener:on-probe'))) !== undefined)
  const started = await app.tasks.get(busTaskId(first.body.event, 'listener:on-probe'))
  t.match(started, { inputs: { n: 7 }, metadata: { owner_key: (await app.keys.list()).find((k) => k.name === 'alice')?.id } })
  t.same(started?.metadata.owner_scopes, (await app.keys.list()).find((k) => k.name === 'alice')?.scopes, 'the task an event starts carries its publisher\'s scopes, which its agent\'s host calls are held to')
})

t.test('a contract agent\'s subscription starts a task per matching event, once, with the caller and trace carried over', async (t) => {
  const app = await build(t, { AGENTS_DIR: BUS_AGENTS, WORKERS_PER_TYPE: '1', TASK_POLL_MS: '20', BUS_POLL_MS: '20' })
  const wanted = await publish(app, publication('probe.ping', 'p-1', { wanted: true, n: 41 }))
  await publish(app, publication('probe.ping', 'p-2', { wanted: false, n: 1 }))
  await publish(app, publication('probe.ping', 'p-1', { wanted: true, n: 41 }))
  const id = busTaskId(wanted.body.event, 'listener:on-probe')
  let task = await app.tasks.get(id)
  while (task?.status !== 'COMPLETED') {
    await new Promise((resolve) => setTimeout(resolve, 20))
    task = await app.tasks.get(id)
  }
  t.match(task, { type: 'listener', inputs: { n: 41 }, metadata: { intent: 'react', bus_event_type: 'probe.ping', subscription: 'listener:on-probe', owner_key: 'anonymous' }, context: { trace_id: wanted.body.event.trace_id } })
  t.equal((await app.tasks.list({ type: 'listener' })).length, 1, 'the filter kept p-2 out, and the duplicate p-1 is one event')
  await until('the reaction on the feed', async () => (await app.bus.feed({ after: 0, patterns: ['listener.reacted'] })).events.length === 1)
  const reaction = (await app.bus.feed({ after: 0, patterns: ['listener.reacted'] })).events[0]
  t.match(reaction, { data: { n: 41 }, source: 'agent:listener', owner_key: 'anonymous', trace_id: wanted.body.event.trace_id })
  t.same(reaction?.owner_scopes, ['admin'], 'an event a task publishes carries the task\'s owner\'s scopes on')
})

t.test('a contract agent\'s output events reach the bus as the caller\'s, behind /v1/assist', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey', WORKERS_PER_TYPE: '0' })
  const caller = (await app.keys.create({ name: 'caller', scopes: ['assist:invoke', 'bus:read'] })).key
  const other = (await app.keys.create({ name: 'other', scopes: ['bus:read'] })).key
  const body = envelope(AGENTS.research, { target_path: 'test/fixtures/research-target' })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json', authorization: `Bearer ${caller}` }, payload: body })
  t.equal(res.statusCode, 200, res.body)
  const feed = async (key: string): Promise<Array<Record<string, any>>> => (await app.inject({ url: '/v1/bus/events?pattern=research.*', headers: { authorization: `Bearer ${key}` } })).json().events
  const [event] = await feed(caller)
  t.match(event, { type: 'research.complete', key: `research:${res.json().output.task_id as string}`, source: 'agent:research', trace_id: (body.context.trace as { trace_id: string }).trace_id })
  t.equal(event?.data.insights.length, 6)
  t.same(await feed(other), [], 'another key does not see it')
})

function spawnSubscriber (t: { teardown: (fn: () => unknown) => void }, dataDir: string, id: string, leaseMs: number, mode: 'print' | 'hang'): { child: ChildProcess, lines: string[] } {
  const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/bus-subscriber.ts', dataDir, id, String(leaseMs), mode], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  const lines: string[] = []
  let rest = ''
  child.stdout?.on('data', (c: Buffer) => {
    const parts = (rest + c.toString('utf8')).split('\n')
    rest = parts.pop() as string
    lines.push(...parts)
  })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  return { child, lines }
}

t.test('at least once across processes: a handler in another process gets the server\'s events; killed while holding one, the event goes to the next holder after its lease', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const dataDir = app.config.DATA_DIR
  const printer = spawnSubscriber(t, dataDir, 'remote:printer', 5000, 'print')
  await until('the printer subscribed', () => printer.lines.includes('ready'), 60_000, 20)
  await publish(app, publication('remote.job', 'job-1'))
  await publish(app, publication('remote.job', 'job-2', {}, { priority: 9 }))
  await until('the printer got both', () => printer.lines.length === 3, 20_000, 10)
  t.same(printer.lines.slice(1).sort(), ['got job-1 1', 'got job-2 1'])
  printer.child.kill('SIGTERM')

  const doomed = spawnSubscriber(t, dataDir, 'remote:worker', 1000, 'hang')
  await until('the doomed subscriber subscribed', () => doomed.lines.includes('ready'), 60_000, 20)
  await publish(app, publication('remote.job', 'job-3'))
  await until('the doomed subscriber holds job-3', () => doomed.lines.includes('got job-3 1'), 20_000, 10)
  doomed.child.kill('SIGKILL')
  const heir = spawnSubscriber(t, dataDir, 'remote:worker', 1000, 'print')
  await until('the heir got job-3 once the lease lapsed', () => heir.lines.some((l) => l.startsWith('got job-3')), 30_000, 10)
  t.ok(heir.lines.includes('got job-3 1'), 'the same delivery, redelivered (a lease that lapsed is not a failed attempt)')
  t.same(await app.bus.deadLetters({}), [])
})

t.test('agent-host worker runs a contract agent\'s subscriptions: the server\'s event starts a task in the worker, whose event reaches the server\'s feed', async (t) => {
  const app = await build(t, { AGENTS_DIR: BUS_AGENTS, WORKERS_PER_TYPE: '0', TASK_STORE: 'sqlite' })
  const dataDir = app.config.DATA_DIR
  // the server handles nothing of it: only the worker registers the subscription's handler
  await app.bus.unsubscribe('listener:on-probe')
  await app.bus.unsubscribe('listener:always-fails')
  const child = spawn(process.execPath, [...process.execArgv, 'src/cli.ts', 'worker', '--type', 'listener'], {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir, AGENTS_DIR: BUS_AGENTS, TASK_STORE: 'sqlite', TASK_POLL_MS: '20', BUS_POLL_MS: '20' },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  let output = ''
  child.stdout.on('data', (c: Buffer) => { output += c.toString('utf8') })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  await until('the worker ready', () => output.includes('worker ready'), 60_000, 20)
  const published = await publish(app, publication('probe.ping', 'from-server', { wanted: true, n: 7 }))
  await until('the worker\'s reaction on the server\'s feed', async () => (await app.bus.feed({ after: 0, patterns: ['listener.reacted'] })).events.length === 1, 30_000, 20)
  const id = busTaskId(published.body.event, 'listener:on-probe')
  let task = await app.tasks.get(id)
  while (task?.status !== 'COMPLETED') {
    await new Promise((resolve) => setTimeout(resolve, 20))
    task = await app.tasks.get(id)
  }
  t.match(task, { inputs: { n: 7 }, owner: new RegExp(`^listener@.*:${child.pid as number}#0$`) }, 'done by the worker process')
  t.match((await app.bus.feed({ after: 0, patterns: ['listener.reacted'] })).events[0], { data: { n: 7 }, source: 'agent:listener', owner_key: 'anonymous' })
  child.kill('SIGTERM')
  await new Promise((resolve) => child.on('exit', resolve))
  t.match(output, /worker stopped/)
})
