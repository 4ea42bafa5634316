// Heavy: a real browser (Debian's chromium), because what is tested is Swagger UI's own page running
// the request interceptor we hand it; launched once for the file.
import t from 'tap'
import type { Browser, Page } from 'playwright-core'
import { ASSIST_EXAMPLE } from '../../src/protocol/openapi.js'
import { freshRequestId } from '../../src/plugins/swagger.js'
import { launchBrowser, openPage, skipWithoutBrowser as skip } from '../browser.js'
import { listen } from '../helper.js'

let browser: Browser | undefined
t.before(async () => { if (skip === false) browser = await launchBrowser() })
t.teardown(async () => { await browser?.close() })

interface Sent { requestId: string, status: number, body: { request_id?: string, output?: { echo: string, calls: number }, code?: string } }

/** Clicks Execute on POST /v1/assist and returns what was sent and what came back. */
async function execute (page: Page): Promise<Sent> {
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/v1/assist'),
    page.click('#operations-assist-assist button.execute')
  ])
  const sent = JSON.parse(response.request().postData() ?? '{}') as { request_id: string }
  return { requestId: sent.request_id, status: response.status(), body: await response.json() }
}

t.test('Swagger UI: Execute on the example of POST /v1/assist sends a new request_id each time, so each try is a new run', { skip }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const { page, errors, requests } = await openPage(t, browser as Browser, `${url}/docs`)
  await page.click('#operations-assist-assist .opblock-summary')
  await page.click('#operations-assist-assist .try-out__btn')
  const body = page.locator('#operations-assist-assist textarea.body-param__text')
  t.equal(JSON.parse(await body.inputValue()).request_id, ASSIST_EXAMPLE.request_id, 'the example shows its placeholder id')

  // regression: the example's fixed request_id made a second Execute replay the first answer
  const first = await execute(page)
  const second = await execute(page)
  t.match(first, { status: 200, body: { output: { echo: 'Hello from Swagger UI', calls: 1 } } })
  t.match(second, { status: 200, body: { output: { calls: 2 } } }, 'a second run in the example session, not the first one replayed')
  t.not(first.requestId, ASSIST_EXAMPLE.request_id)
  t.not(second.requestId, first.requestId)
  t.equal(first.body.request_id, first.requestId, 'the answer names the id that was sent')

  // regression: an edited query with the example's id was a 409 AH_ERR_REQUEST_CONFLICT
  await body.fill(JSON.stringify({ ...ASSIST_EXAMPLE, payload: { ...ASSIST_EXAMPLE.payload, payload: { query: 'edited' } } }))
  t.match(await execute(page), { status: 200, body: { output: { echo: 'edited', calls: 3 } } }, 'an edited query runs')

  const mine = '0c6f4e2a-9b1d-4f3e-8a57-2d9e6b1c4aff'
  await body.fill(JSON.stringify({ ...ASSIST_EXAMPLE, request_id: mine }))
  t.match(await execute(page), { requestId: mine, status: 200, body: { request_id: mine } }, 'an id typed in is sent as it is')
  t.match(await execute(page), { requestId: mine, status: 200, body: { output: { calls: 4 } } }, 'and sent again, joins that run (a replay)')

  t.same(requests.filter((r) => !r.startsWith(url)), [], 'nothing loaded from anywhere else')
  t.same(errors, [])
})

t.test('freshRequestId: only the example\'s placeholder on POST /v1/assist is replaced, and not on a resume', async (t) => {
  const example = JSON.stringify(ASSIST_EXAMPLE)
  const replaced = freshRequestId({ url: 'http://127.0.0.1:3000/v1/assist', method: 'POST', headers: {}, body: example })
  const id = (JSON.parse(replaced.body as string) as { request_id: string }).request_id
  t.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
  t.not(id, ASSIST_EXAMPLE.request_id)
  t.same({ ...JSON.parse(replaced.body as string), request_id: ASSIST_EXAMPLE.request_id }, ASSIST_EXAMPLE, 'nothing else changed')
  const resume = { url: 'http://127.0.0.1:3000/v1/assist', method: 'POST', headers: { 'last-event-id': 'a4b3c2d1-0e9f-4a8b-9c7d-6e5f4a3b2c01' }, body: example }
  t.equal(freshRequestId(resume).body, example, 'a resume (Last-Event-ID) sends the envelope it resumes')
  for (const other of [
    { url: 'http://127.0.0.1:3000/v1/tasks', method: 'POST', headers: {}, body: example },
    { url: 'http://127.0.0.1:3000/docs/json', method: 'GET', headers: {} },
    { url: 'http://127.0.0.1:3000/v1/assist', method: 'POST', headers: {}, body: '{not json' }
  ]) t.equal(freshRequestId({ ...other }).body, other.body, `${other.method} ${other.url} untouched`)
})
