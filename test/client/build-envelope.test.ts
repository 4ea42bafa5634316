import t from 'tap'
import { compileSchema, toIssues } from '../../src/agents/json-schema.js'
import { traceparentOf as serverTraceparentOf } from '../../src/backends/protocol.js'
import { ServiceRequest } from '../../src/protocol/envelope.js'
import { buildEnvelope, type ServiceRequest as ServiceRequestType } from '../../client/src/index.js'
import { defaultLocale, traceparentOf } from '../../client/src/build-envelope.js'
import { randomUuid } from '../../client/src/random-uuid.js'
import { DEFAULT_RESUME, resumeDelay } from '../../client/src/resume-policy.js'
import { AGENTS } from '../helper.js'

const valid = compileSchema<ServiceRequestType>(ServiceRequest)
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

t.test('buildEnvelope makes an envelope the server\'s own schema accepts, with CAP\'s cross-field rules', async (t) => {
  const envelope = buildEnvelope({ agentId: AGENTS.echo, query: 'hi' })
  t.ok(valid(envelope), JSON.stringify(toIssues(valid.errors)))
  t.equal(envelope.payload.session_id, envelope.context.session_id, 'payload.session_id equals context.session_id')
  t.match(envelope, {
    request_id: UUID_V4,
    context: { agent_id: AGENTS.echo, user: { user_id: 'anonymous', tier: 'free', locale: defaultLocale() }, permissions: [], trace: { trace_id: UUID_V4, span_id: UUID_V4 } },
    payload: { payload: { query: 'hi' } }
  })
  t.notOk('parent_id' in envelope.context.trace, 'a new trace has no parent')
  t.notOk('metadata' in envelope.payload)
  t.notOk('email' in envelope.context.user)
  t.ok(Math.abs(Date.parse(envelope.context.created_at) - Date.now()) < 60_000, 'created_at is now')
  t.not(buildEnvelope({ agentId: AGENTS.echo }).request_id, envelope.request_id, 'new ids every time')
})

t.test('buildEnvelope keeps what the caller gives: ids, user, permissions, metadata, arguments under query', async (t) => {
  const permissions = ['read']
  const envelope = buildEnvelope({
    agentId: AGENTS.echo,
    query: 'wins',
    input: { query: 'loses', n: 1 },
    sessionId: '22222222-2222-4222-8222-222222222222',
    requestId: '11111111-1111-4111-8111-111111111111',
    user: { user_id: 'ada', tier: 'pro', locale: 'en-GB', email: 'ada@example.com' },
    permissions,
    metadata: { capability: 'echo', on_disconnect: 'cancel' }
  })
  t.ok(valid(envelope), JSON.stringify(toIssues(valid.errors)))
  t.same(envelope.payload, { session_id: '22222222-2222-4222-8222-222222222222', payload: { query: 'wins', n: 1 }, metadata: { capability: 'echo', on_disconnect: 'cancel' } })
  t.same(envelope.context.user, { user_id: 'ada', email: 'ada@example.com', tier: 'pro', locale: 'en-GB' })
  t.equal(envelope.request_id, '11111111-1111-4111-8111-111111111111')
  t.not(envelope.context.permissions, permissions, 'the permissions are copied')
  t.same(buildEnvelope({ agentId: AGENTS.echo, input: { a: 1 } }).payload.payload, { a: 1 }, 'no query: the input as is')
  t.same(buildEnvelope({ agentId: AGENTS.echo, user: { user_id: 'bob' } }).context.user, { user_id: 'bob', tier: 'free', locale: defaultLocale() }, 'a partial user gets the defaults')
})

t.test('a traceparent is continued: its trace id, its span as the parent, a new span; the header reads back the same trace', async (t) => {
  const traceparent = '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01'
  const envelope = buildEnvelope({ agentId: AGENTS.echo, traceparent })
  t.ok(valid(envelope), JSON.stringify(toIssues(valid.errors)))
  t.equal(envelope.context.trace.trace_id, '4bf92f35-77b3-4da6-a3ce-929d0e0e4736')
  t.equal(envelope.context.trace.parent_id, '00f067aa-0ba9-02b7-0000-000000000000')
  t.match(envelope.context.trace.span_id, UUID_V4)
  t.equal(traceparentOf(envelope.context.trace), serverTraceparentOf(envelope.context.trace), 'the header the client sends is the one the server would make')
  t.match(traceparentOf(envelope.context.trace), /^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/)
  for (const bad of ['00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7', 'nonsense', `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`]) {
    t.throws(() => buildEnvelope({ agentId: AGENTS.echo, traceparent: bad }), TypeError, `refused: ${bad}`)
  }
})

t.test('the default locale is the page\'s, else the platform\'s', async (t) => {
  t.equal(defaultLocale({ navigator: { language: 'fr-FR' } }), 'fr-FR')
  t.equal(defaultLocale({}), new Intl.DateTimeFormat().resolvedOptions().locale)
})

t.test('random UUIDs are version 4, with or without crypto.randomUUID (pages over plain http have only getRandomValues)', async (t) => {
  t.match(randomUuid(), UUID_V4)
  const bytes = (fill: number) => ({ getRandomValues: (array: Uint8Array) => array.fill(fill) })
  t.equal(randomUuid(bytes(0xff)), 'ffffffff-ffff-4fff-bfff-ffffffffffff')
  t.equal(randomUuid(bytes(0)), '00000000-0000-4000-8000-000000000000')
  const made = new Set(Array.from({ length: 100 }, () => randomUuid({ getRandomValues: (array) => crypto.getRandomValues(array) })))
  t.equal(made.size, 100)
  for (const id of made) t.match(id, UUID_V4)
})

t.test('resume backoff doubles from the base up to the cap, jittered into the upper half', async (t) => {
  const policy = { ...DEFAULT_RESUME, baseDelayMs: 100, maxDelayMs: 1000 }
  t.same([1, 2, 3, 4, 5, 10].map((n) => resumeDelay(n, policy, () => 1)), [100, 200, 400, 800, 1000, 1000])
  t.same([1, 2, 10].map((n) => resumeDelay(n, policy, () => 0)), [50, 100, 500])
  const delay = resumeDelay(3, policy)
  t.ok(delay >= 200 && delay <= 400, `${delay} within [200, 400]`)
})
