import t from 'tap'
import { randomUUID } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { AGENTS, build, envelope, resumeEnvelope as resumeOf } from '../helper.js'
import { assertStreamRules, checkErrorBody, checkServiceResponse, parseSse } from '../sse.js'
import { fakeProvider, openai } from '../fixtures/providers.js'
import { until } from '../socket.js'

const ASK = AGENTS.ask
const ASKER = 'f0000000-0000-4000-8000-0000000000a1'
const INTERRUPT_AGENTS = fileURLToPath(new URL('../fixtures/interrupt-agents/', import.meta.url))
const ANSWER_SCHEMA = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] }

interface WireInterrupt { id: string, kind: string, message: string, schema?: unknown, expires_at: string }

/** The questions of an interrupted stream's INTERRUPT event. */
function interruptsIn (packets: ReturnType<typeof parseSse>['packets']): WireInterrupt[] {
  const event = packets.find((p) => p.op === 'EVENT' && (p.p as { type: string }).type === 'INTERRUPT')
  if (event === undefined) throw new Error(`no INTERRUPT in ${JSON.stringify(packets)}`)
  return (event.p as { interrupts: WireInterrupt[] }).interrupts
}

async function post (app: FastifyInstance, body: unknown, accept = 'application/json', key?: string): Promise<Awaited<ReturnType<FastifyInstance['inject']>>> {
  return await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept, ...(key !== undefined ? { authorization: `Bearer ${key}` } : {}) }, payload: body as Record<string, unknown> })
}

t.test('CAP JSON: the ask agent stops with its question in `interrupts`; an answer in a new request of the session goes on to the result', async (t) => {
  const app = await build(t)
  const first = envelope(ASK, { question: 'Which colour?' })
  const asked = await post(app, first)
  t.equal(asked.statusCode, 200)
  const body = checkServiceResponse(asked.json(), true) as unknown as { interrupts?: WireInterrupt[], output: { events: Array<{ type: string }> } }
  t.equal(body.interrupts?.length, 1)
  const [question] = body.interrupts as WireInterrupt[]
  t.match(question, { kind: 'input', message: 'Which colour?', schema: ANSWER_SCHEMA })
  t.match(question?.id, /^[0-9a-f-]{36}$/)
  t.ok(Date.parse(question?.expires_at ?? '') > Date.now() + 3600_000, 'a day to answer by default')
  t.same(body.output.events.map((e) => e.type), ['THOUGHT_TRACE', 'INTERRUPT'], 'the transcript shows the question')

  const resume = resumeOf(first, [{ interrupt_id: question?.id as string, value: { answer: 'blue' } }])
  const answered = await post(app, resume)
  t.equal(answered.statusCode, 200)
  const result = checkServiceResponse(answered.json())
  t.same(result.output, { question: 'Which colour?', answer: 'blue' })
  t.notOk('interrupts' in result, 'nothing more to ask')

  const again = await post(app, resume)
  t.same([again.statusCode, again.json().output], [200, { question: 'Which colour?', answer: 'blue' }], 'the same request again is the same answer (idempotent by request id)')
  t.equal((await app.stores.audit.list({ action: 'interrupt.answer' })).length, 1, 'one audit row for the answer')
})

t.test('CAP SSE: EVENT INTERRUPT then CLOSE "input_required"; the resumed stream sends only what is new', async (t) => {
  const app = await build(t)
  const first = envelope(ASK, { question: 'Go ahead?', approve: true })
  const asked = await post(app, first, 'text/event-stream')
  const packets = parseSse(asked.body).packets
  assertStreamRules(packets)
  t.same(packets.map((p) => p.op === 'EVENT' ? (p.p as { type: string }).type : p.op), ['THOUGHT_TRACE', 'INTERRUPT', 'CLOSE'])
  t.equal(packets.at(-1)?.p, 'input_required')
  const event = packets[1]?.p as { interrupts: WireInterrupt[] }
  t.match(event.interrupts, [{ kind: 'approval', message: 'Go ahead?' }])
  t.notOk('schema' in (event.interrupts[0] as object), 'an approval has no schema')

  const resume = resumeOf(first, [{ interrupt_id: event.interrupts[0]?.id as string, value: { approved: false, comment: 'not today' } }])
  const resumed = parseSse((await post(app, resume, 'text/event-stream')).body).packets
  assertStreamRules(resumed)
  t.same(resumed.map((p) => p.op === 'EVENT' ? (p.p as { type: string }).type : p.op), ['RESULT', 'CLOSE'], 'the thought was sent before: not again')
  t.same(resumed[0]?.p, { type: 'RESULT', data: { question: 'Go ahead?', approved: false, comment: 'not today' } })
  t.equal(resumed.at(-1)?.p, 'done')
  const audit = await app.stores.audit.list({ action: 'interrupt.reject' })
  t.match(audit, [{ actor: 'anonymous', resource: `run:${first.request_id}`, details: { interrupt_id: event.interrupts[0]?.id, kind: 'approval', answer: { approved: false, comment: 'not today' } } }], 'who, when, what')
})

t.test('answers: a stranger gets 404, a wrong answer 400 (still open), a second answer 409, a malformed resume 400', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey' })
  const owner = (await app.keys.create({ name: 'owner', scopes: ['assist:invoke'] })).key
  const stranger = (await app.keys.create({ name: 'stranger', scopes: ['assist:invoke'] })).key
  const admin = (await app.keys.create({ name: 'root', scopes: ['admin'] })).key
  const first = envelope(ASK, { question: 'Name?' })
  const asked = await post(app, first, 'application/json', owner)
  const id = (asked.json().interrupts as WireInterrupt[])[0]?.id as string

  const foreign = await post(app, resumeOf(first, [{ interrupt_id: id, value: { answer: 'x' } }]), 'application/json', stranger)
  t.equal(foreign.statusCode, 404, 'another key: as if there were nothing')
  const unknown = await post(app, resumeOf(first, [{ interrupt_id: randomUUID(), value: { answer: 'x' } }]), 'application/json', owner)
  t.same([unknown.statusCode, checkErrorBody(unknown.json()).code], [404, 'AH_ERR_INTERRUPT_NOT_FOUND'])

  const wrong = await post(app, resumeOf(first, [{ interrupt_id: id, value: { answer: 42 } }]), 'application/json', owner)
  t.equal(wrong.statusCode, 400)
  t.equal(checkErrorBody(wrong.json()).code, 'AH_ERR_INTERRUPT_ANSWER_INVALID')
  t.match(wrong.json().details.errors, [{ path: '/payload/payload/resume/0/value/answer' }])
  const malformed = await post(app, resumeOf(first, [{ interrupt_id: 'not-a-uuid', value: 1 }]), 'application/json', owner)
  t.same([malformed.statusCode, malformed.json().code], [400, 'AH_ERR_VALIDATION'])
  const twice = await post(app, resumeOf(first, [{ interrupt_id: id, value: { answer: 'a' } }, { interrupt_id: id, value: { answer: 'b' } }]), 'application/json', owner)
  t.same([twice.statusCode, twice.json().code], [400, 'AH_ERR_VALIDATION'], 'one answer per interrupt')

  const right = await post(app, resumeOf(first, [{ interrupt_id: id, value: { answer: 'Ada' } }]), 'application/json', admin)
  t.same([right.statusCode, right.json().output], [200, { question: 'Name?', answer: 'Ada' }], 'still open after the wrong answers; an admin may answer')
  const second = await post(app, resumeOf(first, [{ interrupt_id: id, value: { answer: 'Bob' } }]), 'application/json', owner)
  t.same([second.statusCode, checkErrorBody(second.json()).code], [409, 'AH_ERR_INTERRUPT_CLOSED'])
})

t.test('an expired interrupt is refused with 410, and its run takes no answer after', async (t) => {
  const app = await build(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  const first = envelope(ASKER, { asks: [{ name: 'a', kind: 'input', message: 'quick', expires_in_s: 0.05 }] })
  const asked = parseSse((await post(app, first, 'text/event-stream')).body).packets
  const id = interruptsIn(asked)[0]?.id as string
  await until('the question expired', () => Date.now() > Date.parse(interruptsIn(asked)[0]?.expires_at as string) + 5)
  const late = await post(app, resumeOf(first, [{ interrupt_id: id, value: 'now' }]))
  t.same([late.statusCode, checkErrorBody(late.json()).code], [410, 'AH_ERR_INTERRUPT_EXPIRED'])
  t.match(late.json().message, /expired at/)
  const again = await post(app, resumeOf(first, [{ interrupt_id: id, value: 'now' }]))
  t.equal(again.statusCode, 410, 'still refused')
  t.equal((await app.stores.interrupts.get(`anonymous:${first.request_id}`))?.state ?? (await app.stores.interrupts.inSession(first.context.session_id))[0]?.state, 'expired')
})

t.test('a question left open past its expiry ends its run, even when the answer is to another one', async (t) => {
  const app = await build(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  const first = envelope(ASKER, { parallel: true, asks: [{ name: 'soon', kind: 'input', message: 'soon', expires_in_s: 0.05 }, { name: 'later', kind: 'approval', message: 'later' }] })
  const open = interruptsIn(parseSse((await post(app, first, 'text/event-stream')).body).packets)
  await until('the first question expired', () => Date.now() > Date.parse(open[0]?.expires_at as string) + 5)
  const res = await post(app, resumeOf(first, [{ interrupt_id: open[1]?.id as string, value: { approved: true } }]))
  t.same([res.statusCode, res.json().code], [410, 'AH_ERR_INTERRUPT_EXPIRED'])
  t.match(res.json().message, open[0]?.id as string, 'names the question that expired')
})

t.test('a resume answers one run: two runs\' questions in one request are refused, and an approval\'s answer is { approved, comment? }', async (t) => {
  const app = await build(t)
  const session = randomUUID()
  const one = envelope(ASK, { question: 'One?', approve: true }, { sessionId: session })
  const two = envelope(ASK, { question: 'Two?', approve: true }, { sessionId: session })
  const a = ((await post(app, one)).json().interrupts as WireInterrupt[])[0]?.id as string
  const b = ((await post(app, two)).json().interrupts as WireInterrupt[])[0]?.id as string
  const both = await post(app, resumeOf(one, [{ interrupt_id: a, value: { approved: true } }, { interrupt_id: b, value: { approved: true } }]))
  t.same([both.statusCode, both.json().code], [400, 'AH_ERR_VALIDATION'])
  t.match(both.json().details.errors, [{ path: '/payload/payload/resume/1/interrupt_id' }])
  for (const [value, path] of [[true, '/payload/payload/resume/0/value'], [{ approved: 'yes' }, '/payload/payload/resume/0/value/approved'], [{ approved: true, comment: 3 }, '/payload/payload/resume/0/value/comment'], [{ approved: true, why: 'x' }, '/payload/payload/resume/0/value/why']] as const) {
    const res = await post(app, resumeOf(one, [{ interrupt_id: a, value }]))
    t.same([res.statusCode, res.json().code], [400, 'AH_ERR_INTERRUPT_ANSWER_INVALID'], JSON.stringify(value))
    t.match(res.json().details.errors, [{ path }])
  }
  const yes = await post(app, resumeOf(two, [{ interrupt_id: b, value: { approved: true, comment: 'fine' } }]))
  t.same(yes.json().output, { question: 'Two?', approved: true, comment: 'fine' })
  t.same((await post(app, resumeOf(one, [{ interrupt_id: a, value: { approved: false } }]))).json().output, { question: 'One?', approved: false }, 'the other run still waited')
})

t.test('two questions open at once, answered in the other order: each answer reaches its own question', async (t) => {
  const app = await build(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  const first = envelope(ASKER, {
    parallel: true,
    asks: [{ name: 'colour', kind: 'input', message: 'Colour?', schema: { type: 'string' } }, { name: 'size', kind: 'input', message: 'Size?', schema: { type: 'integer' } }]
  })
  const asked = parseSse((await post(app, first, 'text/event-stream')).body).packets
  assertStreamRules(asked)
  const open = interruptsIn(asked)
  t.same(open.map((i) => i.message), ['Colour?', 'Size?'])
  t.not(open[0]?.id, open[1]?.id, 'each its own id')

  const bySize = parseSse((await post(app, resumeOf(first, [{ interrupt_id: open[1]?.id as string, value: 3 }]), 'text/event-stream')).body).packets
  assertStreamRules(bySize)
  t.equal(bySize.at(-1)?.p, 'input_required', 'one still open: the run asks it again')
  const still = interruptsIn(bySize)
  t.same(still.map((i) => [i.id, i.message]), [[open[0]?.id, 'Colour?']], 'the same question, the same id')
  t.same(bySize.map((p) => p.op === 'EVENT' ? (p.p as { type: string }).type : p.op), ['INTERRUPT', 'CLOSE'], 'the agent waits for both answers: nothing of it runs')

  const done = parseSse((await post(app, resumeOf(first, [{ interrupt_id: open[0]?.id as string, value: 'red' }]), 'text/event-stream')).body).packets
  assertStreamRules(done)
  const result = done.find((p) => (p.p as { type?: string }).type === 'RESULT')?.p as { data: Record<string, unknown> }
  t.same(result.data, { colour: 'red', size: 3 })
  const deltas = done.filter((p) => p.op === 'DELTA').map((p) => p.p)
  t.same(deltas.sort(), [' answered colour', ' answered size'], 'only what came after the answers')
  t.ok(done.filter((p) => p.op === 'EVENT' && (p.p as { type: string }).type === 'STREAM_START').length === 2, 'the streams opened before start again on this run\'s wire when next written')
})

t.test('an agent entered again after the answer calls its backend no more times than without the interrupt', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: openai.text(['fine']) })
  const app = await build(t, { AGENTS_DIR: INTERRUPT_AGENTS, LLM_PROVIDER: 'openai', OPENAI_BASE_URL: `${fake.url}/v1`, OPENAI_API_KEY: 'sk-test', OPENAI_MODEL: 'test-model', LLM_MAX_RETRIES: '0' })
  const first = envelope(ASKER, { backend: true, asks: [{ name: 'q', kind: 'approval', message: 'Send it?' }] })
  const asked = parseSse((await post(app, first, 'text/event-stream')).body).packets
  t.equal(fake.received.length, 1, 'one call before the question')
  const id = interruptsIn(asked)[0]?.id as string
  const done = parseSse((await post(app, resumeOf(first, [{ interrupt_id: id, value: { approved: true } }]), 'text/event-stream')).body).packets
  const result = done.find((p) => (p.p as { type?: string }).type === 'RESULT')?.p as { data: Record<string, unknown> }
  t.same(result.data, { before: 'fine', q: { approved: true }, after: 'fine' }, 'the first call\'s answer was replayed')
  t.equal(fake.received.length, 2, 'two calls in all, as without the question')
})

t.test('a run waiting for an answer survives its server: another app on the same DATA_DIR takes the answer', async (t) => {
  const first = envelope(ASK, { question: 'Still there?' })
  const a = await build(t)
  const id = ((await post(a, first)).json().interrupts as WireInterrupt[])[0]?.id as string
  t.equal(a.runs.size, 0, 'no run is held while it waits')
  await a.close()
  const b = await build(t, { DATA_DIR: a.config.DATA_DIR })
  const res = await post(b, resumeOf(first, [{ interrupt_id: id, value: { answer: 'yes' } }]))
  t.same([res.statusCode, res.json().output], [200, { question: 'Still there?', answer: 'yes' }])
})

t.test('a waiting run can be cancelled by its owner: its question takes no answer after (409), and a stranger gets 404', async (t) => {
  const app = await build(t, { AUTH_MODE: 'apikey' })
  const owner = (await app.keys.create({ name: 'owner', scopes: ['assist:invoke'] })).key
  const stranger = (await app.keys.create({ name: 'stranger', scopes: ['assist:invoke'] })).key
  const first = envelope(ASK, { question: 'Wait?' })
  const id = ((await post(app, first, 'application/json', owner)).json().interrupts as WireInterrupt[])[0]?.id as string
  const cancel = async (key: string) => await app.inject({ method: 'POST', url: `/v1/assist/${first.request_id}/cancel`, headers: { authorization: `Bearer ${key}` } })
  t.equal((await cancel(stranger)).statusCode, 404)
  t.equal((await cancel(owner)).statusCode, 202)
  t.equal((await cancel(owner)).statusCode, 404, 'once only')
  const other = envelope(ASK, { question: 'And this one?' })
  await post(app, other, 'application/json', owner)
  const admin = (await app.keys.create({ name: 'root', scopes: ['admin'] })).key
  const byAdmin = await app.inject({ method: 'POST', url: `/v1/assist/${other.request_id}/cancel`, headers: { authorization: `Bearer ${admin}` } })
  t.equal(byAdmin.statusCode, 202, 'an admin may end another caller\'s waiting run')
  t.match(await app.stores.interrupts.inSession(other.context.session_id), [{ state: 'ended' }])
  t.equal((await app.inject({ method: 'POST', url: `/v1/assist/${other.request_id}/cancel`, headers: { authorization: `Bearer ${admin}` } })).statusCode, 404, 'once only')
  const late = await post(app, resumeOf(first, [{ interrupt_id: id, value: { answer: 'x' } }]), 'application/json', owner)
  t.same([late.statusCode, late.json().code], [409, 'AH_ERR_INTERRUPT_CLOSED'])
  t.match(late.json().message, /its run ended/)
})

t.test('erasing a session erases its runs waiting for an answer (they hold its first request): an answer then finds nothing', async (t) => {
  const app = await build(t)
  const first = envelope(ASK, { question: 'Forget me?' })
  const id = ((await post(app, first)).json().interrupts as WireInterrupt[])[0]?.id as string
  t.equal((await app.inject({ method: 'DELETE', url: `/v1/sessions/${first.context.session_id}` })).statusCode, 204)
  t.same(await app.stores.interrupts.inSession(first.context.session_id), [])
  const res = await post(app, resumeOf(first, [{ interrupt_id: id, value: { answer: 'no' } }]))
  t.same([res.statusCode, res.json().code], [404, 'AH_ERR_INTERRUPT_NOT_FOUND'])
})

t.test('a run whose questions cannot be stored ends with storage_busy (TRANSIENT), never input_required: nothing waits that cannot be answered', async (t) => {
  const app = await build(t)
  const store = app.stores.interrupts
  const save = store.save.bind(store)
  store.save = async () => { throw new Error('disk full') }
  t.teardown(() => { store.save = save })
  const first = envelope(ASK, { question: 'Lost?' })
  const packets = parseSse((await post(app, first, 'text/event-stream')).body).packets
  assertStreamRules(packets)
  t.match(packets.find((p) => p.op === 'ERROR')?.p, { code: 'storage_busy', severity: 'TRANSIENT' })
  t.equal(packets.at(-1)?.p, 'aborted')
  t.same(await store.inSession(first.context.session_id), [])
})

t.test('interrupt() refuses a malformed question: the agent fails, nothing waits', async (t) => {
  const app = await build(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  for (const bad of [{ kind: 'maybe', message: 'x' }, { kind: 'input', message: '' }, { kind: 'approval', message: 'x', schema: {} }, { kind: 'input', message: 'x', schema: { type: 'nope' } }, { kind: 'input', message: 'x', expires_in_s: -1 }]) {
    const res = await post(app, envelope(ASKER, { asks: [{ name: 'a', ...bad }] }))
    t.equal(res.statusCode, 200, JSON.stringify(bad))
    t.notOk('interrupts' in res.json())
    t.match(res.json().output.errors, [{ code: 'agent_failed', severity: 'FATAL' }])
  }
  t.same(await app.stores.interrupts.inSession(randomUUID()), [])
})

t.test('the ask example agent is listed (agents/ask)', async (t) => {
  const app = await build(t)
  const res = await app.inject({ url: `/v1/agents/${ASK}` })
  t.equal(res.statusCode, 200)
  t.equal(res.json().metadata.name, 'ask')
})
