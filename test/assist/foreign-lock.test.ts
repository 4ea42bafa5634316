import t from 'tap'
import { request } from 'node:http'
import { AGENTS, envelope, listen } from '../helper.js'
import { holdDbLock } from '../lock-holder.js'
import { checkErrorBody } from '../sse.js'

async function post (url: string, path: string, body?: unknown): Promise<{ status: number, headers: Record<string, unknown>, json: unknown }> {
  return await new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method: body === undefined ? 'GET' : 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString() })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, headers: res.headers, json: JSON.parse(text) }) })
    })
    req.on('error', reject)
    req.end(body === undefined ? undefined : JSON.stringify(body))
  })
}

// Regression: while another process held SQLite's write lock, each write blocked the event loop for the
// whole busy timeout (/health took 4.9 s), then answered 500.
t.test('a write lock held by another process: /v1/assist answers 503 AH_ERR_STORAGE_BUSY within its budget, and /health is answered meanwhile', async (t) => {
  const { app, url } = await listen(t, { DB_WRITE_BUDGET_MS: '1500' })
  const holder = await holdDbLock(t, app.config.DATA_DIR)
  const order: string[] = []
  const assist = post(url, '/v1/assist', envelope(AGENTS.echo)).then((r) => { order.push('assist'); return r })
  await new Promise((resolve) => setImmediate(resolve))
  const health = post(url, '/health').then((r) => { order.push('health'); return r })
  const [a, h] = await Promise.all([assist, health])
  t.equal(h.status, 200)
  t.same(order, ['health', 'assist'], '/health was answered while the assist request waited for the lock')
  t.equal(a.status, 503)
  t.equal(checkErrorBody(a.json).code, 'AH_ERR_STORAGE_BUSY')
  t.ok(a.headers['retry-after'], 'Retry-After is set')

  await holder.release()
  const ok = await post(url, '/v1/assist', envelope(AGENTS.echo))
  t.equal(ok.status, 200, 'writes work again once the lock is released')
})

t.test('a lock released within the budget: the request waits for it and succeeds', async (t) => {
  const { app, url } = await listen(t, { DB_WRITE_BUDGET_MS: '20000' })
  const holder = await holdDbLock(t, app.config.DATA_DIR)
  const assist = post(url, '/v1/assist', envelope(AGENTS.echo))
  const health = await post(url, '/health')
  t.equal(health.status, 200)
  await holder.release()
  const a = await assist
  t.equal(a.status, 200)
})

t.test('a write outside the engine that finds the lock held is a 503 AH_ERR_STORAGE_BUSY, not a 500', async (t) => {
  const { app } = await listen(t)
  const body = envelope(AGENTS.echo)
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', payload: body })).statusCode, 200)
  const holder = await holdDbLock(t, app.config.DATA_DIR)
  const res = await app.inject({ method: 'DELETE', url: `/v1/sessions/${body.context.session_id}` })
  t.equal(res.statusCode, 503)
  t.equal(checkErrorBody(res.json()).code, 'AH_ERR_STORAGE_BUSY')
  t.ok(res.headers['retry-after'])
  await holder.release()
  t.equal((await app.inject({ method: 'DELETE', url: `/v1/sessions/${body.context.session_id}` })).statusCode, 204, 'and works once the lock is gone')
})
