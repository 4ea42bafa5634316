import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import rateLimit, { type CreateRateLimitOptions } from '@fastify/rate-limit'
import pg from 'pg'
import { setTimeout as sleep } from 'node:timers/promises'
import { openPostgres } from '../../../src/storage/postgres/database.js'
import { pgRateLimitStore, type PgRateLimitOptions } from '../../../src/storage/postgres/rate-limit-store.js'
import { pgDatabase, withDatabase } from '../../pg.js'

const WINDOW = 60_000

/**
 * One instance: its own pool on the shared database, and @fastify/rate-limit with the PostgreSQL
 * store, used as plugins/limits.ts uses it (`app.createRateLimit` for the per-caller, per-agent and
 * auth-failure limits) plus a route limit of the plugin's own (`config.rateLimit`).
 */
async function instance (t: Test, url: string, max: { caller: number, agent: number, auth: number, route: number }, options: PgRateLimitOptions = {}, window = WINDOW): Promise<FastifyInstance> {
  const pool = await openPostgres(url)
  const app = Fastify()
  t.teardown(async () => {
    await app.close()
    await pool.end()
  })
  await app.register(rateLimit, { global: false, timeWindow: window, store: pgRateLimitStore(pool, options) })
  // named limits, each counted apart (`nameSpace`), and one sharing the registration's name
  const perCaller = app.createRateLimit({ max: max.caller, keyGenerator: (request) => String(request.headers['x-caller']), nameSpace: 'caller' } as CreateRateLimitOptions)
  const perAgent = app.createRateLimit({ max: max.agent, keyGenerator: (request) => `agent:${(request.params as { agent: string }).agent}`, nameSpace: 'agent' } as CreateRateLimitOptions)
  const authFailures = app.createRateLimit({ max: max.auth, keyGenerator: (request) => `auth:${request.ip}` })
  const refuse = (reply: FastifyReply, state: Awaited<ReturnType<typeof perCaller>>): FastifyReply => {
    if (state.isAllowed) throw new Error('not limited')
    reply.header('x-ratelimit-limit', state.max).header('x-ratelimit-remaining', state.remaining).header('x-ratelimit-reset', state.ttlInSeconds)
    if (state.isExceeded) return reply.header('retry-after', state.ttlInSeconds).code(429).send({ limited: true })
    return reply
  }
  const limited = async (limiter: typeof perCaller, request: FastifyRequest, reply: FastifyReply): Promise<unknown> => {
    const state = await limiter(request)
    refuse(reply, state)
    return reply.sent ? reply : { ok: true }
  }
  app.get('/caller', async (request, reply) => await limited(perCaller, request, reply))
  app.get('/caller/peek', async (request) => await perCaller(request, { increment: false }))
  app.post('/run/:agent', async (request, reply) => await limited(perAgent, request, reply))
  app.post('/login', async (request, reply) => await limited(authFailures, request, reply))
  app.get('/route', { config: { rateLimit: { max: max.route, keyGenerator: (request: FastifyRequest) => String(request.headers['x-caller']) } } }, async () => ({ ok: true }))
  app.get('/other-route', { config: { rateLimit: { max: max.route, keyGenerator: (request: FastifyRequest) => String(request.headers['x-caller']) } } }, async () => ({ ok: true }))
  return app
}

async function twoInstances (t: Test, max = { caller: 5, agent: 3, auth: 2, route: 4 }): Promise<[FastifyInstance, FastifyInstance] | undefined> {
  const url = await pgDatabase(t)
  if (url === undefined) return undefined
  return [await instance(t, url, max), await instance(t, url, max)]
}

t.test('a per-caller limit of N is N across two instances hammered alternately; the rest are 429 with the right headers', async (t) => {
  const apps = await twoInstances(t)
  if (apps === undefined) return
  const answers = []
  for (let i = 0; i < 12; i++) answers.push(await apps[i % 2]?.inject({ url: '/caller', headers: { 'x-caller': 'alice' } }))
  t.same(answers.map((r) => r?.statusCode), [200, 200, 200, 200, 200, 429, 429, 429, 429, 429, 429, 429], 'exactly 5 allowed in total')
  t.same(answers.slice(0, 5).map((r) => r?.headers['x-ratelimit-remaining']), ['4', '3', '2', '1', '0'], 'one count, whichever instance answers')
  for (const refused of answers.slice(5)) {
    t.equal(refused?.headers['x-ratelimit-limit'], '5')
    t.equal(refused?.headers['x-ratelimit-remaining'], '0')
    const reset = Number(refused?.headers['x-ratelimit-reset'])
    t.ok(reset >= 1 && reset <= WINDOW / 1000, `x-ratelimit-reset ${reset}`)
    t.equal(refused?.headers['retry-after'], refused?.headers['x-ratelimit-reset'])
  }
  t.equal((await apps[1].inject({ url: '/caller', headers: { 'x-caller': 'bob' } })).statusCode, 200, 'another caller has its own budget')
})

t.test('requests racing on two instances: exactly N allowed', async (t) => {
  const apps = await twoInstances(t, { caller: 10, agent: 1, auth: 1, route: 1 })
  if (apps === undefined) return
  const answers = await Promise.all(Array.from({ length: 40 }, async (_, i) => await apps[i % 2]?.inject({ url: '/caller', headers: { 'x-caller': 'racer' } })))
  t.equal(answers.filter((r) => r?.statusCode === 200).length, 10)
  t.equal(answers.filter((r) => r?.statusCode === 429).length, 30)
  t.same(answers.filter((r) => r?.statusCode === 200).map((r) => Number(r?.headers['x-ratelimit-remaining'])).sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 'each allowed request saw its own count')
})

t.test('the per-agent and auth-failure limits (app.createRateLimit) are shared too, each counted apart', async (t) => {
  const apps = await twoInstances(t)
  if (apps === undefined) return
  const runs = []
  for (let i = 0; i < 5; i++) runs.push((await apps[i % 2]?.inject({ method: 'POST', url: '/run/echo' }))?.statusCode)
  t.same(runs, [200, 200, 200, 429, 429], 'RATE_LIMIT_AGENT_MAX 3 across instances')
  t.equal((await apps[0].inject({ method: 'POST', url: '/run/other' })).statusCode, 200, 'another agent has its own budget')
  const logins = []
  for (let i = 0; i < 4; i++) logins.push((await apps[(i + 1) % 2]?.inject({ method: 'POST', url: '/login', remoteAddress: '10.0.0.9' }))?.statusCode)
  t.same(logins, [200, 200, 429, 429], 'AUTH_FAILURE_MAX 2 across instances')
  const refused = await apps[0].inject({ method: 'POST', url: '/login', remoteAddress: '10.0.0.9' })
  t.equal(refused.headers['x-ratelimit-limit'], '2')
  t.ok(Number(refused.headers['retry-after']) >= 1)
  t.equal((await apps[1].inject({ method: 'POST', url: '/login', remoteAddress: '10.0.0.8' })).statusCode, 200, 'another address has its own count')
  t.equal((await apps[1].inject({ url: '/caller', headers: { 'x-caller': 'agent:echo' } })).statusCode, 200, 'limits with their own nameSpace count apart, even for the same key')
})

t.test('a route\'s own limit (the plugin\'s handler and headers) is shared, and counted apart from other routes', async (t) => {
  const apps = await twoInstances(t)
  if (apps === undefined) return
  const answers = []
  for (let i = 0; i < 6; i++) answers.push(await apps[i % 2]?.inject({ url: '/route', headers: { 'x-caller': 'carol' } }))
  t.same(answers.map((r) => r?.statusCode), [200, 200, 200, 200, 429, 429])
  t.same(answers.slice(0, 4).map((r) => r?.headers['x-ratelimit-remaining']), ['3', '2', '1', '0'])
  t.equal(answers[4]?.headers['x-ratelimit-limit'], '4')
  t.ok(Number(answers[4]?.headers['retry-after']) >= 1)
  t.equal((await apps[0].inject({ url: '/other-route', headers: { 'x-caller': 'carol' } })).statusCode, 200, 'the same caller on another route')
})

t.test('{ increment: false } reads the shared count without counting', async (t) => {
  const apps = await twoInstances(t)
  if (apps === undefined) return
  t.match((await apps[0].inject({ url: '/caller/peek', headers: { 'x-caller': 'dave' } })).json(), { remaining: 5, ttl: 0 }, 'nothing counted yet')
  await apps[0].inject({ url: '/caller', headers: { 'x-caller': 'dave' } })
  await apps[0].inject({ url: '/caller', headers: { 'x-caller': 'dave' } })
  for (const app of apps) {
    const state = (await app.inject({ url: '/caller/peek', headers: { 'x-caller': 'dave' } })).json()
    t.equal(state.remaining, 3, 'both instances see two counted')
    t.ok(state.ttl > 0 && state.ttl <= WINDOW)
  }
})

t.test('a window starts at the first hit and a new one gives a new budget; ended windows are pruned', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const max = { caller: 2, agent: 1, auth: 1, route: 1 }
  const app = await instance(t, url, max, { pruneEveryMs: 0 }, 300)
  const other = await instance(t, url, max, { pruneEveryMs: 0 }, 300)
  const call = async (on: FastifyInstance, caller = 'erin'): Promise<number> => (await on.inject({ url: '/caller', headers: { 'x-caller': caller } })).statusCode
  t.same([await call(app), await call(other), await call(app)], [200, 200, 429])
  const deadline = Date.now() + 10_000
  let status = 429
  while (status === 429 && Date.now() < deadline) {
    await sleep(20)
    status = await call(other)
  }
  t.equal(status, 200, 'the window ended: a new budget')
  const check = new pg.Client({ connectionString: url })
  await check.connect()
  t.teardown(async () => { await check.end() })
  const rows = async (): Promise<string[]> => (await check.query<{ key: string }>('SELECT key FROM rate_limits ORDER BY key')).rows.map((r) => r.key)
  await call(app, 'frank')
  t.ok((await rows()).includes('frank'))
  // frank's window ends; a later hit of anyone's prunes it
  while ((await rows()).includes('frank') && Date.now() < deadline) {
    await sleep(20)
    await call(app, 'gina')
  }
  t.notOk((await rows()).includes('frank'), 'an ended window\'s row is deleted')
})

t.test('a store whose database is away fails the request (the plugin\'s skipOnError decides) and tells of its failed prune', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const broken = new pg.Pool({ connectionString: withDatabase(url, 'no_such_database') })
  t.teardown(async () => { await broken.end() })
  const failures: Error[] = []
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  await app.register(rateLimit, { global: false, store: pgRateLimitStore(broken, { pruneEveryMs: 0, onPruneError: (err) => { failures.push(err) } }) })
  const limiter = app.createRateLimit({ max: 1, keyGenerator: () => 'k' })
  app.get('/', async (request) => await limiter(request))
  app.get('/peek', async (request) => await limiter(request, { increment: false }))
  t.equal((await app.inject({ url: '/' })).statusCode, 500)
  t.equal((await app.inject({ url: '/peek' })).statusCode, 500)
  const deadline = Date.now() + 5000
  while (failures.length === 0 && Date.now() < deadline) await sleep(10)
  t.match(failures[0]?.message, /no_such_database/)
  const lenient = Fastify()
  t.teardown(async () => { await lenient.close() })
  await lenient.register(rateLimit, { global: false, skipOnError: true, store: pgRateLimitStore(broken) })
  const skipping = lenient.createRateLimit({ max: 1, keyGenerator: () => 'k' })
  lenient.get('/', async (request) => await skipping(request))
  t.match((await lenient.inject({ url: '/' })).json(), { isExceeded: false }, 'skipOnError: let through')
})

t.test('continueExceeding and exponentialBackoff are refused: a fixed window does not move', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const pool = await openPostgres(url)
  t.teardown(async () => { await pool.end() })
  for (const option of ['continueExceeding', 'exponentialBackoff']) {
    const app = Fastify()
    await t.rejects(async () => { await app.register(rateLimit, { store: pgRateLimitStore(pool), [option]: true }) }, { code: 'AH_ERR_CONFIG_INVALID', message: /fixed windows/ }, option)
    await app.close()
  }
})
