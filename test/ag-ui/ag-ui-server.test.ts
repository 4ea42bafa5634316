// The AG-UI binding with AG-UI's own client (`@ag-ui/client`'s HttpAgent) against a real server:
// a run's events assembled into messages by the client, every event checked against
// `@ag-ui/core`'s schema, a run that is a CAP run like any other, and the errors before a stream.
import t from 'tap'
import type { HttpAgent, RunAgentParameters } from '@ag-ui/client'
import type { BaseEvent, Message, RunFinishedEvent } from '@ag-ui/core'
import { requestIdOf, sessionIdOf } from '../../src/ag-ui/run-input.js'
import { runKey } from '../../src/assist/run-key.js'
import { AGENTS, listen } from '../helper.js'
import { until } from '../socket.js'
import { agUiAgent, ALICE, KEYS, rawEvents, runInput } from './client.js'

const ENV = { WORKERS_PER_TYPE: '0' }
const user = (content: string): Message => ({ id: `m-${content}`, role: 'user', content })
const types = (events: BaseEvent[]): string[] => events.map((e) => e.type)

/** What HttpAgent fails a run with for an answer that is not 200: its error, with the status and the JSON body. */
interface HttpError { status: number, payload: { code: string, message: string } }

/** Why `run` failed (a run that does not fail rejects). */
async function refusal (run: Promise<unknown>): Promise<HttpError> {
  try {
    await run
  } catch (err) {
    return err as HttpError
  }
  throw new Error('the run was not refused')
}

/** Run `agent` (as runAgent does) for its refusal, kept from the console: HttpAgent logs a run that fails unless a subscriber stops it. */
async function refused (agent: HttpAgent, parameters: RunAgentParameters = {}): Promise<HttpError> {
  let failed: unknown
  // stopPropagation: the run's failure is the subscriber's to handle (HttpAgent then neither logs nor rethrows it)
  await agent.runAgent(parameters, { onRunFailed: ({ error }) => { failed = error; return { stopPropagation: true } as Record<string, unknown> } })
  return await refusal(Promise.reject(failed ?? new Error('the run was not refused')))
}

t.test('echo-stream: HttpAgent assembles the stream\'s words into one assistant message; the run is a CAP run of the thread\'s session', async (t) => {
  const { app, url } = await listen(t, ENV)
  const agent = agUiAgent(url, 'echo-stream')
  agent.messages.push(user('hello streaming world'))
  const runId = 'run-echo-1'
  const result = await agent.runAgent({ runId, forwardedProps: { delay_ms: 0 } })
  const assistant = result.newMessages.filter((m) => m.role === 'assistant')
  t.same(assistant.map((m) => m.content), ['hello streaming world '], 'one assistant message holds every word')
  t.match(result.newMessages.find((m) => m.role === 'reasoning'), { content: 'Processing request...' }, 'the thought is a reasoning message')
  t.equal(agent.messages.at(-1)?.content, 'hello streaming world ', 'the agent\'s conversation ends with it')

  // a run like any other: in the thread's session, its request id made from the runId
  const history = await app.inject({ method: 'GET', url: `/v1/sessions/${sessionIdOf(agent.threadId)}/history` })
  t.equal(history.statusCode, 200, 'the thread is a CAP session')
  t.match(history.json(), { interactions: [{ request_id: requestIdOf(runId), status: 'done' }] }, 'the run is in its history')
})

t.test('showcase: every CAP event type is projected, and every event the server sends is valid AG-UI', async (t) => {
  const { url } = await listen(t, ENV)
  const agent = agUiAgent(url, AGENTS.showcase)
  const events = await rawEvents(agent, runInput(agent, { forwardedProps: { topic: 'CAP' } }))
  t.equal(events[0]?.type, 'RUN_STARTED')
  t.match(events[0], { threadId: agent.threadId, protocolVersion: '1.0' }, 'the thread as the client named it')
  t.match(events.at(-1), { type: 'RUN_FINISHED', outcome: { type: 'success' } })
  t.same([...new Set(types(events))].sort(), [
    'CUSTOM', 'REASONING_END', 'REASONING_MESSAGE_CONTENT', 'REASONING_MESSAGE_END', 'REASONING_MESSAGE_START', 'REASONING_START',
    'RUN_FINISHED', 'RUN_STARTED', 'STEP_FINISHED', 'STEP_STARTED', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END', 'TEXT_MESSAGE_START'
  ], 'thoughts, progress, text and the rest')
  t.same(events.filter((e) => e.type === 'CUSTOM').map((e) => e.name), ['CITATION_BLOCK', 'DATA', 'MEDIA_CAROUSEL'], 'citations, data and media are CUSTOM events named by their CAP type')
  t.match(events.find((e) => e.name === 'DATA'), { value: { type: 'DATA', title: 'Facts', view_hint: 'TABLE', data: { topic: 'CAP' } } }, 'the CAP event as sent')
  t.match(events.filter((e) => e.type.startsWith('STEP_')), [
    { type: 'STEP_STARTED', stepName: 'Gathering sources', metadata: { progress: { status: 'running', progress_percent: 0.25 } } },
    { type: 'STEP_FINISHED', stepName: 'Gathering sources', metadata: { progress: { status: 'complete' } } }
  ], 'progress is a step')
  t.same(events.filter((e) => e.type === 'REASONING_MESSAGE_CONTENT').map((e) => e.delta), ['Planning an answer about CAP', 'Done'], 'each thought a reasoning message')

  // the client assembles it: the markdown block and the stream are assistant messages
  const run = agUiAgent(url, AGENTS.showcase)
  const result = await run.runAgent({ forwardedProps: { topic: 'CAP' } })
  t.same(result.newMessages.filter((m) => m.role === 'assistant').map((m) => m.content), [
    '## CAP\n\nThis answer shows **every** event type a CAP front end renders.\n',
    'Streams carry text deltas.'
  ])
})

t.test('a run sent again (same runId) is joined and sent whole; the same runId with another question is a 409', async (t) => {
  const { app, url } = await listen(t, ENV)
  const agent = agUiAgent(url, 'echo-stream')
  const input = runInput(agent, { messages: [user('once only')], forwardedProps: { delay_ms: 0 } })
  const first = await rawEvents(agent, input)
  const again = await rawEvents(agent, { ...input, state: { changed: true } })
  t.same(again, first, 'the same events: the run is not run twice (state is not part of the ask)')
  const history = await app.inject({ method: 'GET', url: `/v1/sessions/${sessionIdOf(agent.threadId)}/history` })
  t.equal(history.json().total, 1, 'one run in the thread\'s session')
  const conflict = await refusal(rawEvents(agent, { ...input, messages: [user('another question')] }))
  t.match(conflict, { status: 409, payload: { code: 'AH_ERR_REQUEST_CONFLICT' } })
})

t.test('errors before the stream are plain HTTP errors with the catalogue\'s codes, which HttpAgent rejects with', async (t) => {
  const { url } = await listen(t, { ...ENV, AUTH_MODE: 'apikey', API_KEYS: KEYS })
  t.match(await refused(agUiAgent(url, 'echo-stream')), { status: 401, payload: { code: 'AH_ERR_AUTH_REQUIRED' } }, 'no key')
  t.match(await refused(agUiAgent(url, 'nobody', { key: ALICE })), { status: 404, payload: { code: 'AH_ERR_AGENT_NOT_FOUND' } }, 'no such agent')
  t.match(await refused(agUiAgent(url, 'echo-stream', { key: ALICE })), { status: 400, payload: { code: 'AH_ERR_VALIDATION', message: /query/ } }, 'no user message for an agent that needs a query')
  const agent = agUiAgent(url, 'echo-stream', { key: ALICE })
  agent.messages.push(user('twice'))
  t.match(await refused(agent, { forwardedProps: { query: 'twice' } }), { status: 400, payload: { code: 'AH_ERR_VALIDATION', message: /forwardedProps\/query/ } }, 'a query sent twice')
  const image: Message = { id: 'img', role: 'user', content: [{ type: 'image', source: { type: 'url', value: 'https://example.org/a.png' } }] }
  const seeing = agUiAgent(url, 'echo-stream', { key: ALICE })
  seeing.messages.push(image)
  t.match(await refused(seeing), { status: 400, payload: { code: 'AH_ERR_VALIDATION', message: /messages\/0\/content\/0 must be a text part/ } }, 'content the agents cannot take')
  const res = await fetch(`${url}/ag-ui/echo-stream`, { method: 'POST', headers: { authorization: `Bearer ${ALICE}`, 'content-type': 'application/json' }, body: JSON.stringify({ runId: 'r', messages: [] }) })
  t.match([res.status, await res.json()], [400, { code: 'AH_ERR_VALIDATION', message: /threadId/ }], 'a body that is not a RunAgentInput')
})

t.test('a user message\'s text parts are the query; a client that goes away cancels its run, unless it asked the run to go on', async (t) => {
  const { app, url } = await listen(t, ENV)
  const ended = async (threadId: string, runId: string): Promise<string | null | undefined> => (await app.ledger.get(runKey('anonymous', requestIdOf(runId))))?.end_reason
  for (const [policy, end] of [[undefined, 'cancelled'], ['continue', 'done']] as const) {
    const agent = agUiAgent(url, 'echo-stream')
    agent.messages.push({ id: 'parts', role: 'user', content: [{ type: 'text', text: 'one two' }, { type: 'text', text: 'three' }] })
    const runId = `run-${end}`
    let words = 0
    const running = agent.runAgent({ runId, forwardedProps: { delay_ms: 200, ...(policy !== undefined ? { agent_host: { on_disconnect: policy } } : {}) } }, {
      onTextMessageContentEvent: () => { words++ }
    })
    await until('the first word', () => words > 0)
    agent.abortRun()
    await running
    await until(`the run to end ${end}`, async () => await ended(agent.threadId, runId) === end, 10_000)
    t.pass(`${policy ?? 'by default'}: the run ended ${end}`)
  }
  const record = await app.ledger.get(requestIdOf('run-done'))
  t.match(JSON.parse(record?.envelope ?? '{}'), { payload: { payload: { query: 'one two\n\nthree' } } }, 'the text parts, joined by blank lines')
})

t.test('a run cancelled through CAP (POST /v1/assist/{id}/cancel) finishes with AG-UI\'s cancelled outcome', async (t) => {
  const { app, url } = await listen(t, ENV)
  const agent = agUiAgent(url, 'echo-stream')
  agent.messages.push(user('slow words here'))
  const runId = 'run-to-cancel'
  let finished: RunFinishedEvent | undefined
  let words = 0
  const running = agent.runAgent({ runId, forwardedProps: { delay_ms: 1000 } }, {
    onTextMessageContentEvent: () => { words++ },
    onRunFinishedEvent: ({ event }) => { finished = event }
  })
  await until('the first word', () => words > 0)
  const cancel = await app.inject({ method: 'POST', url: `/v1/assist/${requestIdOf(runId)}/cancel` })
  t.equal(cancel.statusCode, 202)
  await running
  t.match(finished, { type: 'RUN_FINISHED', runId, outcome: { type: 'cancelled' } })
})

t.test('the limits of /v1/assist hold: the caller\'s stream quota, and the agent\'s rate limit, refuse a run before it starts', async (t) => {
  const { app, url } = await listen(t, { ...ENV, MAX_STREAMS_PER_CALLER: '1', RATE_LIMIT_AGENT_MAX: '2' })
  const slow = agUiAgent(url, 'echo-stream')
  slow.messages.push(user('one two three'))
  let words = 0
  const running = slow.runAgent({ runId: 'run-slow', forwardedProps: { delay_ms: 1000 } }, { onTextMessageContentEvent: () => { words++ } })
  await until('the first word', () => words > 0)
  const second = agUiAgent(url, 'echo-stream')
  second.messages.push(user('me too'))
  t.match(await refused(second, { forwardedProps: { delay_ms: 0 } }), { status: 429, payload: { code: 'AH_ERR_TOO_MANY_STREAMS' } }, 'one stream at a time')
  t.equal((await app.inject({ method: 'POST', url: `/v1/assist/${requestIdOf('run-slow')}/cancel` })).statusCode, 202)
  await running
  t.same((await agUiAgent(url, 'echo-stream').runAgent({ forwardedProps: { query: 'the second run', delay_ms: 0 } })).newMessages.filter((m) => m.role === 'assistant').map((m) => m.content), ['the second run '], 'the slot is free again')
  t.match(await refused(agUiAgent(url, 'echo-stream'), { forwardedProps: { query: 'a third', delay_ms: 0 } }), { status: 429, payload: { code: 'AH_ERR_RATE_LIMITED' } }, 'the agent\'s runs per window')
})
