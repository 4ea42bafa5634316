import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { request } from 'node:http'
import { AGENTS, envelope, listen } from '../helper.js'
import { checkErrorBody } from '../sse.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

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
  const holder = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/hold-db-lock.ts', app.config.DATA_DIR], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { holder.kill('SIGKILL') })
  await once(holder.stdout, 'data')
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

  holder.kill('SIGKILL')
  await once(holder, 'exit')
  const ok = await post(url, '/v1/assist', envelope(AGENTS.echo))
  t.equal(ok.status, 200, 'writes work again once the lock is released')
})

t.test('a lock released within the budget: the request waits for it and succeeds', async (t) => {
  const { app, url } = await listen(t, { DB_WRITE_BUDGET_MS: '20000' })
  const holder = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/hold-db-lock.ts', app.config.DATA_DIR], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { holder.kill('SIGKILL') })
  await once(holder.stdout, 'data')
  const assist = post(url, '/v1/assist', envelope(AGENTS.echo))
  const health = await post(url, '/health')
  t.equal(health.status, 200)
  holder.kill('SIGKILL')
  const a = await assist
  t.equal(a.status, 200)
})
