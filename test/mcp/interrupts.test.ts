import t from 'tap'
import { fileURLToPath } from 'node:url'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema, LoggingMessageNotificationSchema, type CallToolResult, type ElicitRequest, type ElicitResult, type LoggingMessageNotification, type Progress } from '@modelcontextprotocol/sdk/types.js'
import type { FastifyInstance } from 'fastify'
import { META_REQUEST_ID, META_SESSION_ID } from '../../src/mcp/call-result.js'
import { META_INTERRUPTS } from '../../src/mcp/input-required.js'
import type { Interrupt } from '../../src/protocol/interrupts.js'
import { listen, type Teardown } from '../helper.js'
import { until } from '../socket.js'
import { connect } from './client.js'

const INTERRUPT_AGENTS = fileURLToPath(new URL('../fixtures/interrupt-agents/', import.meta.url))
const ANSWER_SCHEMA = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] }
const APPROVAL_FORM = { type: 'object', properties: { approved: { type: 'boolean', title: 'Approve' }, comment: { type: 'string', title: 'Comment' } }, required: ['approved'] }

type Elicit = ElicitRequest['params'] & { requestedSchema: Record<string, unknown> }
type Answer = (params: Elicit, signal: AbortSignal) => ElicitResult | Promise<ElicitResult>

/** An MCP client (the SDK's) that declared the `elicitation` capability, answering each elicitation with `answer`; what it was asked, in order. */
async function eliciting (t: Teardown, url: string, answer: Answer): Promise<{ client: Client, transport: StreamableHTTPClientTransport, asked: Elicit[], logs: Array<LoggingMessageNotification['params']> }> {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 }
  })
  const client = new Client({ name: 'agent-host-tests', version: '1.0.0' }, { capabilities: { elicitation: {} } })
  const asked: Elicit[] = []
  const logs: Array<LoggingMessageNotification['params']> = []
  client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
    const params = request.params as Elicit
    asked.push(params)
    return await answer(params, extra.signal)
  })
  client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => { logs.push(notification.params) })
  t.teardown(async () => { await client.close() })
  await client.connect(transport)
  return { client, transport, asked, logs }
}

/** The CAP run and session a tool result names. */
function runOf (result: unknown): { requestId: string, sessionId: string } {
  const meta = (result as CallToolResult)._meta as Record<string, string>
  return { requestId: meta[META_REQUEST_ID] as string, sessionId: meta[META_SESSION_ID] as string }
}

/** The text contents of a tool result. */
function texts (result: unknown): string[] {
  return (result as CallToolResult).content.map((c) => (c as { text: string }).text)
}

/** The state of the session's only chain of runs that asked. */
async function chainState (app: FastifyInstance, sessionId: string): Promise<string | undefined> {
  const chains = await app.stores.interrupts.inSession(sessionId)
  return chains.length === 1 ? chains[0]?.state : `${chains.length} chains`
}

t.test('elicitation: a tools/call whose run asks sends elicitation/create with the interrupt\'s schema, and the answer finishes the same call', async (t) => {
  const { app, url } = await listen(t)
  const { client, asked, logs } = await eliciting(t, url, () => ({ action: 'accept', content: { answer: 'blue' } }))
  const progress: Progress[] = []
  const result = await client.callTool({ name: 'ask', arguments: { question: 'Which colour?' } }, undefined, { onprogress: (p) => { progress.push(p) } })
  t.notOk(result.isError, texts(result).join('\n'))
  t.same(result.structuredContent, { question: 'Which colour?', answer: 'blue' })
  t.same(asked, [{ mode: 'form', message: 'Which colour?', requestedSchema: ANSWER_SCHEMA }], 'an object of primitive properties is sent as it is')
  t.match(logs, [{ level: 'info', logger: 'ask', data: { thought: 'Asking: Which colour?' } }], 'the run\'s notifications go on as for any call')

  const { requestId, sessionId } = runOf(result)
  const history = await app.sessions.history(sessionId, 10, 0)
  t.equal(history.length, 2, 'two runs of the one CAP session: the one that asked, the one that answered')
  t.equal(history.at(-1)?.request_id, requestId, 'the result names the run that answered')
  await until('the chain is settled once the answering run is recorded', async () => await chainState(app, sessionId) === 'ended')
  t.match(await app.stores.audit.list({ action: 'interrupt.answer' }), [{ actor: 'anonymous', details: { message: 'Which colour?' } }], 'the answer is audited as any')
})

t.test('elicitation of an approval: a boolean "Approve" and a comment; accept gives { approved, comment }, decline is a rejection, not an end', async (t) => {
  const { url } = await listen(t)
  const answers: ElicitResult[] = [{ action: 'accept', content: { approved: true, comment: 'go' } }, { action: 'decline' }]
  const { client, asked } = await eliciting(t, url, () => answers.shift() as ElicitResult)
  const approved = await client.callTool({ name: 'ask', arguments: { question: 'Deploy?', approve: true } })
  t.same(approved.structuredContent, { question: 'Deploy?', approved: true, comment: 'go' })
  t.same(asked[0], { mode: 'form', message: 'Deploy?', requestedSchema: APPROVAL_FORM })
  const declined = await client.callTool({ name: 'ask', arguments: { question: 'Delete it all?', approve: true } })
  t.notOk(declined.isError)
  t.same(declined.structuredContent, { question: 'Delete it all?', approved: false }, 'the agent is told "rejected" and goes on')
})

t.test('elicitation declined or cancelled for an input: the call ends with an error that says so, and the waiting run is ended', async (t) => {
  const { app, url } = await listen(t)
  const answers: ElicitResult[] = [{ action: 'decline' }, { action: 'cancel' }]
  const { client } = await eliciting(t, url, () => answers.shift() as ElicitResult)
  const declined = await client.callTool({ name: 'ask', arguments: { question: 'Your name?' } })
  t.equal(declined.isError, true)
  t.match(texts(declined).at(-1), /^declined: the user declined to answer "Your name\?"/)
  const { sessionId } = runOf(declined)
  t.equal(await chainState(app, sessionId), 'ended')
  t.match(await app.stores.audit.list({ action: 'assist.cancel' }), [{ actor: 'anonymous', success: true, details: { waiting: true } }], 'ended as a cancel of a waiting run is')

  const cancelled = await client.callTool({ name: 'ask', arguments: { question: 'Your age?' } })
  t.equal(cancelled.isError, true)
  t.match(texts(cancelled).at(-1), /^cancelled: the question "Your age\?" was cancelled/)
  const states = (await app.stores.interrupts.inSession(sessionId)).map((c) => c.state)
  t.same(states, ['ended', 'ended'], 'both chains ended')
})

t.test('elicitation forms: a primitive schema is wrapped as "value", one a form cannot show is JSON text, none is a string; several questions are asked in order, and a run that asks again is asked again in the same call', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  const answers: Record<string, ElicitResult> = {
    colour: { action: 'accept', content: { value: 'red' } },
    items: { action: 'accept', content: { value: '[{"n":1}]' } },
    note: { action: 'accept', content: { value: 'free text' } },
    ok: { action: 'accept', content: { approved: true } },
    later: { action: 'accept', content: { value: 7 } }
  }
  const { client, asked } = await eliciting(t, url, (params) => answers[params.message.replace(/\?$/, '')] as ElicitResult)
  const asks = [
    { name: 'colour', kind: 'input', message: 'colour?', schema: { type: 'string', enum: ['red', 'green'] } },
    { name: 'items', kind: 'input', message: 'items?', schema: { type: 'array', items: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } } },
    { name: 'note', kind: 'input', message: 'note?' },
    { name: 'ok', kind: 'approval', message: 'ok?' }
  ]
  const result = await client.callTool({ name: 'asker', arguments: { asks, parallel: true } })
  t.notOk(result.isError, texts(result).join('\n'))
  t.same(result.structuredContent, { colour: 'red', items: [{ n: 1 }], note: 'free text', ok: { approved: true } })
  t.same(asked.map((a) => a.message), ['colour?', 'items?', 'note?', 'ok?'], 'in the order the agent asked')
  t.same(asked[0]?.requestedSchema, { type: 'object', properties: { value: { title: 'Answer', type: 'string', enum: ['red', 'green'] } }, required: ['value'] })
  t.match(asked[1]?.requestedSchema, { type: 'object', properties: { value: { type: 'string', title: 'Answer (JSON)', description: /^A JSON value matching this JSON Schema: \{"type":"array"/ } }, required: ['value'] })
  t.same(asked[2]?.requestedSchema, { type: 'object', properties: { value: { type: 'string', title: 'Answer' } }, required: ['value'] })
  t.same(asked[3]?.requestedSchema, APPROVAL_FORM)

  asked.length = 0
  const oneByOne = await client.callTool({ name: 'asker', arguments: { asks: [{ name: 'colour', kind: 'input', message: 'colour?' }, { name: 'later', kind: 'input', message: 'later?', schema: { type: 'integer' } }] } })
  t.same(oneByOne.structuredContent, { colour: 'red', later: 7 }, 'the second question, asked by the run that the first answer started, is answered in the same call')
  t.same(asked.map((a) => a.message), ['colour?', 'later?'])
  t.same(texts(oneByOne)[0], 'asking colourabout colour answered colourasking laterabout later answered later', 'the text of every run of the call, once each')
})

t.test('an answer that does not do is asked again once, saying why; a second that does not do fails the call and ends the run', async (t) => {
  const { app, url } = await listen(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  const answers: ElicitResult[] = [
    { action: 'accept', content: { value: '"not a list"' } }, { action: 'accept', content: { value: '[{"n":2}]' } },
    { action: 'accept', content: { value: '{}' } }, { action: 'accept', content: { value: '[{"m":1}]' } }
  ]
  const { client, asked } = await eliciting(t, url, () => answers.shift() as ElicitResult)
  const asks = [{ name: 'items', kind: 'input', message: 'items?', schema: { type: 'array', items: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } } }]
  const fixed = await client.callTool({ name: 'asker', arguments: { asks } })
  t.same(fixed.structuredContent, { items: [{ n: 2 }] })
  t.equal(asked.length, 2)
  t.match(asked[1]?.message, /^items\?\n\n\(The answer to interrupt "[0-9a-f-]{36}" is not valid: \/payload\/payload\/resume\/0\/value must be array\)$/, 'asked again with the engine\'s reason')

  const failed = await client.callTool({ name: 'asker', arguments: { asks } })
  t.equal(failed.isError, true)
  t.match(texts(failed).at(-1), /^AH_ERR_INTERRUPT_ANSWER_INVALID: The answer to interrupt "[0-9a-f-]{36}" is not valid: .*must have required property 'n'.*\(asked twice; the run was ended\)$/)
  t.equal(asked.length, 4, 'twice, no more')
  t.equal((await app.stores.interrupts.inSession(runOf(failed).sessionId)).at(-1)?.state, 'ended')
})

t.test('an answer that does not match the form is asked again once (the SDK checks it against the form first)', async (t) => {
  const { url } = await listen(t)
  const answers: ElicitResult[] = [{ action: 'accept', content: { answer: 5 } }, { action: 'accept', content: { answer: 'five' } }]
  const { client, asked } = await eliciting(t, url, () => answers.shift() as ElicitResult)
  const result = await client.callTool({ name: 'ask', arguments: { question: 'How many?' } })
  t.same(result.structuredContent, { question: 'How many?', answer: 'five' })
  t.match(asked.map((a) => a.message), ['How many?', /^How many\?\n\n\(.*does not match requested schema/s])
})

t.test('the client cancelling the call while an elicitation is open cancels the elicitation and ends the waiting run: no hang', async (t) => {
  const { app, url } = await listen(t)
  let elicitationAborted = false
  const { client, asked } = await eliciting(t, url, async (params, signal) => {
    if (params.message === 'Warm up?') return { action: 'accept', content: { approved: true } }
    await new Promise<void>((resolve) => { signal.addEventListener('abort', () => { elicitationAborted = true; resolve() }, { once: true }) })
    return { action: 'cancel' }
  })
  // the SDK's client ignores a notifications/cancelled for request id 0 (a falsy id), and the server's first request has it
  await client.callTool({ name: 'ask', arguments: { question: 'Warm up?', approve: true } })
  await until('the first call\'s runs are recorded', async () => (await app.stores.audit.list({ action: 'assist' })).length === 2)
  const controller = new AbortController()
  const call = client.callTool({ name: 'ask', arguments: { question: 'Still there?' } }, undefined, { signal: controller.signal })
  await until('the question is asked', () => asked.length === 2)
  await until('the run that asked is recorded', async () => (await app.stores.audit.list({ action: 'assist' })).length === 3)
  // with auth off a run's key is its request id
  const recorded = (await app.stores.audit.list({ action: 'assist' })).at(-1)
  const chain = await app.stores.interrupts.byLastRun(recorded?.request_id as string)
  t.equal(chain?.state, 'waiting')
  controller.abort('the user went away')
  await t.rejects(call, /went away|abort/i)
  await until('the elicitation was cancelled on the client', () => elicitationAborted)
  await until('the waiting run was ended', async () => (await app.stores.interrupts.get(chain?.run_key as string))?.state === 'ended')
  t.match(await app.stores.audit.list({ action: 'assist.cancel' }), [{ success: true, details: { waiting: true } }])
})

t.test('the session closing while an elicitation is open ends the call and its waiting run; a server shutting down does not wait for the person', async (t) => {
  const { app, url } = await listen(t)
  const { client, transport, asked } = await eliciting(t, url, async (_params, signal) => await new Promise<ElicitResult>((resolve) => { signal.addEventListener('abort', () => { resolve({ action: 'cancel' }) }, { once: true }) }))
  const call = client.callTool({ name: 'ask', arguments: { question: 'Anyone?' } }).catch((err: unknown) => err)
  await until('the question is asked', () => asked.length === 1)
  await until('the run that asked is recorded', async () => (await app.stores.audit.list({ action: 'assist' })).length === 1)
  const recorded = (await app.stores.audit.list({ action: 'assist' })).at(-1)
  const chain = await app.stores.interrupts.byLastRun(recorded?.request_id as string)
  await transport.terminateSession()
  await until('the waiting run was ended', async () => (await app.stores.interrupts.get(chain?.run_key as string))?.state === 'ended')
  // the SDK's client leaves a call pending when the server ends its session: closing the client rejects it
  await client.close()
  await call

  const second = await eliciting(t, url, async (_params, signal) => await new Promise<ElicitResult>((resolve) => { signal.addEventListener('abort', () => { resolve({ action: 'cancel' }) }, { once: true }) }))
  const pending = second.client.callTool({ name: 'ask', arguments: { question: 'Still anyone?' } })
  await until('the question is asked', () => second.asked.length === 1)
  await app.close()
  const ended = await pending
  t.equal(ended.isError, true)
  t.match(texts(ended).at(-1), /^session_closed: the MCP session closed while asking "Still anyone\?"/, 'the call answers before the session closes')
})

t.test('without the elicitation capability: the call answers at once that input is required and how; the same tool called again with { resume } in the same MCP session goes on', async (t) => {
  const { app, url } = await listen(t)
  const { client } = await connect(t, url)
  await client.listTools() // a client that knows the outputSchema checks every result against it
  const asked = await client.callTool({ name: 'ask', arguments: { question: 'Which colour?' } })
  const interrupts = ((asked._meta as Record<string, unknown>)[META_INTERRUPTS]) as Interrupt[]
  t.match(interrupts, [{ kind: 'input', message: 'Which colour?', schema: ANSWER_SCHEMA }])
  const id = interrupts[0]?.id as string
  t.equal(asked.isError, true, 'the ask tool declares an outputSchema: the questions are an error result the model reads, not structured content its client would refuse')
  t.notOk(asked.structuredContent)
  const text = texts(asked).at(-1) as string
  t.match(text, /^Input required: the run stopped to ask a question/)
  t.match(text, `1. [input] Which colour?\n   interrupt_id: ${id}\n   answer: a JSON value matching the JSON Schema ${JSON.stringify(ANSWER_SCHEMA)}`)
  t.match(text, `call the tool "ask" again in this MCP session with the arguments {"resume":[{"interrupt_id":"${id}","value":"<answer>"}]}`)
  t.equal(await chainState(app, runOf(asked).sessionId), 'waiting', 'the run waits, held by no process')

  const answered = await client.callTool({ name: 'ask', arguments: { resume: [{ interrupt_id: id, value: { answer: 'green' } }] } })
  t.notOk(answered.isError, texts(answered).join('\n'))
  t.same(answered.structuredContent, { question: 'Which colour?', answer: 'green' })
  t.equal(runOf(answered).sessionId, runOf(asked).sessionId, 'the same CAP session: the MCP session is the binding')

  const again = await client.callTool({ name: 'ask', arguments: { resume: [{ interrupt_id: id, value: { answer: 'red' } }] } })
  t.equal(again.isError, true)
  t.match(texts(again).at(-1), /^AH_ERR_INTERRUPT_CLOSED: /, 'an interrupt takes one answer')

  const other = await connect(t, url)
  const elsewhere = await other.client.callTool({ name: 'ask', arguments: { resume: [{ interrupt_id: id, value: { answer: 'red' } }] } })
  t.match(texts(elsewhere).at(-1), /^AH_ERR_INTERRUPT_NOT_FOUND: /, 'another MCP session is another CAP session: its question is not there')
})

t.test('without the elicitation capability, a tool with no outputSchema: structuredContent { interrupts }, not an error; answers may come one at a time', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  const { client } = await connect(t, url)
  const asks = [{ name: 'a', kind: 'input', message: 'a?', schema: { type: 'string' } }, { name: 'b', kind: 'approval', message: 'b?' }]
  const asked = await client.callTool({ name: 'asker', arguments: { asks, parallel: true } })
  t.notOk(asked.isError)
  const { interrupts } = asked.structuredContent as { interrupts: Interrupt[] }
  t.match(interrupts, [{ kind: 'input', message: 'a?' }, { kind: 'approval', message: 'b?' }])
  t.same((asked._meta as Record<string, unknown>)[META_INTERRUPTS], interrupts)
  t.match(texts(asked).at(-1), /2\. \[approval\] b\?\n {3}interrupt_id: .*\n {3}answer: \{"approved": true or false, "comment": "optional text"\}/)
  const [a, b] = interrupts as [Interrupt, Interrupt]

  const first = await client.callTool({ name: 'asker', arguments: { resume: [{ interrupt_id: a.id, value: 'x' }] } })
  t.match(first.structuredContent, { interrupts: [{ id: b.id }] }, 'the question left open is asked again')
  const last = await client.callTool({ name: 'asker', arguments: { resume: [{ interrupt_id: b.id, value: { approved: true } }] } })
  t.same(last.structuredContent, { a: 'x', b: { approved: true } })
})

t.test('credentials are never asked in a form: a client with elicitation gets the input-required answer for them', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: INTERRUPT_AGENTS })
  const { client, asked } = await eliciting(t, url, () => ({ action: 'cancel' }))
  const result = await client.callTool({ name: 'asker', arguments: { asks: [{ name: 'token', kind: 'input', message: 'Your API token?', auth: true }] } })
  t.equal(asked.length, 0, 'no elicitation')
  t.match(result.structuredContent, { interrupts: [{ reason: 'auth', message: 'Your API token?' }] })
  t.match(texts(result).at(-1), /1\. \[credentials\] Your API token\?/)
})
