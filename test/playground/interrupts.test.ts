// Heavy: a real browser (Debian's chromium through playwright-core), because what is tested is the
// page: the forms it makes from an interrupt, its focus, and the run it resumes below them.
import t from 'tap'
import { fileURLToPath } from 'node:url'
import type { Page } from 'playwright-core'
import { AgentHostClient, type Interrupt, type ServiceRequest } from '../../client/src/index.js'
import { pageTests } from '../browser.js'
import { AGENTS, listen } from '../helper.js'

/** test/fixtures/interrupt-agents/asker: asks the questions it is given, at once with `parallel`. */
const INTERRUPT_AGENTS = fileURLToPath(new URL('../fixtures/interrupt-agents/', import.meta.url))
const ASKER = 'f0000000-0000-4000-8000-0000000000a1'
const { skip, open } = pageTests(t)

/** Chooses the ask agent with `inputs` in `mode` and runs it. */
async function ask (page: Page, inputs: Record<string, unknown>, mode: 'json' | 'sse'): Promise<void> {
  await page.waitForSelector('body[data-ready=true]')
  await page.selectOption('#agent', AGENTS.ask)
  await page.click('#tab-json')
  await page.fill('#inputs-json', JSON.stringify(inputs))
  await page.check(`input[name=mode][value=${mode}]`)
  await page.click('#run')
}

const resultIn = async (page: Page): Promise<unknown> =>
  JSON.parse(await page.locator('.run').last().locator('.result pre').textContent() ?? 'null')

t.test('JSON: a question becomes a form from its schema, focused; the answer resumes the run and its result shows below', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, errors } = await open(t, `${url}/playground/`)
  await ask(page, { question: 'Which colour?' }, 'json')
  const form = page.locator('.interrupt.input')
  await form.waitFor()
  t.match(await form.locator('.message').textContent(), 'Which colour?')
  t.match(await page.locator('#status').textContent(), /^Waiting for an answer/)
  t.ok(await form.locator('time').getAttribute('datetime'), 'the expiry is shown')
  const field = form.getByLabel('answer *')
  t.equal(await field.getAttribute('type'), 'text', 'a string property is a text input')
  t.equal(await field.evaluate((el: { matches: (selector: string) => boolean }) => el.matches(':focus')), true, 'focus is on the first field')
  t.equal(await field.evaluate((el) => (el as unknown as { required: boolean }).required), true, 'required')
  const session = await page.locator('#session-id').textContent()
  await field.fill('blue')
  await form.getByRole('button', { name: 'Answer' }).click()
  await page.locator('.run').nth(1).locator('.result').waitFor()
  t.same(await resultIn(page), { question: 'Which colour?', answer: 'blue' })
  t.equal(await form.getAttribute('data-answered'), 'true', 'the question is marked answered')
  t.equal(await field.isDisabled(), true, 'and takes no second answer')
  t.match(await page.locator('#status').textContent(), /^Done/)
  t.equal(await page.locator('#session-id').textContent(), session, 'the same session')
  t.same(errors, [])
})

t.test('SSE: an approval shows Approve and Reject with a comment; Reject resumes the stream below with approved false', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, errors } = await open(t, `${url}/playground/`)
  await ask(page, { question: 'Deploy now?', approve: true }, 'sse')
  const form = page.locator('.interrupt.approval')
  await form.waitFor()
  t.equal(await page.locator('.run').first().locator('article.stream').first().getAttribute('data-closed'), 'input_required')
  t.match(await form.textContent(), /Deploy now\?/)
  t.ok(await form.getByRole('button', { name: 'Approve' }).isVisible())
  await form.getByLabel('Comment (optional)').fill('not on a Friday')
  await form.getByRole('button', { name: 'Reject' }).click()
  await page.waitForSelector('.run:nth-child(3) article.stream[data-closed=done]')
  t.same(await resultIn(page), { question: 'Deploy now?', approved: false, comment: 'not on a Friday' })
  t.match(await page.locator('#status').textContent(), /^Done/)
  t.same(errors, [])
})

t.test('a reload shows the open question again; a refused answer shows next to its form: a question answered elsewhere meanwhile is a 409', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page } = await open(t, `${url}/playground/`)
  await ask(page, { question: 'Ship it?', approve: true }, 'sse')
  const form = page.locator('.interrupt.approval')
  await form.waitFor()
  await page.reload()
  await form.waitFor()
  t.match(await page.locator('#status').textContent(), /^Waiting for an answer/, 'a reload shows the open question again')
  // the same question answered meanwhile (from another tab, say), with the client, in the page's session
  const saved = JSON.parse(await page.evaluate(() => (globalThis as unknown as { sessionStorage: { getItem: (k: string) => string } }).sessionStorage.getItem('agent-host.playground.run'))) as { envelope: ServiceRequest, interrupts: Interrupt[] }
  t.match(await new AgentHostClient({ baseUrl: url }).resume(saved.envelope, [{ interrupt_id: saved.interrupts[0]?.id as string, value: { approved: true } }]), { output: { approved: true } })
  await form.getByRole('button', { name: 'Approve' }).click()
  await form.locator('.interrupt-error', { hasText: 'AH_ERR_INTERRUPT_CLOSED' }).waitFor()
  t.equal(await form.locator('.interrupt-error').getAttribute('role'), 'alert', 'announced')
  t.equal(await form.getByRole('button', { name: 'Approve' }).isDisabled(), true, 'a closed question takes no more answers')
  t.equal(await page.locator('.run').count(), 1, 'no run below: nothing was resumed')
})

t.test('every schema gets a form: fields by type, a JSON box for a non-object schema; a wrong answer is a 400 shown by its form, which stays usable', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: INTERRUPT_AGENTS })
  const { page, errors } = await open(t, `${url}/playground/`)
  await page.waitForSelector('body[data-ready=true]')
  await page.selectOption('#agent', ASKER)
  await page.click('#tab-json')
  await page.fill('#inputs-json', JSON.stringify({
    parallel: true,
    asks: [
      { name: 'order', kind: 'input', message: 'How many?', schema: { type: 'object', properties: { size: { type: 'integer', minimum: 1 }, colour: { enum: ['red', 'green'] }, rush: { type: 'boolean' } }, required: ['size'] } },
      { name: 'note', kind: 'input', message: 'A note?', schema: { type: 'string', minLength: 3 } }
    ]
  }))
  await page.click('#run')
  const order = page.locator('.interrupt', { hasText: 'How many?' }).first()
  const note = page.locator('.interrupt', { hasText: 'A note?' }).first()
  await note.waitFor()
  t.equal(await order.getByLabel('size *').getAttribute('type'), 'number', 'integer: a number input, marked required')
  t.equal(await order.getByLabel('colour').evaluate((el: { tagName: string }) => el.tagName), 'SELECT', 'enum: a select')
  t.equal(await order.getByLabel('rush').getAttribute('type'), 'checkbox', 'boolean: a checkbox')
  t.equal(await order.getByLabel('size *').evaluate((el: { matches: (selector: string) => boolean }) => el.matches(':focus')), true, 'focus on the first field')

  const json = note.getByLabel('Answer (JSON)')
  await json.fill('not json')
  await note.getByRole('button', { name: 'Answer' }).click()
  await note.locator('.interrupt-error', { hasText: 'not JSON' }).waitFor()
  t.equal(await json.getAttribute('aria-invalid'), 'true', 'checked before sending')
  await json.fill('"ab"')
  await note.getByRole('button', { name: 'Answer' }).click()
  await note.locator('.interrupt-error', { hasText: 'AH_ERR_INTERRUPT_ANSWER_INVALID' }).waitFor()
  t.match(await note.locator('.interrupt-error li').first().textContent(), '/payload/payload/resume/0/value', 'the server\'s details.errors are listed')
  t.equal(await json.isDisabled(), false, 'a 400: the question is still open and the form usable')
  await json.fill('"abc"')
  await note.getByRole('button', { name: 'Answer' }).click()
  // the run goes on and asks again what is left open: a new form below
  const again = page.locator('.interrupts').nth(1).locator('.interrupt', { hasText: 'How many?' })
  await again.waitFor()
  t.equal(await page.locator('.interrupts').nth(1).locator('.interrupt').count(), 1, 'only the open question')
  await again.getByLabel('size *').fill('3')
  await again.getByLabel('colour').selectOption('green')
  await again.getByLabel('rush').check()
  await again.getByRole('button', { name: 'Answer' }).click()
  await page.waitForSelector('.run:nth-child(5) .result')
  t.same(await resultIn(page), { order: { size: 3, colour: 'green', rush: true }, note: 'abc' })
  t.same(errors.filter((e) => !/status of 400/.test(e)), [], 'no console error but the refused answer\'s request')
})
