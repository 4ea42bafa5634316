import t, { type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer } from 'node:http'
import { once } from 'node:events'
import { pathToFileURL } from 'node:url'
import Fastify from 'fastify'
import type { Page } from 'playwright-core'
import { loadConfig } from '../../src/config.js'
import errorHandler from '../../src/plugins/error-handler.js'
import playgroundRoutes, { clientDir } from '../../src/routes/playground.js'
import type { StreamPacket } from '../../src/protocol/packets.js'
import { docBlocks } from '../docs/doc-blocks.js'
import { pageTests } from '../browser.js'
import { AGENTS, build, FIXTURE_AGENTS_DIR, listen, SCRIPTED } from '../helper.js'

/** The fixture agent with two capabilities, `inspect` and `strict` (test/fixtures/agents/inspect). */
const INSPECT = 'f0000000-0000-4000-8000-000000000001'

const { skip, open } = pageTests(t)

async function choose (page: Page, agentId: string, inputs: Record<string, unknown>): Promise<void> {
  await page.waitForSelector('body[data-ready=true]')
  await page.selectOption('#agent', agentId)
  await page.click('#tab-json')
  await page.fill('#inputs-json', JSON.stringify(inputs))
}

const streamText = async (page: Page, title: string): Promise<string> =>
  await page.locator('article.stream', { hasText: title }).locator('.delta').allTextContents().then((parts) => parts.join(''))
const packetsOf = async (page: Page): Promise<StreamPacket[]> =>
  (await page.locator('#packets').textContent() ?? '').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as StreamPacket)

/** Every stream's packets are seq 1, 2, 3 ... with nothing missing and nothing twice. */
function assertNoGapNoDuplicate (t: Test, packets: StreamPacket[]): void {
  const seqs = new Map<string, number[]>()
  for (const p of packets) seqs.set(p.stream_id, [...(seqs.get(p.stream_id) ?? []), p.seq])
  for (const [id, list] of seqs) t.same(list, list.map((_, i) => i + 1), `stream ${id.slice(0, 8)}: seq 1..${list.length}`)
}

/** Runs once and waits for the run to end; the JSON answer when the run was in JSON mode. */
async function runToEnd (page: Page): Promise<{ request_id: string, output: Record<string, unknown> } | undefined> {
  await page.click('#run')
  await page.waitForSelector('#run:not([disabled])')
  const answer = await page.locator('#answer').textContent() ?? ''
  return answer === '' ? undefined : JSON.parse(answer)
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const words = (n: number): string => Array.from({ length: n }, (_, i) => `w${i + 1}`).join(' ')

t.test('the page loads from this server alone, lists the agents and streams a run live', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, requests, errors } = await open(t, `${url}/playground`)
  await page.waitForSelector('body[data-ready=true]')
  t.ok(await page.locator(`#agent option[value="${AGENTS.echoStream}"]`).count(), 'echo-stream is offered')
  await page.selectOption('#agent', AGENTS.echoStream)
  await page.fill('#inputs-form [name=query]', 'alpha beta gamma delta epsilon')
  await page.fill('#inputs-form [name=delay_ms]', '150')
  await page.click('#run')
  await page.locator('article.stream:last-child .delta', { hasText: 'alpha' }).waitFor()
  t.notOk(await page.locator('article.stream[data-closed]').count() === 2, 'the first words show before the run ends')
  await page.waitForSelector('article.stream:nth-child(2)[data-closed=done]')
  t.equal(await streamText(page, 'Echo Response'), 'alpha beta gamma delta epsilon ')
  t.match(await page.locator('article.stream').first().textContent(), /Processing request/)
  assertNoGapNoDuplicate(t, await packetsOf(page))
  if (process.env.PLAYGROUND_SCREENSHOT !== undefined) await page.screenshot({ path: process.env.PLAYGROUND_SCREENSHOT, fullPage: true })
  t.same(requests.filter((r) => !r.startsWith(url)), [], 'nothing loaded from anywhere else')
  t.same(errors, [], 'no console errors (a CSP violation would be one)')
})

t.test('a run is cancelled from the page: its streams close "cancelled" and the words stop', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page } = await open(t, `${url}/playground/`)
  await choose(page, AGENTS.echoStream, { query: words(40), delay_ms: 200 })
  await page.click('#run')
  await page.locator('article.stream:nth-child(2) .delta', { hasText: 'w2' }).waitFor()
  const cancelled = page.waitForResponse((r) => r.url().endsWith('/cancel'))
  await page.click('#cancel')
  await page.waitForSelector('article.stream:first-child[data-closed=cancelled]')
  t.ok((await streamText(page, 'Echo Response')).split(' ').length < 40, 'it stopped early')
  await page.waitForSelector('#run:not([disabled])')
  t.equal(await page.locator('#cancel').isDisabled(), true)
  await cancelled
  // regression: the stream ended (closed "cancelled") and the status said "Done", in green
  t.match(await page.locator('#status').textContent(), /^Cancelled/, 'the status says the run was cancelled')
  t.equal(await page.locator('#status').getAttribute('class'), 'cancelled', 'not styled as a success')
})

t.test('a reload in the middle of a run resumes it: every word once, in order', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, errors } = await open(t, `${url}/playground/`)
  await choose(page, AGENTS.echoStream, { query: words(15), delay_ms: 150 })
  t.not(await page.locator('#agent option').first().getAttribute('value'), AGENTS.echoStream, 'echo-stream is not the agent a fresh page shows')
  await page.click('#run')
  await page.locator('article.stream:nth-child(2) .delta', { hasText: 'w3' }).waitFor()
  const session = await page.locator('#session-id').textContent()
  await page.reload()
  await page.waitForSelector('article.stream:nth-child(2)[data-closed=done]', { timeout: 30_000 })
  t.equal(await streamText(page, 'Echo Response'), words(15) + ' ')
  t.match(await page.locator('#status').textContent(), /Done/)
  assertNoGapNoDuplicate(t, await packetsOf(page))
  // regression: the run resumed, but the menu showed the first agent and its empty inputs
  t.equal(await page.locator('#agent').inputValue(), AGENTS.echoStream, 'the agent is the one that ran')
  t.equal(await page.locator('#tab-json').getAttribute('aria-selected'), 'true', 'still on Raw JSON')
  t.same(JSON.parse(await page.locator('#inputs-json').inputValue()), { query: words(15), delay_ms: 150 }, 'the inputs are the ones typed')
  t.equal(await page.locator('#session-id').textContent(), session, 'the session is the same')
  t.same(errors, [])
})

t.test('the answer mode follows the capability: JSON for a request_response agent, a stream for a server_sent_events one', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page } = await open(t, `${url}/playground/`)
  await page.waitForSelector('body[data-ready=true]')
  const mode = async (): Promise<string | null> => await page.locator('input[name=mode]:checked').getAttribute('value')
  // regression: the page tested delivery_mode === 'json', which no manifest says, so echo was offered as a stream
  await page.selectOption('#agent', AGENTS.echo)
  t.equal(await mode(), 'json', 'echo (request_response) answers in JSON by default')
  t.match(await page.locator('label', { has: page.locator('input[name=mode][value=json]') }).textContent(), /default/, 'and JSON is marked as its default')
  await page.selectOption('#agent', AGENTS.echoStream)
  t.equal(await mode(), 'sse', 'echo-stream (server_sent_events) streams by default')
  t.match(await page.locator('label', { has: page.locator('input[name=mode][value=sse]') }).textContent(), /default/)
  t.notMatch(await page.locator('label', { has: page.locator('input[name=mode][value=json]') }).textContent(), /default/)
})

t.test('the session is kept across runs (session memory works), New session starts another, and unkept every run has its own', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, errors } = await open(t, `${url}/playground/`)
  await choose(page, AGENTS.echo, { query: 'again' })
  await page.check('input[name=mode][value=json]')
  t.equal(await page.locator('#keep-session').isChecked(), true, 'kept by default')
  // echo counts its calls in the session: 1, 2 in one session, 1 in a new one
  t.match(await runToEnd(page), { output: { echo: 'again', calls: 1 } })
  const first = await page.locator('#session-id').textContent() ?? ''
  t.match(first, UUID, 'the session id is shown')
  t.match(await runToEnd(page), { output: { calls: 2 } }, 'the second run continued the session')
  t.equal(await page.locator('#session-id').textContent(), first)
  await page.click('#new-session')
  t.match(await runToEnd(page), { output: { calls: 1 } }, 'New session: a new conversation')
  const second = await page.locator('#session-id').textContent() ?? ''
  t.match(second, UUID)
  t.not(second, first)
  await page.uncheck('#keep-session')
  t.match(await runToEnd(page), { output: { calls: 1 } }, 'not kept: a new session each run')
  t.not(await page.locator('#session-id').textContent(), second)
  t.same(errors, [])
})

t.test('an agent with several capabilities: the user chooses one, and a reload keeps the agent, capability, inputs and session', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { page, errors } = await open(t, `${url}/playground/`)
  await page.waitForSelector('body[data-ready=true]')
  await page.selectOption('#agent', INSPECT)
  t.same(await page.locator('#capability option').evaluateAll((options) => options.map((o) => (o as { value: string }).value)), ['inspect', 'strict'], 'both capabilities are offered')
  await page.selectOption('#capability', 'strict')
  t.same(await page.locator('#inputs-form [name]').evaluateAll((inputs) => inputs.map((i) => (i as { name: string }).name)), ['query', 'bad'], 'the form is the chosen capability\'s')
  await page.click('#tab-json')
  await page.fill('#inputs-json', JSON.stringify({ query: 'chosen' }))
  t.match(await runToEnd(page), { output: { ok: true } }, 'the run used the chosen capability (inspect would have answered the request)')
  const session = await page.locator('#session-id').textContent()
  await page.click('#tab-form')
  await page.fill('#inputs-form [name=query]', 'typed after the run')
  await page.check('#inputs-form [name=bad]')
  await page.reload()
  await page.waitForSelector('body[data-ready=true]')
  t.equal(await page.locator('#agent').inputValue(), INSPECT)
  t.equal(await page.locator('#capability').inputValue(), 'strict')
  t.equal(await page.locator('#inputs-form [name=query]').inputValue(), 'typed after the run')
  t.equal(await page.locator('#inputs-form [name=bad]').isChecked(), true)
  t.equal(await page.locator('#session-id').textContent(), session)
  await page.selectOption('#agent', SCRIPTED)
  t.equal(await page.locator('#capability').isVisible(), false, 'one capability: no menu')
  t.same(errors, [])
})

t.test('markdown from an agent is rendered and sanitised', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { page } = await open(t, `${url}/playground/`)
  await choose(page, SCRIPTED, { script: [{ op: 'markdown', content: '**bold** and <img src="x" onerror="window.pwned = 1"> <script>window.pwned = 2</script> [link](javascript:window.pwned=3)' }] })
  await page.check('input[name=mode][value=sse]') // the scripted agent answers in JSON by default
  await page.click('#run')
  await page.waitForSelector('article.stream[data-closed=done]')
  const block = page.locator('.markdown')
  t.equal(await block.locator('strong').textContent(), 'bold')
  t.equal(await block.locator('script').count(), 0)
  t.equal(await block.locator('[onerror]').count(), 0)
  t.notMatch(await block.innerHTML(), /javascript:/)
  t.equal(await page.evaluate(() => (globalThis as { pwned?: number }).pwned), undefined)
})

t.test('with AUTH_MODE=apikey the page asks for a key, and works with one', { skip }, async (t) => {
  const { app, url } = await listen(t, { WORKERS_PER_TYPE: '0', AUTH_MODE: 'apikey' })
  const { key } = await app.keys.create({ name: 'playground', scopes: ['agents:read', 'assist:invoke'] })
  const { page } = await open(t, `${url}/playground/`)
  await page.locator('#status', { hasText: 'AH_ERR_AUTH_REQUIRED' }).waitFor()
  await page.fill('#api-key', key)
  await page.dispatchEvent('#api-key', 'change')
  await choose(page, AGENTS.echo, { query: 'with a key' })
  await page.check('input[name=mode][value=json]')
  await page.click('#run')
  await page.locator('#answer', { hasText: 'with a key' }).waitFor()
  t.match(JSON.parse(await page.locator('#answer').textContent() ?? '{}'), { output: { echo: 'with a key' } })
})

t.test('a page on another origin: a listed one may call the API (a real preflight), another may not', { skip }, async (t) => {
  const page = createServer((_req, res) => { res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>front end</title>') })
  page.listen(0, '127.0.0.1')
  await once(page, 'listening')
  t.teardown(() => { page.close() })
  const origin = `http://127.0.0.1:${(page.address() as { port: number }).port}`
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0', CORS_ORIGINS: origin })
  // localhost and 127.0.0.1 are different origins: the same page server under another name is not listed
  for (const [from, allowed] of [[origin, true], [origin.replace('127.0.0.1', 'localhost'), false]] as const) {
    const { page: p } = await open(t, from)
    const result = await p.evaluate(async ({ api, agent }) => {
      const session = crypto.randomUUID()
      try {
        const res = await fetch(`${api}/v1/assist`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
          body: JSON.stringify({
            request_id: crypto.randomUUID(),
            context: { session_id: session, agent_id: agent, user: { user_id: 'u1', tier: 'free', locale: 'en-US' }, trace: { trace_id: crypto.randomUUID(), span_id: crypto.randomUUID() }, permissions: [], created_at: new Date().toISOString() },
            payload: { session_id: session, payload: { query: 'from another origin' } }
          })
        })
        return { status: res.status, remaining: res.headers.get('x-ratelimit-remaining'), body: await res.json() as unknown }
      } catch (err) {
        return { failed: String(err) }
      }
    }, { api: url, agent: AGENTS.echo })
    if (allowed) t.match(result, { status: 200, body: { output: { echo: 'from another origin' } } }, `${from} may: ${JSON.stringify(result)}`)
    else t.match(result, { failed: /Failed to fetch/ }, `${from} may not`)
    if (!allowed) continue
    // the streaming snippet of docs/front-ends.md, as pasted into that page
    const snippet = docBlocks('docs/front-ends.md', '## From a page on another origin', 'js')[0]
    t.ok(snippet, 'the guide has the snippet')
    const session = randomUUID()
    const envelope = JSON.stringify({
      request_id: randomUUID(),
      context: { session_id: session, agent_id: AGENTS.echoStream, user: { user_id: 'u1', tier: 'free', locale: 'en-US' }, trace: { trace_id: randomUUID(), span_id: randomUUID() }, permissions: [], created_at: new Date().toISOString() },
      payload: { session_id: session, payload: { query: 'words from the readme', delay_ms: 0 } }
    })
    const shown = await p.evaluate(`(async () => { const envelope = ${envelope}; const shown = []; const show = (p) => shown.push(p);\n${(snippet ?? '').replaceAll('http://127.0.0.1:3000', url)}\nreturn shown })()`) as StreamPacket[]
    t.equal(shown.filter((x) => x.op === 'DELTA').map((x) => x.p).join(''), 'words from the readme ')
    t.equal(shown.at(-1)?.op, 'CLOSE')
  }
})

t.test('PLAYGROUND=false: no page', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', PLAYGROUND: 'false' })
  t.equal((await app.inject('/playground/')).statusCode, 404)
  const on = await build(t, { WORKERS_PER_TYPE: '0' })
  const page = await on.inject('/playground/')
  t.equal(page.statusCode, 200)
  t.match(page.headers['content-security-policy'], /script-src 'self' 'sha256-/)
  t.equal((await on.inject('/playground')).headers.location, '/playground/')
  t.equal((await on.inject('/playground/vendor/nope.js')).statusCode, 404)
  t.equal((await on.inject('/playground/app.js')).headers['x-content-type-options'], 'nosniff', 'the page\'s own files are served nosniff (@fastify/static 10 hands setHeaders the reply)')
  t.match((await on.inject('/playground/vendor/marked.js')).headers['content-type'], 'text/javascript')
  const protocol = await on.inject('/playground/protocol.md')
  t.equal(protocol.statusCode, 200)
  t.match(protocol.body, /^# The wire protocol/)
})

t.test('an unbuilt client is a 503 that says how to build it, not a broken page', async (t) => {
  const app = Fastify()
  app.decorate('config', loadConfig({ DATA_DIR: '/nonexistent' }))
  await app.register(errorHandler)
  await app.register(playgroundRoutes, { clientDir: null })
  t.teardown(async () => { await app.close() })
  t.equal((await app.inject('/playground/')).statusCode, 200)
  const client = await app.inject('/playground/client/index.js')
  t.equal(client.statusCode, 503)
  t.match(client.json(), { code: 'AH_ERR_PLAYGROUND_UNBUILT', message: /npm run build/ })
})

t.test('an unbuilt client is found unbuilt: import.meta.resolve names client/dist/index.js whether or not it exists', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-client-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  const resolve = (): string => pathToFileURL(join(dir, 'dist', 'index.js')).href
  t.equal(clientDir(resolve), undefined, 'no dist/: not built (before, @fastify/static warned that its root must exist)')
  mkdirSync(join(dir, 'dist'))
  t.equal(clientDir(resolve), join(dir, 'dist'), 'built')
  t.equal(clientDir(() => { throw new Error('no such package') }), undefined, 'no package at all')
})
