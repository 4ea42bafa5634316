// The AI SDK UI message stream binding with the AI SDK's own client code against a real server:
// DefaultChatTransport (sendMessages, reconnectToStream), readUIMessageStream, and the chat logic
// useChat runs (AbstractChat) for what a useChat user sees across a dropped connection, a stop and
// questions. The mapping itself, packet by packet: ui-chunks.test.ts.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai'
import { runKey } from '../../src/assist/run-key.js'
import { chatSessionId } from '../../src/ai-sdk/chat-envelope.js'
import { AiSdkChats, DONE } from '../../src/ai-sdk/chat-runs.js'
import { AGENTS, FIXTURE_AGENTS_DIR, listen, SCRIPTED } from '../helper.js'
import { until } from '../socket.js'
import { ALICE, BOB, KEYS } from '../a2a/client.js'
import { droppableFetch, readAll, TestChat, textOf, transport, userMessage } from './client.js'

const ENV = { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' }
const ASKER = 'f0000000-0000-4000-8000-0000000000a1'
const INTERRUPT_AGENTS = fileURLToPath(new URL('../fixtures/interrupt-agents/', import.meta.url))

/** The words the echo-stream agent streams back, as it writes them (each followed by a space). */
const echoed = (words: string[]): string => words.map((w) => `${w} `).join('')
const words = (n: number): string[] => Array.from({ length: n }, (_, i) => `w${i}`)

/** The metadata the stream's `start` and `finish` give the message. */
interface Meta { request_id: string, session_id: string, agent: string, end_reason?: string }
const metaOf = (message: UIMessage | undefined): Meta => message?.metadata as Meta

t.test('the echo-stream agent\'s words, read by the AI SDK\'s transport and stream reader, are one assistant message; the run is a run like any other', async (t) => {
  const { app, url } = await listen(t, ENV)
  let headers: Headers | undefined
  const recording: typeof fetch = async (input, init) => {
    const response = await fetch(input, init)
    headers = response.headers
    return response
  }
  const chatId = `chat-${randomUUID()}`
  const sent = words(6)
  const stream = await transport(url, 'echo-stream', { body: { delay_ms: 0 }, fetch: recording }).sendMessages({
    chatId, messages: [userMessage(sent.join(' '))], trigger: 'submit-message', messageId: undefined, abortSignal: undefined
  })
  const { chunks, message } = await readAll(stream)
  t.equal(headers?.get('x-vercel-ai-ui-message-stream'), 'v1', 'the UI message stream header')
  t.match(headers?.get('content-type'), /^text\/event-stream/)
  t.equal(message?.role, 'assistant')
  t.equal(textOf(message), echoed(sent), 'every word once, in order, in one text part')
  t.same(message?.parts.map((p) => p.type), ['step-start', 'reasoning', 'text'], 'the thought, then the streamed text')
  t.match(message?.parts[1], { type: 'reasoning', text: 'Processing request...', state: 'done' })
  t.match(message?.parts[2], { type: 'text', state: 'done', providerMetadata: { agentHost: { title: 'Echo Response' } } })
  t.same(chunks.map((c) => c.type), ['start', 'start-step', 'reasoning-start', 'reasoning-delta', 'reasoning-end', 'text-start', ...sent.map(() => 'text-delta'), 'text-end', 'finish-step', 'finish'])
  const meta = metaOf(message)
  t.match(meta, { session_id: chatSessionId(chatId), agent: 'echo-stream', end_reason: 'done' }, 'start and finish name the run')
  t.equal(message?.id, meta.request_id, 'the message\'s id is the run\'s request id')
  t.match(chunks.at(-1), { type: 'finish', finishReason: 'stop' })

  const record = await app.ledger.get(runKey('anonymous', meta.request_id))
  t.match(record, { state: 'ended', end_reason: 'done', agent_id: AGENTS.echoStream, session_id: meta.session_id }, 'the run store has it')
  const history = await app.inject({ url: `/v1/sessions/${meta.session_id}/history` })
  t.equal(history.statusCode, 200, 'the chat is a CAP session')
  t.match(JSON.stringify(history.json()), sent.join(' '), 'its history has the question')
  const overCap = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream', 'last-event-id': `${record?.main_stream_id ?? ''}:1` }, payload: JSON.parse(record?.envelope ?? '{}') as Record<string, unknown> })
  t.equal(overCap.statusCode, 200, 'resumable over CAP, by its envelope and a cursor')
  t.match(overCap.body, /"p":"w5 "/, 'the journal has its words')

  // written as the AI SDK's own servers write it (JsonToSseTransformStream): data lines only, [DONE] last
  const raw = await app.inject({ method: 'POST', url: '/ai-sdk/echo-stream/chat', payload: { id: chatId, messages: [userMessage('raw', 'u-raw')], delay_ms: 0 } })
  t.equal(raw.headers['x-vercel-ai-ui-message-stream'], 'v1')
  t.match(raw.body, /^data: \{"type":"start",/)
  t.ok(raw.body.endsWith('\n\ndata: [DONE]\n\n'), 'data: [DONE] last')
  t.notMatch(raw.body, /^(event|id|retry):/m, 'no event names, ids or retry')
})

t.test('a message sent again joins its run (the same message, from the journal); regenerate is a new run', async (t) => {
  const { url } = await listen(t, ENV)
  const chat = transport(url, AGENTS.echoStream, { body: { delay_ms: 0 } })
  const chatId = randomUUID()
  const question = userMessage('one two three', 'u-1')
  const send = async (trigger: 'submit-message' | 'regenerate-message'): Promise<UIMessage | undefined> =>
    (await readAll(await chat.sendMessages({ chatId, messages: [question], trigger, messageId: undefined, abortSignal: undefined }))).message
  const first = await send('submit-message')
  const again = await send('submit-message')
  t.same(again, first, 'joined: the same message, with the same id')
  const regenerated = await send('regenerate-message')
  t.not(regenerated?.id, first?.id, 'regenerated: another run')
  t.equal(textOf(regenerated), 'one two three ')
})

t.test('a dropped connection, resumed as useChat resumes it: the whole message once, no gap, no duplicate', async (t) => {
  const { url } = await listen(t, ENV)
  const network = droppableFetch()
  const errors: Error[] = []
  const chat = new TestChat({ id: `chat-${randomUUID()}`, transport: transport(url, 'echo-stream', { body: { delay_ms: 40 }, fetch: network.fetch }), onError: (err) => { errors.push(err) } })
  const sent = words(30)
  const sending = chat.sendMessage({ text: sent.join(' ') })
  await until('a few words arrived', () => textOf(chat.messages[1]).split(' ').length > 3)
  network.drop()
  await sending
  t.equal(chat.status, 'error', 'the chat saw the connection drop')
  t.match(errors[0]?.message, /network/)
  const partial = textOf(chat.messages[1])
  t.ok(partial.length < echoed(sent).length, 'with part of the answer')

  await chat.resumeStream()
  t.equal(chat.status, 'ready')
  t.equal(chat.messages.length, 2, 'still one question and one answer')
  const [, answer] = chat.messages
  t.equal(textOf(answer), echoed(sent), 'every word once, in order')
  t.same(answer?.parts.map((p) => p.type), ['step-start', 'reasoning', 'text'], 'no part twice')
  t.equal(metaOf(answer).end_reason, 'done')

  await chat.resumeStream()
  t.equal(chat.status, 'ready', 'nothing runs any more: the resume is a 204, and the chat stays as it is')
  t.equal(textOf(chat.messages[1]), echoed(sent))
})

t.test('stop during a resumed stream ends the run: cancelled in the run store, the stream ends with abort', async (t) => {
  const { app, url } = await listen(t, ENV)
  const network = droppableFetch()
  const chatId = `chat-${randomUUID()}`
  const chat = new TestChat({ id: chatId, transport: transport(url, 'echo-stream', { body: { delay_ms: 50 }, fetch: network.fetch }) })
  const sending = chat.sendMessage({ text: words(200).join(' ') })
  await until('a few words arrived', () => textOf(chat.messages[1]).split(' ').length > 2)
  network.drop()
  await sending

  const resumed = await transport(url, 'echo-stream').reconnectToStream({ chatId, abortSignal: undefined })
  if (resumed === null) throw new Error('the run should still be running')
  const reading = readAll(resumed)
  const stop = await fetch(`${url}/ai-sdk/echo-stream/chat/${encodeURIComponent(chatId)}/stop`, { method: 'POST' })
  t.equal(stop.status, 202)
  const { request_id: requestId } = await stop.json() as { request_id: string }
  const { chunks, message } = await reading
  t.same(chunks.slice(-3).map((c) => c.type), ['finish-step', 'abort', 'finish'], 'the resumed stream ends: aborted')
  t.match(chunks.at(-1), { finishReason: 'other', messageMetadata: { end_reason: 'cancelled', request_id: requestId } })
  t.ok(textOf(message).length > 0 && textOf(message).length < echoed(words(200)).length, 'with what was streamed before')
  await until('the run is recorded', async () => (await app.ledger.get(requestId))?.state === 'ended')
  t.match(await app.ledger.get(requestId), { end_reason: 'cancelled' })

  const none = await fetch(`${url}/ai-sdk/echo-stream/chat/${encodeURIComponent(chatId)}/stop`, { method: 'POST' })
  t.equal(none.status, 404, 'nothing left to stop')
  t.equal((await none.json() as { code: string }).code, 'AH_ERR_RUN_NOT_FOUND')
  t.equal(await transport(url, 'echo-stream').reconnectToStream({ chatId, abortSignal: undefined }), null, 'nothing to resume: 204')
})

t.test('auth on: another key can neither resume nor stop a chat\'s run; its owner can; errors before the stream are plain HTTP errors', async (t) => {
  const { app, url } = await listen(t, { ...ENV, AUTH_MODE: 'apikey', API_KEYS: KEYS })
  const chatId = `chat-${randomUUID()}`
  const alice = transport(url, 'echo-stream', { key: ALICE, body: { delay_ms: 50 } })
  const bob = transport(url, 'echo-stream', { key: BOB })
  const controller = new AbortController()
  const stream = await alice.sendMessages({ chatId, messages: [userMessage(words(200).join(' '))], trigger: 'submit-message', messageId: undefined, abortSignal: controller.signal })
  const reader = stream.getReader()
  const { value: start } = await reader.read()
  t.match(start, { type: 'start', messageMetadata: { agent: 'echo-stream' } })
  controller.abort()
  await reader.cancel().catch(() => {})

  t.equal(await bob.reconnectToStream({ chatId, abortSignal: undefined }), null, 'another key: nothing of its own runs in that chat')
  const stop = await fetch(`${url}/ai-sdk/echo-stream/chat/${chatId}/stop`, { method: 'POST', headers: { authorization: `Bearer ${BOB}` } })
  t.equal(stop.status, 404, 'another key cannot stop it')
  t.equal(app.runs.size, 1, 'still running')

  const resumed = await alice.reconnectToStream({ chatId, abortSignal: undefined })
  t.ok(resumed !== null, 'its owner resumes it')
  const reading = readAll(resumed as ReadableStream<UIMessageChunk>)
  t.equal((await fetch(`${url}/ai-sdk/echo-stream/chat/${chatId}/stop`, { method: 'POST', headers: { authorization: `Bearer ${ALICE}` } })).status, 202, 'and stops it')
  t.equal(metaOf((await reading).message).end_reason, 'cancelled')

  const post = async (agent: string, body: unknown, key?: string): Promise<{ status: number, code: string }> => {
    const res = await fetch(`${url}/ai-sdk/${agent}/chat`, { method: 'POST', headers: { 'content-type': 'application/json', ...(key !== undefined ? { authorization: `Bearer ${key}` } : {}) }, body: JSON.stringify(body) })
    return { status: res.status, code: (await res.json() as { code: string }).code }
  }
  const body = { id: 'c', messages: [userMessage('hi')], trigger: 'submit-message' }
  t.same(await post('echo-stream', body), { status: 401, code: 'AH_ERR_AUTH_REQUIRED' }, 'no key')
  t.same(await post('nobody', body, ALICE), { status: 404, code: 'AH_ERR_AGENT_NOT_FOUND' }, 'no such agent')
  t.same(await post('echo-stream', { id: 'c', messages: [] }, ALICE), { status: 400, code: 'AH_ERR_VALIDATION' }, 'no message')
  t.same(await post('echo-stream', { id: 'c', messages: [{ id: 'a', role: 'assistant', parts: [{ type: 'text', text: 'hi' }] }] }, ALICE), { status: 400, code: 'AH_ERR_VALIDATION' }, 'the last message neither asks nor answers')
  t.same(await post('echo-stream', { id: 'c', messages: [{ id: 'u', role: 'user', parts: [{ type: 'file', url: 'data:,x', mediaType: 'text/plain' }] }] }, ALICE), { status: 400, code: 'AH_ERR_VALIDATION' }, 'a file')
  t.same(await post('echo-stream', { id: 'c', messages: [{ id: 'u', role: 'user', parts: [{ type: 'step-start' }] }] }, ALICE), { status: 400, code: 'AH_ERR_VALIDATION' }, 'no text')
  t.same(await post('echo-stream', { ...body, id: 'd', delay_ms: 'soon' }, ALICE), { status: 400, code: 'AH_ERR_VALIDATION' }, 'the agent\'s input is checked')
})

t.test('questions: an approval and an input are tool parts useChat renders; answered with addToolApprovalResponse and addToolOutput, the next sendMessage goes on with the same message', async (t) => {
  const { app, url } = await listen(t, { ...ENV, AGENTS_DIR: INTERRUPT_AGENTS })
  const asks = [
    { name: 'ship', kind: 'approval', message: 'Ship it?' },
    { name: 'colour', kind: 'input', message: 'Which colour?', schema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] } }
  ]
  const chat = new TestChat({ id: `chat-${randomUUID()}`, transport: transport(url, ASKER, { body: { asks } }) })
  await chat.sendMessage({ text: 'go' })
  t.equal(chat.status, 'ready')
  t.equal(chat.messages.length, 2)
  const asked = chat.messages[1] as UIMessage
  const approval = asked.parts.find((p) => p.type === 'tool-approval') as { toolCallId: string, state: string, input: { message: string }, approval: { id: string } }
  t.match(approval, { state: 'approval-requested', title: 'Ship it?', input: { message: 'Ship it?', expires_at: String } }, 'an approval is a tool approval request')
  t.equal(approval.approval.id, approval.toolCallId, 'named by the question\'s id')
  t.match(metaOf(asked), { end_reason: 'input_required' })

  await chat.addToolApprovalResponse({ id: approval.approval.id, approved: true, reason: 'fine' })
  await chat.sendMessage()
  t.equal(chat.status, 'ready')
  t.equal(chat.messages.length, 2, 'the answer goes on with the same assistant message')
  const next = chat.messages[1] as UIMessage
  t.equal(next.id, asked.id)
  t.match(next.parts.find((p) => p.type === 'tool-approval'), { state: 'output-available', output: { approved: true, comment: 'fine' } }, 'the approval is settled')
  const input = next.parts.find((p) => p.type === 'tool-input') as { toolCallId: string, state: string, input: { schema: unknown } }
  t.match(input, { state: 'input-available', input: { message: 'Which colour?', schema: asks[1]?.schema } }, 'an input is a tool call the client answers')

  await chat.addToolOutput({ tool: 'input', toolCallId: input.toolCallId, output: { answer: 'blue' } })
  await chat.sendMessage()
  t.equal(chat.status, 'ready', String(chat.error))
  const done = chat.messages[1] as UIMessage
  t.equal(chat.messages.length, 2)
  t.match(done.parts.find((p) => p.type === 'tool-input'), { state: 'output-available', output: { answer: 'blue' } })
  t.match(done.parts.find((p) => p.type === 'data-result'), { data: { ship: { approved: true, comment: 'fine' }, colour: { answer: 'blue' } } }, 'the agent went on with both answers')
  t.match(metaOf(done), { end_reason: 'done' })
  t.match(textOf(done), /about ship.* answered ship.*about colour.* answered colour/s, 'each run\'s text, once')

  // the chat's runs are the session's: the first asked, the two others answered
  const { runs } = await app.ledger.list({ agentId: ASKER, sessionId: metaOf(done).session_id }, { limit: 10 })
  t.same(runs.map((r) => r.end_reason).sort(), ['done', 'input_required', 'input_required'])
})

t.test('the ask example agent takes the chat\'s message as its question, and goes on with the answer', async (t) => {
  const { url } = await listen(t, ENV)
  const chat = new TestChat({ id: `chat-${randomUUID()}`, transport: transport(url, AGENTS.ask) })
  await chat.sendMessage({ text: 'Which colour?' })
  const input = (chat.messages[1] as UIMessage).parts.find((p) => p.type === 'tool-input') as { toolCallId: string, state: string, input: { message: string } }
  t.match(input, { state: 'input-available', input: { message: 'Which colour?' } })
  await chat.addToolOutput({ tool: 'input', toolCallId: input.toolCallId, output: { answer: 'blue' } })
  await chat.sendMessage()
  t.match((chat.messages[1] as UIMessage).parts.find((p) => p.type === 'data-result'), { data: { question: 'Which colour?', answer: 'blue' } })
})

t.test('agent_host in the body is the host\'s own: the capability and the timeout, not the agent\'s arguments', async (t) => {
  const { app, url } = await listen(t, ENV)
  const post = async (body: Record<string, unknown>): Promise<Response> => await fetch(`${url}/ai-sdk/echo-stream/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: [userMessage('one two three four five six')], trigger: 'submit-message', ...body }) })
  const unknown = await post({ id: `chat-${randomUUID()}`, agent_host: { capability: 'nope' } })
  t.equal(unknown.status, 400)
  t.match(await unknown.json(), { code: 'AH_ERR_VALIDATION', details: { errors: [{ path: '/payload/metadata/capability' }] } }, 'a capability the agent does not have, named')
  const malformed = await post({ id: `chat-${randomUUID()}`, agent_host: { timeout_ms: 'soon' } })
  t.equal(malformed.status, 400, 'agent_host is checked')
  const chat = new TestChat({ id: `chat-${randomUUID()}`, transport: transport(url, 'echo-stream', { body: { delay_ms: 200, agent_host: { timeout_ms: 300 } } }) })
  await chat.sendMessage({ text: 'one two three four five six' })
  const answer = chat.messages[1] as UIMessage
  const meta = metaOf(answer)
  t.equal(chat.status, 'error', 'the run stopped at its timeout')
  t.match(chat.error?.message, /longer than 300 ms.*run_timeout/, 'saying so')
  t.ok(textOf(answer).length < 'one two three four five six '.length, `what it wrote before: "${textOf(answer)}"`)
  const stored = JSON.parse((await app.ledger.get(runKey('anonymous', meta.request_id)))?.envelope ?? '{}') as { payload: { payload: Record<string, unknown>, metadata: Record<string, unknown> } }
  t.match(stored.payload.metadata, { timeout_ms: 300 }, 'in the run\'s metadata')
  t.notOk('agent_host' in stored.payload.payload, 'not among the agent\'s arguments')
})

t.test('a rejected approval is a denied tool call; the chain replayed whole (as a resumed stream of its answering run is) makes the same message', async (t) => {
  const { app, url } = await listen(t, { ...ENV, AGENTS_DIR: INTERRUPT_AGENTS })
  const asks = [{ name: 'ship', kind: 'approval', message: 'Ship it?' }]
  const chat = new TestChat({ id: `chat-${randomUUID()}`, transport: transport(url, ASKER, { body: { asks } }) })
  await chat.sendMessage({ text: 'go' })
  const approval = (chat.messages[1] as UIMessage).parts.find((p) => p.type === 'tool-approval') as { approval: { id: string } }
  await chat.addToolApprovalResponse({ id: approval.approval.id, approved: false, reason: 'not today' })
  await chat.sendMessage()
  t.equal(chat.status, 'ready', String(chat.error))
  const answer = chat.messages[1] as UIMessage
  t.match(answer.parts.find((p) => p.type === 'tool-approval'), { state: 'output-denied' }, 'a rejection is a denied tool call')
  t.match(answer.parts.find((p) => p.type === 'data-result'), { data: { ship: { approved: false, comment: 'not today' } } })

  const hosted = app.agents.get(ASKER)
  if (hosted === undefined) throw new Error('no asker')
  const chats = new AiSdkChats({ engine: app.assist, store: app.ledger, interrupts: app.stores.interrupts, hosted })
  const items = chats.stream(metaOf(answer).request_id, { whole: true, signal: new AbortController().signal })
  const replay = new ReadableStream<UIMessageChunk>({
    async pull (controller) {
      const next = await items.next()
      if (next.done === true) controller.close()
      else if (next.value !== DONE) for (const chunk of next.value) controller.enqueue(chunk)
    }
  })
  const { message } = await readAll(replay)
  // what the person said lives in the chat's own state (addToolApprovalResponse): no chunk carries a rejection's reason
  const held = structuredClone(answer)
  for (const part of held.parts) if (part.type === 'tool-approval') part.approval = { id: (part.approval as { id: string }).id } as never
  t.same(message, held, 'the question, the answer and what followed: the message the chat holds')
})

t.test('the showcase agent\'s every event type, projected: reasoning, sources, text, data parts, a file, the stream', async (t) => {
  const { url } = await listen(t, ENV)
  const { chunks, message } = await readAll(await transport(url, 'showcase', { body: { topic: 'hosting' } }).sendMessages({
    chatId: randomUUID(), messages: [userMessage('show me')], trigger: 'submit-message', messageId: undefined, abortSignal: undefined
  }))
  t.same(message?.parts.map((p) => p.type), [
    'step-start', 'reasoning', 'data-progress-indicator', 'source-url', 'source-url', 'text', 'data-data', 'file', 'text', 'reasoning'
  ], 'THOUGHT_TRACE, PROGRESS_INDICATOR (running, then complete: one part), CITATION_BLOCK, MARKDOWN_BLOCK, DATA, MEDIA_CAROUSEL, the stream, THOUGHT_TRACE')
  const parts = message?.parts ?? []
  t.match(parts[1], { type: 'reasoning', text: 'Planning an answer about hosting' })
  t.match(parts[2], { type: 'data-progress-indicator', id: 'Gathering sources', data: { label: 'Gathering sources', status: 'complete', progress_percent: 1 } }, 'a progress label is one part, updated')
  t.match(parts[3], { type: 'source-url', sourceId: 'cap', url: 'https://example.org/cap', title: 'Coreason Agent Protocol', providerMetadata: { agentHost: { confidence: 0.9, snippet: String } } })
  t.match(parts[5], { type: 'text', text: /^## hosting/ })
  t.match(parts[6], { type: 'data-data', data: { title: 'Facts', view_hint: 'TABLE', data: { topic: 'hosting', words: 1 } } })
  t.match(parts[7], { type: 'file', url: 'https://example.org/diagram.png', mediaType: 'image/png', providerMetadata: { agentHost: { alt_text: 'A diagram of hosting' } } })
  t.match(parts[8], { type: 'text', text: 'Streams carry text deltas.', providerMetadata: { agentHost: { title: 'Summary' } } })
  t.equal(chunks.filter((c) => c.type === 'data-progress-indicator').length, 2, 'two progress events on the wire')
})

t.test('an agent\'s result, usage, warnings and failure: data-result, data-usage, data-error, then the error chunk and finish "error"', async (t) => {
  const { url } = await listen(t, { ...ENV, AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const script = [
    { op: 'usage', usage: { input_tokens: 3, output_tokens: 4 }, cost: 0.5 },
    { op: 'result', value: { ok: true } },
    { op: 'open', name: 's' }, { op: 'write', name: 's', chunk: 'half' }, { op: 'abort', name: 's', reason: 'gave up' },
    { op: 'throw', message: 'boom' }
  ]
  const errors: string[] = []
  const stream = await transport(url, SCRIPTED, { body: { script } }).sendMessages({ chatId: randomUUID(), messages: [userMessage('go')], trigger: 'submit-message', messageId: undefined, abortSignal: undefined })
  const [forChunks, forMessage] = stream.tee()
  const chunks: UIMessageChunk[] = []
  const reading = (async () => { for await (const chunk of forChunks as unknown as AsyncIterable<UIMessageChunk>) chunks.push(chunk) })()
  let message: UIMessage | undefined
  for await (const snapshot of readUIMessageStream({ stream: forMessage, onError: (err) => { errors.push(String(err)) } })) message = snapshot
  await reading
  t.match(message?.parts.find((p) => p.type === 'data-usage'), { id: 'usage', data: { input_tokens: 3, output_tokens: 4, cost: 0.5 } })
  t.match(message?.parts.find((p) => p.type === 'data-result'), { data: { ok: true } })
  t.match(message?.parts.find((p) => p.type === 'data-error'), { data: { code: String, message: /gave up/ } }, 'a stream\'s abort is not the run\'s error')
  t.match(textOf(message), 'half')
  t.equal(errors.length, 1, 'one error chunk')
  t.match(chunks.at(-1), { type: 'finish', finishReason: 'error', messageMetadata: { end_reason: 'aborted', usage: { input_tokens: 3 } } })
})
