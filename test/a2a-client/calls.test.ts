import t from 'tap'
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage } from 'node:http'
import { once } from 'node:events'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import type { AddressInfo } from 'node:net'
import type { A2AResponse, A2AUpdate } from '../../src/protocol/a2a-client.js'
import { envelope } from '../helper.js'
import { open, until } from '../socket.js'
import { checkServiceResponse, parseSse } from '../sse.js'
import { sample } from '../metrics-text.js'
import { CALLER, OTHER_CALLER, SKILLS, serveRemoteAgents } from './remote.js'

/** What the calling agent answers (test/fixtures/a2a-client/agents/_shared/calling-agent.ts). */
interface Output {
  answer?: A2AResponse & { metadata: Record<string, unknown> }
  updates: A2AUpdate[]
  error?: { code: string, message: string }
}

const { app, remote } = await serveRemoteAgents(t)

/** Run the calling agent (JSON) with `ask`; its output. */
async function call (ask: Record<string, unknown>, agentId = CALLER, requestId = randomUUID()): Promise<Output> {
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(agentId, ask, { requestId }), headers: { accept: 'application/json' } })
  if (res.statusCode !== 200) throw new Error(`${res.statusCode}: ${res.body}`)
  return checkServiceResponse(res.json()).output as unknown as Output
}

t.test('a streaming agent: the query goes as a text part, the rest of the payload as a data part, the skill as metadata.skill; the artifact is the result', async (t) => {
  const { answer, updates } = await call({ agent: 'scanner', capability: 'echo', payload: { query: 'look at this', files: ['a.ts'] } })
  t.match(answer, {
    agent_id: 'scanner',
    status: 'success',
    result: { files: ['a.ts'] },
    metadata: { capability: 'echo', streamed: true, state: 'completed', task_id: String, context_id: String, artifacts: [{ artifact_id: 'echo', name: 'out' }] }
  })
  t.match(answer?.request_id, /^[0-9a-f-]{36}$/)
  t.notOk('billing' in (answer ?? {}), 'no billing when the remote reports none')
  const got = remote.received.at(-1)
  t.equal(got?.messageId, answer?.request_id, 'the request id is the message id')
  t.same(got?.metadata, { skill: 'echo' })
  t.same(got?.parts.map((p) => p.content), [{ $case: 'text', value: 'look at this' }, { $case: 'data', value: { files: ['a.ts'] } }])
  await call({ agent: 'scanner', capability: 'echo', payload: { query: 'only this' } })
  t.same(remote.received.at(-1)?.parts.map((p) => p.content), [{ $case: 'text', value: 'only this' }], 'no data part when the query is all')
  t.same(updates.map((u) => u.type === 'status' ? u.state : `artifact:${u.artifact_id}`), ['working', 'artifact:echo', 'completed'])
})

t.test('an agent that does not stream: SendMessage returns the task at once, GetTask follows it to its end', async (t) => {
  const { answer, updates } = await call({ agent: 'plain', capability: 'echo', payload: { n: 1 } })
  t.match(answer, { agent_id: 'plain', status: 'success', result: { n: 1 }, metadata: { streamed: false, state: 'completed' } })
  t.same(updates.filter((u) => u.type === 'status').map((u) => u.type === 'status' && u.state), ['working', 'completed'])
  t.match(updates.find((u) => u.type === 'artifact'), { type: 'artifact', artifact_id: 'echo', append: false, last_chunk: true, content: { n: 1 } })
  t.notOk((remote.received.at(-1)?.parts ?? []).some((p) => p.content?.$case === 'text'), 'no text part without a string query')
})

t.test('a message for an answer is a success with its content', async (t) => {
  for (const agent of ['scanner', 'plain']) {
    const { answer } = await call({ agent, capability: 'message', payload: {} })
    t.match(answer, { status: 'success', result: 'pong', billing: { cost_usd: 0.01 }, metadata: { message_id: String, context_id: String, remote: { cost: 0.01 } } }, agent)
  }
})

t.test('a remote failure is a failure, with the remote\'s reason', async (t) => {
  for (const agent of ['scanner', 'plain']) {
    const failed = (await call({ agent, capability: 'fail', payload: {} })).answer
    t.match(failed, { status: 'failure', result: null, metadata: { state: 'failed', error: `"${agent}" ended the task failed: the scanner broke` } }, agent)
    const rejected = (await call({ agent, capability: 'reject', payload: {} })).answer
    t.match(rejected, { status: 'failure', metadata: { state: 'rejected', error: `"${agent}" ended the task rejected` } }, agent)
    t.notOk('remote' in (rejected?.metadata ?? {}), 'no empty metadata of the remote')
  }
})

t.test('a remote that refuses the request (a JSON-RPC error) is a failure, with its error', async (t) => {
  const { answer } = await call({ agent: 'textonly', capability: 'echo', payload: {} })
  t.match(answer, { status: 'failure', result: null, metadata: { streamed: false, error: /^"textonly" failed: .*application\/json.* is not supported/ } })
  t.notOk('task_id' in (answer?.metadata ?? {}), 'no task was made')
})

t.test('a task that asks for more input or for authentication is a failure, and is cancelled', async (t) => {
  const { answer } = await call({ agent: 'scanner', capability: 'ask', payload: {} })
  t.match(answer, { status: 'failure', metadata: { state: 'input_required', cancelled: true, error: /asks for more input, which host\.a2a\.call cannot give: which branch\?/ } })
  t.ok(remote.cancels.includes(String(answer?.metadata.task_id)), 'the executor saw the cancel')
  const auth = (await call({ agent: 'plain', capability: 'auth', payload: {} })).answer
  t.match(auth, { status: 'failure', metadata: { state: 'auth_required', cancelled: true, error: '"plain" asks for authentication, which host.a2a.call cannot give' } })
})

t.test('past its timeout a call answers timeout, and the remote task is cancelled', async (t) => {
  for (const agent of ['scanner', 'plain']) {
    const { answer } = await call({ agent, capability: 'slow', payload: {}, options: { timeout: 1 } })
    t.match(answer, { status: 'timeout', result: null, metadata: { state: 'working', cancelled: true, error: `no answer from "${agent}" within 1 s` } }, agent)
    t.ok(remote.cancels.includes(String(answer?.metadata.task_id)), `${agent}: the executor saw the cancel`)
  }
  const { answer } = await call({ agent: 'quick', capability: 'slow', payload: {} })
  t.match(answer, { status: 'timeout', metadata: { error: 'no answer from "quick" within 1 s' } }, 'the file\'s timeout when the call gives none')
  const stubborn = (await call({ agent: 'scanner', capability: 'stubborn', payload: {}, options: { timeout: 1 } })).answer
  t.match(stubborn, { status: 'timeout', metadata: { cancelled: false } }, 'a cancel the remote refuses: cancelled is false')
  t.ok(remote.cancels.includes(String(stubborn?.metadata.task_id)), 'it was asked')
})

t.test('a streamed call past its timeout ends while the garbage collector runs: the abort reaches the body whatever was collected', async (t) => {
  // undici links a request's signal to its body through an object it holds weakly: a collection
  // mid-stream lost the abort, and the call read on until undici's 300 s body timeout
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const collecting = setInterval(gc, 2)
  t.teardown(() => { clearInterval(collecting) })
  const ended = call({ agent: 'scanner', capability: 'slow', payload: {}, options: { timeout: 1 } })
  const deadline = new Promise<'hung'>((resolve) => { setTimeout(() => { resolve('hung') }, 30_000).unref() })
  const outcome = await Promise.race([ended, deadline])
  t.not(outcome, 'hung', 'answered within 30 s')
  if (outcome !== 'hung') t.match(outcome.answer, { status: 'timeout', metadata: { cancelled: true } })
})

t.test('cancelling the calling run (POST /v1/assist/{id}/cancel) cancels the remote task', async (t) => {
  const requestId = randomUUID()
  const before = remote.received.length
  const sse = await open(await listening(), envelope(CALLER, { agent: 'scanner', capability: 'slow', payload: {}, stream: true }, { requestId }))
  await until('the remote task is working', () => remote.received.length > before && sse.text().includes('working'))
  const taskId = remote.received[before]?.taskId as string
  const res = await app.inject({ method: 'POST', url: `/v1/assist/${requestId}/cancel` })
  t.equal(res.statusCode, 202)
  await until('the executor saw the cancel', () => remote.cancels.includes(taskId))
  await sse.ended
  t.match(sse.text(), /"cancelled"/, 'the run closed cancelled')
  await until('the call is recorded', () => audit(requestId).length === 1)
  t.match(audit(requestId)[0], { action: 'a2a.call', resource: 'scanner.slow', success: false, details: { status: 'failure', task_id: taskId, error: /the call was stopped/ } })
})

t.test('streaming updates reach the calling agent in order, as the remote sends them', async (t) => {
  const requestId = randomUUID()
  const sse = await open(await listening(), envelope(CALLER, { agent: 'scanner', capability: SKILLS.chunks, payload: {}, stream: true }, { requestId }))
  // the first chunk reaches the client while the remote still holds the others
  await until('the first chunk', () => sse.text().includes('"op":"DELTA"'))
  t.same(parseSse(sse.text(), false).packets.filter((p) => p.op === 'DELTA').map((p) => p.p), ['a'], 'the second chunk is not written yet')
  remote.openGate()
  await sse.ended
  const packets = parseSse(sse.text()).packets
  t.same(packets.filter((p) => p.op === 'DELTA').map((p) => p.p), ['a', 'b', 'c'])
  const result = packets.find((p) => p.op === 'EVENT' && (p.p as { type: string }).type === 'RESULT')?.p as { data?: Output } | undefined
  const output = (result?.data ?? {}) as Output
  t.same(output.updates, [
    { type: 'status', task_id: output.answer?.metadata.task_id, state: 'working' },
    { type: 'artifact', task_id: output.answer?.metadata.task_id, artifact_id: 'text', name: 'out', append: false, last_chunk: false, content: 'a' },
    { type: 'artifact', task_id: output.answer?.metadata.task_id, artifact_id: 'text', name: 'out', append: true, last_chunk: false, content: 'b' },
    { type: 'artifact', task_id: output.answer?.metadata.task_id, artifact_id: 'text', name: 'out', append: true, last_chunk: true, content: 'c' },
    { type: 'status', task_id: output.answer?.metadata.task_id, state: 'completed', message: 'done' }
  ])
  t.equal(output.answer?.result, 'abc', 'the appended chunks are one artifact')
})

t.test('every call is recorded: an a2a.call event of the run, and an audit row', async (t) => {
  const requestId = randomUUID()
  const { answer } = await call({ agent: 'scanner', capability: 'echo', payload: { x: 1 } }, CALLER, requestId)
  const events = (await app.inject(`/v1/events?request_id=${requestId}&type=a2a.call`)).json() as { events: Array<{ event: { data: Record<string, unknown>, subject: string } }> }
  t.equal(events.events.length, 1)
  t.match(events.events[0]?.event, {
    type: 'a2a.call',
    source: 'agent-host/a2a-client',
    subject: 'scanner.echo',
    data: { caller: 'a2a-caller', agent: 'scanner', capability: 'echo', request_id: answer?.request_id, status: 'success', task_id: answer?.metadata.task_id, state: 'completed', duration_ms: Number }
  })
  t.match(audit(requestId), [{ action: 'a2a.call', resource: 'scanner.echo', success: true, claimed_user: 'user-1', details: { by: 'agent:a2a-caller', call_id: answer?.request_id, status: 'success' } }])
})

t.test('billing is read from the remote\'s metadata and counted in the usage metrics', async (t) => {
  const counted = async (): Promise<number[]> => {
    const text = (await app.inject('/metrics')).body
    const labels = { agent: 'a2a-caller', model: 'a2a:scanner' }
    return [sample(text, 'agent_host_tokens_total', { ...labels, direction: 'input' }) ?? 0, sample(text, 'agent_host_tokens_total', { ...labels, direction: 'output' }) ?? 0, sample(text, 'agent_host_cost_usd_total', labels) ?? 0]
  }
  const before = await counted()
  const { answer } = await call({ agent: 'scanner', capability: 'billing', payload: {} })
  t.same(answer?.billing, { cost_usd: 0.25, input_tokens: 100, output_tokens: 20 }, 'numbers only')
  t.match(answer?.metadata.remote, { billing: { note: 'dropped: not a number' } }, 'the remote\'s metadata is kept whole')
  const after = await counted()
  t.same(after.map((n, i) => Math.round((n - (before[i] as number)) * 1e6) / 1e6), [100, 20, 0.25], 'input and output tokens, and the cost')
})

t.test('refused, as failures that say why, and nothing reaches the remote', async (t) => {
  const before = remote.received.length
  const refused = async (ask: Record<string, unknown>, error: RegExp, agentId = CALLER): Promise<void> => {
    const requestId = randomUUID()
    const { answer } = await call(ask, agentId, requestId)
    t.match(answer, { status: 'failure', result: null, metadata: { error } }, String(error))
    t.match(audit(requestId), [{ success: false, resource: `${String(ask.agent)}.${String(ask.capability)}`, details: { status: 'failure' } }])
  }
  await refused({ agent: 'nobody', capability: 'echo', payload: {} }, /^no external agent "nobody" is configured \(A2A_AGENTS_FILE\); there are: scanner, plain/)
  await refused({ agent: 'scanner', capability: 'secret', payload: {} }, /^"secret" is not a capability agents may ask of "scanner" \(A2A_AGENTS_FILE allows: echo,/)
  await refused({ agent: 'unskilled', capability: 'not-a-skill', payload: {} }, /^"unskilled" offers no skill "not-a-skill" \(its card's skills: echo, chunks/)
  await refused({ agent: 'scanner', capability: 'echo', payload: {} }, /^agent "other-caller" may not call "scanner" \(its callers in A2A_AGENTS_FILE: a2a-caller\)/, OTHER_CALLER)
  await refused({ agent: 'elsewhere', capability: 'echo', payload: {} }, /^"elsewhere" cannot be called: its card names an interface on another host \(127\.0\.0\.1:\d+\) than the card's/)
  await refused({ agent: 'ghost', capability: 'echo', payload: {} }, /^"ghost" cannot be called: its card could not be fetched from http:\/\/127\.0\.0\.1:1\//)
  await refused({ agent: 'scanner', capability: 'echo', payload: {}, options: { callback_url: 'http://127.0.0.1:9/hook' } }, /^"scanner" does not send push notifications/)
  t.equal(remote.received.length, before)
})

t.test('a card may point to another host that allowed_hosts lists', async (t) => {
  t.match((await call({ agent: 'allowed', capability: 'echo', payload: { y: 2 } })).answer, { status: 'success', result: { y: 2 } })
})

t.test('the file\'s credentials go with the card request and every call', async (t) => {
  t.match((await call({ agent: 'secure', capability: 'echo', payload: {} })).answer, { status: 'success' })
  t.same(remote.secureHeaders, { authorization: 'Bearer s3cret', tenant: 'acme' })
})

t.test('callback_url: the remote POSTs its task updates there', async (t) => {
  const received: unknown[] = []
  const hook = createServer((req: IncomingMessage, res) => {
    let body = ''
    req.on('data', (c: Buffer) => { body += c.toString() })
    req.on('end', () => { received.push(JSON.parse(body)); res.end() })
  })
  hook.listen(0, '127.0.0.1')
  await once(hook, 'listening')
  t.teardown(() => { hook.close() })
  const url = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`
  const { answer } = await call({ agent: 'pusher', capability: 'echo', payload: {}, options: { callback_url: url } })
  t.match(answer, { status: 'success' })
  await until('a push notification', () => received.length > 0)
  t.match(JSON.stringify(received), String(answer?.metadata.task_id))
})

t.test('a malformed call throws AH_ERR_REMOTE_CALL_INVALID, naming what is wrong', async (t) => {
  const invalid = async (ask: Record<string, unknown>, message: RegExp): Promise<void> => {
    const { error } = await call(ask)
    t.match(error, { code: 'AH_ERR_REMOTE_CALL_INVALID', message }, String(message))
  }
  await invalid({ agent: 42, capability: 'echo', payload: {} }, /\/agent_id must be string/)
  await invalid({ agent: 'scanner', capability: '', payload: [] }, /\/capability must NOT have fewer than 1 characters; \/payload must be object/)
  await invalid({ agent: 'scanner', capability: 'echo', payload: {}, options: { timeout: 0.5 } }, /\/timeout must be integer/)
  await invalid({ agent: 'scanner', capability: 'echo', payload: {}, options: { timeout: 90000 } }, /\/timeout must be <= 86400/)
  await invalid({ agent: 'scanner', capability: 'echo', payload: {}, options: { callback_url: 'mailto:a@b.c' } }, /\/callback_url must be an http or https URL/)
  await invalid({ agent: 'scanner', capability: 'echo', payload: {}, options: { signal: 'stop' } }, /signal must be an AbortSignal/)
})

/** The audit rows of the calls of the run `requestId`. */
function audit (requestId: string): Array<Record<string, unknown>> {
  return app.audit.list({ action: 'a2a.call', request_id: requestId }) as unknown as Array<Record<string, unknown>>
}

let base: string | undefined
/** The app listening on a random port (once), for the tests that need a real socket. */
async function listening (): Promise<string> {
  if (base !== undefined) return base
  await app.listen({ host: '127.0.0.1', port: 0 })
  base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  return base
}
