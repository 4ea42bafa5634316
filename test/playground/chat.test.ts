// Heavy: a real browser (Debian's chromium through playwright-core), because what is tested is the
// chat page: React and the AI SDK's own useChat in a browser, against the AI SDK binding
// (/ai-sdk/<agent>/chat), under the playground's Content-Security-Policy. The page's bundle is
// made first, as `npm run build` makes it (scripts/build.ts:bundleChatPage).
import t from 'tap'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import type { Page } from 'playwright-core'
import { bundleChatPage } from '../../scripts/build.js'
import { loadConfig } from '../../src/config.js'
import errorHandler from '../../src/plugins/error-handler.js'
import playgroundRoutes from '../../src/routes/playground.js'
import { pageTests } from '../browser.js'
import { FIXTURE_AGENTS_DIR, listen } from '../helper.js'
import { until } from '../socket.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
/** test/fixtures/interrupt-agents/asker: asks the questions it is given (`asks`), one after another. */
const INTERRUPT_AGENTS = fileURLToPath(new URL('../fixtures/interrupt-agents/', import.meta.url))

const { skip, open } = pageTests(t)
t.before(async () => { if (skip === false) await bundleChatPage(ROOT) })

const words = (n: number): string => Array.from({ length: n }, (_, i) => `w${i + 1}`).join(' ')

/** Chooses `agent` with `args` (the body fields) and sends `text`. */
async function send (page: Page, agent: string, args: Record<string, unknown>, text: string): Promise<void> {
  await page.waitForSelector('body[data-ready=true]')
  await page.selectOption('#agent', agent)
  await page.fill('#args', JSON.stringify(args))
  await page.fill('#message', text)
  await page.click('#send')
}

/** The assistant's text: its text parts' markdown, as read. */
const answerText = async (page: Page): Promise<string> =>
  (await page.locator('.message.assistant .text .markdown').allTextContents()).join('').trim()

t.test('the chat page streams an answer with the AI SDK\'s useChat, loading nothing from elsewhere and breaking no CSP rule', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, requests, errors } = await open(t, `${url}/playground/chat`)
  // a violation the page catches (zod's probe for eval, which playground/chat/csp.js turns off) logs nothing, but fires this event
  await page.addInitScript(() => {
    const seen: string[] = []
    Object.assign(globalThis, { violations: seen })
    const target = globalThis as unknown as { addEventListener: (type: string, listener: (event: { effectiveDirective: string, blockedURI: string }) => void) => void }
    target.addEventListener('securitypolicyviolation', (event) => { seen.push(`${event.effectiveDirective} ${event.blockedURI}`) })
  })
  await page.reload()
  const posted = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/ai-sdk/echo-stream/chat'))
  await send(page, 'echo-stream', { delay_ms: 250 }, 'one two three four')
  t.match(JSON.parse((await posted).postData() ?? '{}'), { trigger: 'submit-message', delay_ms: 250, messages: [{ role: 'user', parts: [{ type: 'text', text: 'one two three four' }] }] }, 'DefaultChatTransport\'s body, with the arguments as body fields')
  await page.locator('.message.assistant .text', { hasText: 'one' }).waitFor()
  t.equal(await page.locator('.message.assistant[data-end-reason]').count(), 0, 'the first words show before the run ends')
  await page.waitForSelector('.message.assistant[data-end-reason=done]')
  t.equal(await answerText(page), 'one two three four')
  t.equal(await page.locator('.message.assistant .text h3').textContent(), 'Echo Response', 'under its stream\'s title')
  t.match(await page.locator('.message.assistant .reasoning').textContent(), /Processing request/, 'the thought shows as reasoning')
  t.equal(await page.locator('.message.user .text').textContent(), 'one two three four\n', 'the question')
  t.equal(await page.locator('#status').textContent(), 'Ready')
  t.equal(await page.locator('a[href="/playground/"]').count(), 1, 'a link back to the playground')
  t.same(requests.filter((r) => !r.startsWith(url)), [], 'nothing loaded from anywhere else')
  t.same(errors, [], 'no console errors')
  t.same(await page.evaluate(() => (globalThis as unknown as { violations: string[] }).violations), [], 'no CSP violation')
})

t.test('a reload in the middle of an answer resumes it: the whole answer once, nothing twice', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, errors } = await open(t, `${url}/playground/chat`)
  await send(page, 'echo-stream', { delay_ms: 150 }, words(15))
  await page.locator('.message.assistant .text', { hasText: 'w3' }).waitFor()
  const chat = await page.locator('#chat-id').textContent()
  const kept = JSON.parse(await page.evaluate(() => (globalThis as unknown as { sessionStorage: { getItem: (k: string) => string | null } }).sessionStorage.getItem('agent-host.playground.chat') ?? '{}')) as { messages: Array<{ role: string, parts: Array<{ text?: string }> }> }
  const last = kept.messages.at(-1)
  t.ok(last?.role === 'assistant' && last.parts.some((part) => /w1 w2/.test(part.text ?? '')), 'the answer so far is kept, so the replay must replace it')
  const resumed = page.waitForResponse((r) => r.url().endsWith(`/ai-sdk/echo-stream/chat/${chat ?? ''}/stream`))
  await page.reload()
  t.equal((await resumed).status(), 200, 'useChat({ resume: true }) asked for the running run')
  await page.waitForSelector('.message.assistant[data-end-reason=done]', { timeout: 30_000 })
  t.equal(await answerText(page), words(15))
  t.equal(await page.locator('.message.user').count(), 1, 'one question')
  t.equal(await page.locator('.message.assistant').count(), 1, 'one answer')
  t.equal(await page.locator('.message.assistant .reasoning').count(), 1, 'its thought once')
  t.equal(await page.locator('#chat-id').textContent(), chat, 'the same chat')
  t.equal(await page.locator('#agent').inputValue(), 'echo-stream', 'with the same agent')
  t.same(errors, [])
})

t.test('Stop cancels the run on the server (recorded cancelled) and stops the words', { skip }, async (t) => {
  const { app, url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, errors } = await open(t, `${url}/playground/chat`)
  await send(page, 'echo-stream', { delay_ms: 200 }, words(40))
  await page.locator('.message.assistant .text', { hasText: 'w2' }).waitFor()
  const requestId = await page.locator('.message.assistant').getAttribute('data-request-id') ?? ''
  t.match(requestId, /^[0-9a-f-]{36}$/, 'the message names its run (the start chunk\'s metadata)')
  const stopped = page.waitForResponse((r) => r.url().endsWith('/stop'))
  await page.click('#stop')
  t.equal((await stopped).status(), 202, 'the stop endpoint cancelled the run')
  await until('the run is recorded cancelled', async () => (await app.ledger.get(requestId))?.end_reason === 'cancelled', 10_000)
  await page.locator('#status', { hasText: 'Ready' }).waitFor()
  t.equal(await page.locator('#stop').isDisabled(), true)
  t.ok((await answerText(page)).split(' ').length < 40, 'it stopped early')
  t.same(errors, [])
})

t.test('an agent\'s questions are answered in place: Approve, an input\'s form, a JSON box, and the run goes on with every answer', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: INTERRUPT_AGENTS })
  const { page, errors } = await open(t, `${url}/playground/chat`)
  const asks = [
    { name: 'ship', kind: 'approval', message: 'Ship it?' },
    { name: 'colour', kind: 'input', message: 'Which colour?', schema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] } },
    { name: 'note', kind: 'input', message: 'A note?', schema: { type: 'string', minLength: 3 } }
  ]
  await send(page, 'asker', { asks }, 'go')
  const approval = page.locator('.question.approval')
  await approval.getByRole('button', { name: 'Approve' }).waitFor()
  t.match(await approval.locator('.message').textContent(), 'Ship it?')
  t.ok(await approval.getByRole('button', { name: 'Reject' }).isVisible(), 'and Reject')
  await approval.getByLabel('Comment (optional)').fill('fine')
  await approval.getByRole('button', { name: 'Approve' }).click()
  const input = page.locator('.question.input')
  const field = input.getByLabel('answer *')
  await field.waitFor()
  t.equal(await approval.locator('.outcome').textContent(), 'Approved', 'the approval is settled')
  t.equal(await field.evaluate((el: { matches: (selector: string) => boolean }) => el.matches(':focus')), true, 'the form\'s first field has the focus')
  await field.fill('blue')
  await input.getByRole('button', { name: 'Answer' }).click()
  // a schema that is no object of plain fields: the answer is typed as JSON, checked before it is sent
  const note = page.locator('.question.input', { hasText: 'A note?' })
  const json = note.getByLabel('Answer (JSON)')
  await json.fill('not json')
  await note.getByRole('button', { name: 'Answer' }).click()
  await note.locator('[role=alert]', { hasText: 'not JSON' }).waitFor()
  t.equal(await json.getAttribute('aria-invalid'), 'true')
  // an answer the schema refuses: the server's 400 shows, and the question is asked again
  await json.fill('"ab"')
  await note.getByRole('button', { name: 'Answer' }).click()
  await page.locator('#chat-error', { hasText: 'AH_ERR_INTERRUPT_ANSWER_INVALID' }).waitFor()
  t.match(await page.locator('#chat-error').textContent(), 'must NOT have fewer than 3 characters', 'why, from the server')
  t.match(await note.textContent(), 'answer again', 'the question is asked again')
  await json.fill('"hello"')
  await note.getByRole('button', { name: 'Answer' }).click()
  await page.waitForSelector('.message.assistant[data-end-reason=done]')
  t.same(JSON.parse(await page.locator('.data.result pre').textContent() ?? 'null'), { ship: { approved: true, comment: 'fine' }, colour: { answer: 'blue' }, note: 'hello' }, 'the agent went on with every answer')
  t.equal(await input.first().locator('.outcome').textContent(), 'Answered: {"answer":"blue"}')
  t.equal(await page.locator('.message.assistant').count(), 1, 'one assistant message, continued')
  t.equal(await page.locator('#chat-error').count(), 0, 'the error went with the answer taken')
  t.same(errors.filter((e) => !/status of 400/.test(e)), [], 'no console error but the refused answer\'s')
})

t.test('Reject with a comment: the approval is denied and the agent goes on with the rejection', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: INTERRUPT_AGENTS })
  const { page, errors } = await open(t, `${url}/playground/chat`)
  await send(page, 'asker', { asks: [{ name: 'ship', kind: 'approval', message: 'Ship it?' }] }, 'go')
  const approval = page.locator('.question.approval')
  await approval.getByLabel('Comment (optional)').fill('not today')
  await approval.getByRole('button', { name: 'Reject' }).click()
  await page.waitForSelector('.message.assistant[data-end-reason=done]')
  t.equal(await approval.getAttribute('data-state'), 'output-denied', 'a denied tool call')
  t.equal(await approval.locator('.outcome').textContent(), 'Rejected')
  t.equal(await approval.getByRole('button', { name: 'Approve' }).count(), 0, 'answered: no more buttons')
  t.same(JSON.parse(await page.locator('.data.result pre').textContent() ?? 'null'), { ship: { approved: false, comment: 'not today' } })
  t.same(errors, [])
})

t.test('every kind of part: reasoning, progress, markdown, data folded as JSON, a file, citations as links', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, errors } = await open(t, `${url}/playground/chat`)
  await send(page, 'showcase', { topic: 'hosting' }, 'show me')
  const answer = page.locator('.message.assistant[data-end-reason=done]')
  await answer.waitFor()
  t.same(await answer.locator('.reasoning p').allTextContents(), ['Planning an answer about hosting', 'Done'], 'each thought')
  t.equal(await answer.locator('.progress').getAttribute('data-status'), 'complete', 'one progress line, updated in place')
  t.equal(await answer.locator('.markdown strong').textContent(), 'every', 'markdown is rendered')
  const facts = answer.locator('details.data', { hasText: 'Facts' })
  t.equal(await facts.getAttribute('open'), null, 'a data part is folded')
  t.match(JSON.parse(await facts.locator('pre').textContent({ timeout: 1000 }) ?? 'null'), { view_hint: 'TABLE', data: { topic: 'hosting' } }, 'its JSON')
  t.equal(await answer.locator('.file a').getAttribute('href'), 'https://example.org/diagram.png', 'a file on another origin is a link (the CSP admits no image from there)')
  t.same(await answer.locator('.sources a').evaluateAll((links: Array<{ getAttribute: (name: string) => string | null, textContent: string | null }>) => links.map((a) => [a.getAttribute('href'), a.textContent, a.getAttribute('rel')])), [
    ['https://example.org/cap', 'Coreason Agent Protocol', 'noopener noreferrer'],
    ['https://html.spec.whatwg.org/multipage/server-sent-events.html', 'Server-sent events', 'noopener noreferrer']
  ], 'the citations, as links')
  t.same(errors, [])
})

t.test('errors: a refused request shows the server\'s code; an agent\'s error shows after what it wrote; markdown is sanitised', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const { page, errors } = await open(t, `${url}/playground/chat`)
  await send(page, 'scripted', { script: 'not an array' }, 'go')
  await page.locator('#chat-error', { hasText: 'AH_ERR_VALIDATION' }).waitFor()
  t.equal(await page.locator('#chat-error').getAttribute('role'), 'alert', 'announced')
  t.equal(await page.locator('#status').getAttribute('data-status'), 'error')
  await page.click('#chat-error button')
  t.equal(await page.locator('#chat-error').count(), 0, 'dismissed')

  await page.fill('#args', '{ not json')
  await page.fill('#message', 'again')
  await page.locator('[role=alert]', { hasText: 'Arguments are not JSON' }).waitFor()
  t.equal(await page.locator('#send').isDisabled(), true, 'arguments that are not a JSON object are not sent')

  const script = [
    { op: 'markdown', content: '**bold** <img src="x" onerror="window.pwned = 1"> [link](javascript:window.pwned=2)' },
    { op: 'error', message: 'the tool broke', recoverable: false }
  ]
  await page.fill('#args', JSON.stringify({ script }))
  await page.fill('#message', 'again')
  await page.click('#send')
  await page.locator('#chat-error', { hasText: 'the tool broke' }).waitFor()
  const markdown = page.locator('.message.assistant .markdown')
  t.equal(await markdown.locator('strong').textContent(), 'bold', 'what it wrote before stays')
  t.equal(await markdown.locator('[onerror]').count(), 0)
  t.notMatch(await markdown.innerHTML(), /javascript:/)
  t.equal(await page.evaluate(() => (globalThis as { pwned?: number }).pwned), undefined)
  // the refused request, and the sanitised <img src="x"> (its onerror gone), which the browser still asks for
  t.same(errors.filter((e) => !/status of (400|404)/.test(e)), [], 'no other console error')
})

t.test('with AUTH_MODE=apikey the page asks for a key, and chats with one (a bearer token)', { skip }, async (t) => {
  const { app, url } = await listen(t, { WORKERS_PER_TYPE: '0', AUTH_MODE: 'apikey' })
  const { key } = await app.keys.create({ name: 'chat', scopes: ['agents:read', 'assist:invoke'] })
  const { page } = await open(t, `${url}/playground/chat`)
  await page.locator('[role=alert]', { hasText: 'AH_ERR_AUTH_REQUIRED' }).waitFor()
  await page.fill('#api-key', key)
  await page.press('#api-key', 'Enter')
  const posted = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/ai-sdk/echo-stream/chat'))
  await send(page, 'echo-stream', { delay_ms: 0 }, 'with a key')
  t.equal((await posted).headers().authorization, `Bearer ${key}`)
  await page.waitForSelector('.message.assistant[data-end-reason=done]')
  t.equal(await answerText(page), 'with a key')
})

t.test('an unbuilt chat page: the page, and a 503 for its bundle that says how to build it', async (t) => {
  const app = Fastify()
  app.decorate('config', loadConfig({ DATA_DIR: '/nonexistent' }))
  await app.register(errorHandler)
  await app.register(playgroundRoutes, { clientDir: null, bundleDir: null })
  t.teardown(async () => { await app.close() })
  const page = await app.inject('/playground/chat')
  t.equal(page.statusCode, 200)
  t.match(page.headers['content-security-policy'], /script-src 'self' 'sha256-[^']+'; .*connect-src 'self'/)
  t.match(page.body, '<script type="module" src="/playground/build/chat.js">')
  t.match((await app.inject('/playground/')).body, '<a href="/playground/chat">', 'the playground links to it')
  const bundle = await app.inject('/playground/build/chat.js')
  t.equal(bundle.statusCode, 503)
  t.match(bundle.json(), { code: 'AH_ERR_PLAYGROUND_UNBUILT', message: /npm run build/ })
})
