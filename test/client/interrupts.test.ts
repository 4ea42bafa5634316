import t from 'tap'
import { AgentHostClient, buildEnvelope, buildResumeEnvelope, isInterrupted, type AssistStream, type StreamPacket } from '../../client/src/index.js'
import { AGENTS, listen } from '../helper.js'
import { assertStreamRules } from '../sse.js'
import { rejection as refusal } from './fixtures/rejection.js'

const ANSWER_SCHEMA = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] }

async function collect (stream: AssistStream): Promise<StreamPacket[]> {
  const packets: StreamPacket[] = []
  for await (const packet of stream) packets.push(packet)
  return packets
}

const kinds = (packets: StreamPacket[]): string[] => packets.map((p) => p.op === 'EVENT' ? p.p.type : p.op)

t.test('JSON: an interrupted answer is told by isInterrupted; resume() answers it in the same session and gets the result', async (t) => {
  const { url } = await listen(t)
  const client = new AgentHostClient({ baseUrl: url })
  const request = buildEnvelope({ agentId: AGENTS.ask, input: { question: 'Which colour?' }, user: { user_id: 'ada' } })
  const asked = await client.assist(request)
  t.ok(isInterrupted(asked), 'the run stopped to ask')
  if (!isInterrupted(asked)) return
  t.match(asked.interrupts, [{ kind: 'input', message: 'Which colour?', schema: ANSWER_SCHEMA }])
  const id = asked.interrupts[0]?.id as string

  const wrong = await refusal(client.resume(request, [{ interrupt_id: id, value: { answer: 42 } }]))
  t.match(wrong, { status: 400, code: 'AH_ERR_INTERRUPT_ANSWER_INVALID', details: { errors: [{ path: '/payload/payload/resume/0/value/answer' }] } }, 'a wrong answer: a typed 400 with the failing path')

  const answered = await client.resume(request, [{ interrupt_id: id, value: { answer: 'blue' } }])
  t.same(answered.output, { question: 'Which colour?', answer: 'blue' }, 'the question was still open after the wrong answer')
  t.notOk(isInterrupted(answered), 'nothing more to ask')

  const second = await refusal(client.resume({ agentId: AGENTS.ask, sessionId: request.context.session_id, user: { user_id: 'ada' } }, [{ interrupt_id: id, value: { answer: 'red' } }]))
  t.match(second, { status: 409, code: 'AH_ERR_INTERRUPT_CLOSED' }, 'a second answer (given by agent and session) is a typed 409')
  const unknown = await refusal(client.resume(request, [{ interrupt_id: crypto.randomUUID(), value: { answer: 'x' } }]))
  t.match(unknown, { status: 404, code: 'AH_ERR_INTERRUPT_NOT_FOUND' })
})

t.test('the resume envelope: a new request in the asking one\'s session, agent, user and trace, with payload.resume', async (t) => {
  const request = buildEnvelope({ agentId: AGENTS.ask, input: { question: 'q' }, user: { user_id: 'ada', tier: 'pro', locale: 'fr-FR' }, permissions: ['p'], metadata: { capability: 'ask' } })
  const answers = [{ interrupt_id: '00000000-0000-4000-8000-000000000001', value: { approved: true } }]
  const resume = buildResumeEnvelope(request, answers)
  t.not(resume.request_id, request.request_id)
  t.same([resume.context.session_id, resume.payload.session_id, resume.context.agent_id], [request.context.session_id, request.context.session_id, AGENTS.ask])
  t.same(resume.context.user, request.context.user)
  t.same(resume.context.permissions, ['p'])
  t.same(resume.payload.payload, { resume: answers })
  t.same(resume.payload.metadata, { capability: 'ask' })
  t.match(resume.context.trace, { trace_id: request.context.trace.trace_id, parent_id: request.context.trace.span_id })
  t.not(resume.context.trace.span_id, request.context.trace.span_id)
  const bySession = buildResumeEnvelope({ agentId: AGENTS.ask, sessionId: request.context.session_id }, answers)
  t.same([bySession.context.session_id, bySession.payload.session_id, bySession.payload.payload], [request.context.session_id, request.context.session_id, { resume: answers }])
})

t.test('streams: the INTERRUPT event\'s questions and the close reason input_required are on the finished stream; resumeStream() goes on from there', async (t) => {
  const { url } = await listen(t)
  const client = new AgentHostClient({ baseUrl: url })
  const stream = client.stream({ agentId: AGENTS.ask, input: { question: 'Go ahead?', approve: true } })
  t.equal(stream.interrupts, undefined)
  t.equal(stream.closeReason, undefined)
  const packets = await collect(stream)
  assertStreamRules(packets)
  t.same(kinds(packets), ['THOUGHT_TRACE', 'INTERRUPT', 'CLOSE'])
  t.equal(stream.closeReason, 'input_required')
  t.ok(isInterrupted(stream))
  if (!isInterrupted(stream)) return
  t.match(stream.interrupts, [{ kind: 'approval', message: 'Go ahead?' }])
  const id = stream.interrupts[0]?.id as string

  const invalid = client.resumeStream(stream.request, [{ interrupt_id: id, value: { approved: 'yes' } }])
  t.match(await refusal(collect(invalid)), { status: 400, code: 'AH_ERR_INTERRUPT_ANSWER_INVALID', details: { errors: [{ path: '/payload/payload/resume/0/value/approved' }] } }, 'a refused answer rejects the first next()')

  const resumed = client.resumeStream(stream.request, [{ interrupt_id: id, value: { approved: false, comment: 'not today' } }])
  t.not(resumed.request.request_id, stream.request.request_id, 'a new request')
  const rest = await collect(resumed)
  assertStreamRules(rest)
  t.same(kinds(rest), ['RESULT', 'CLOSE'], 'only what is new')
  t.match(rest[0], { op: 'EVENT', p: { type: 'RESULT', data: { question: 'Go ahead?', approved: false, comment: 'not today' } } })
  t.equal(resumed.closeReason, 'done')
  t.equal(resumed.interrupts, undefined)
  t.notOk(isInterrupted(resumed))

  const again = client.resumeStream(stream.request, [{ interrupt_id: id, value: { approved: true } }])
  t.match(await refusal(collect(again)), { status: 409, code: 'AH_ERR_INTERRUPT_CLOSED' }, 'a second answer is a typed 409')
  const replay = await collect(client.stream(resumed.request))
  t.same(kinds(replay), ['RESULT', 'CLOSE'], 'the answering envelope sent again joins its run')
})

t.test('a stream that ends otherwise has its close reason and no interrupts', async (t) => {
  const { url } = await listen(t)
  const stream = new AgentHostClient({ baseUrl: url }).stream({ agentId: AGENTS.echoStream, query: 'one two', input: { delay_ms: 0 } })
  await collect(stream)
  t.equal(stream.closeReason, 'done')
  t.equal(stream.interrupts, undefined)
  t.notOk(isInterrupted(stream))
})
