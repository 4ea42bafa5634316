import t from 'tap'
import { createServer, type IncomingMessage } from 'node:http'
import { fileURLToPath } from 'node:url'
import type { AddressInfo } from 'node:net'
import { context, diag, propagation, ROOT_CONTEXT, SpanStatusCode, trace, type TextMapGetter, type TextMapSetter } from '@opentelemetry/api'
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-node'
import { buildApp } from '../src/app.js'
import { SqliteGroupWriter } from '../src/storage/sqlite/group-writer.js'
import { openDatabase } from '../src/storage/sqlite/database.js'
import { startTelemetry, traceExporters } from '../src/telemetry.js'
import { TraceparentPropagator } from '../src/plugins/telemetry.js'
import { ANONYMOUS } from '../src/storage/api-keys.js'
import { AGENTS, build, envelope, tempDataDir, testConfig, type Teardown } from './helper.js'
import { fakeProvider, openai } from './fixtures/providers.js'
import { holdDbLock } from './lock-holder.js'
import { startServer } from './server-child.js'
import { until } from './socket.js'
import { parseSse } from './sse.js'

/** A tracer provider whose spans are kept in memory, shut down after the test. */
function memoryProvider (t: Teardown): { provider: NodeTracerProvider, spans: () => ReadableSpan[] } {
  const exporter = new InMemorySpanExporter()
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  t.teardown(async () => { await provider.shutdown() })
  return { provider, spans: () => exporter.getFinishedSpans() }
}

/** An app tracing into memory (its log lines kept, as objects), closed after the test. */
async function traced (t: Teardown, env: Record<string, string> = {}): Promise<{ app: Awaited<ReturnType<typeof buildApp>>, spans: () => ReadableSpan[], lines: Array<Record<string, unknown>> }> {
  const { provider, spans } = memoryProvider(t)
  const lines: Array<Record<string, unknown>> = []
  const app = await buildApp(testConfig(t, { LOG_LEVEL: 'info', WORKERS_PER_TYPE: '0', ...env }), {
    tracerProvider: provider,
    logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } }
  })
  t.teardown(() => app.close())
  return { app, spans, lines }
}

const named = (spans: ReadableSpan[], name: string): ReadableSpan[] => spans.filter((s) => s.name === name)
const one = (spans: ReadableSpan[], name: string): ReadableSpan => {
  const found = named(spans, name)
  if (found.length !== 1) throw new Error(`${found.length} spans named ${name}: ${spans.map((s) => s.name).join(', ')}`)
  return found[0] as ReadableSpan
}
const header = (value: unknown): { traceId: string, spanId: string, flags: string } => {
  const [, traceId, spanId, flags] = String(value).split('-') as [string, string, string, string]
  return { traceId, spanId, flags }
}
const w3c = (uuid: string): string => uuid.replaceAll('-', '')

/** test/fixtures/telemetry-agents/backend-send: one `send` to the backend its payload names. */
const BACKEND_SEND = 'f0000000-0000-4000-8000-0000000000e1'

t.test('off without a provider: no tracer, no @fastify/otel, and the response header is tracing.ts\'s as before', async (t) => {
  const app = await build(t)
  t.equal(app.tracer, undefined)
  t.notOk(app.hasPlugin('@fastify/otel'))
  t.notOk(app.hasRequestDecorator('opentelemetry'))
  const res = await app.inject({ url: '/v1/agents' })
  t.match(String(res.headers.traceparent), /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/)
})

t.test('a JSON run with a traceparent: the run is a child of the request span, in the caller\'s trace, and the response names the request span', async (t) => {
  const { app, spans } = await traced(t)
  const caller = '4bf92f3577b34da6a3ce929d0e0e4736'
  const body = envelope(AGENTS.echo)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { traceparent: `00-${caller}-00f067aa0ba902b7-01` }, payload: body })
  t.equal(res.statusCode, 200)
  const out = header(res.headers.traceparent)
  t.equal(out.traceId, caller, 'the response continues the caller\'s trace')

  const request = one(spans(), 'request')
  t.equal(request.spanContext().traceId, caller, 'the request span continues the caller\'s trace')
  t.equal(request.parentSpanContext?.spanId, '00f067aa0ba902b7', 'under the caller\'s span')
  t.equal(out.spanId, request.spanContext().spanId, 'the response\'s traceparent names the request span')
  t.match(request.attributes, { 'http.request.method': 'POST', 'http.route': '/v1/assist', 'http.response.status_code': 200 })

  const run = one(spans(), 'assist.run')
  t.equal(run.spanContext().traceId, caller, 'the run is in the trace the response names')
  t.equal(run.parentSpanContext?.spanId, request.spanContext().spanId, 'a child of the request span')
  t.same(run.links, [], 'no link: its parent is the request span')
  t.match(run.attributes, {
    'gen_ai.operation.name': 'invoke_agent',
    'gen_ai.agent.id': AGENTS.echo,
    'gen_ai.agent.name': 'echo',
    'agent_host.run.mode': 'request_response',
    'agent_host.run.request_id': body.request_id,
    'agent_host.run.end': 'done',
    'agent_host.run.packets': 2
  })
  t.equal(run.status.code, SpanStatusCode.UNSET)
  t.same(spans().map((s) => s.name).filter((n) => n !== 'storage.commit').sort(), ['assist.run', 'handler - assist', 'request'], 'no span per hook')
  t.ok(propagation.fields().includes('traceparent'), 'the app installed a propagator for @fastify/otel')
  t.equal(context.active(), ROOT_CONTEXT, 'and no context manager: nothing here relies on one')
})

t.test('an SSE run without a traceparent: the run is in its envelope\'s trace (the response\'s), under the caller\'s span the envelope names, linked to the request span', async (t) => {
  const { app, spans } = await traced(t)
  const body = envelope(AGENTS.echoStream, { query: 'one two three', delay_ms: 0 })
  const trace = body.context.trace as { trace_id: string, span_id: string }
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: body })
  t.equal(res.statusCode, 200)
  t.equal(parseSse(res.body).packets.at(-1)?.op, 'CLOSE')
  const out = header(res.headers.traceparent)
  t.equal(out.traceId, w3c(trace.trace_id), 'the response names the envelope\'s trace')
  await until('the run and request spans end', () => named(spans(), 'assist.run').length === 1 && named(spans(), 'request').length === 1)

  const request = one(spans(), 'request')
  const run = one(spans(), 'assist.run')
  t.equal(run.spanContext().traceId, out.traceId, 'the run\'s trace is the one the response names')
  t.equal(run.parentSpanContext?.spanId, w3c(trace.span_id).slice(0, 16), 'under the caller\'s span its envelope names')
  t.equal(run.parentSpanContext?.isRemote, true)
  t.not(request.spanContext().traceId, out.traceId, 'the request span started before the body was read, in a trace of its own')
  t.same(run.links.map((l) => l.context.spanId), [request.spanContext().spanId], 'linked to the request span')
  t.equal(out.spanId, request.spanContext().spanId, 'the response names the request span\'s id')
  t.match(run.attributes, { 'agent_host.run.mode': 'server_sent_events', 'agent_host.run.end': 'done', 'gen_ai.agent.name': 'echo-stream' })
})

t.test('a traceparent whose parent id is zeros: the trace is still continued, and the run goes in it, under the span the response names', async (t) => {
  const { app, spans } = await traced(t)
  const caller = '0af7651916cd43dd8448eb211c80319c'
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { traceparent: `00-${caller}-0000000000000000-01` }, payload: envelope(AGENTS.echo) })
  t.equal(res.statusCode, 200)
  const out = header(res.headers.traceparent)
  t.equal(out.traceId, caller)
  const request = one(spans(), 'request')
  t.not(request.spanContext().traceId, caller, 'the request span could not continue it (no valid parent)')
  const run = one(spans(), 'assist.run')
  t.equal(run.spanContext().traceId, caller)
  t.equal(run.parentSpanContext?.spanId, out.spanId)
  t.same(run.links.map((l) => l.context.spanId), [request.spanContext().spanId])
})

t.test('a request that starts its trace: the response names the request span\'s trace and span, and every log line of it carries that trace id; health checks and scrapes make no span', async (t) => {
  const { app, spans, lines } = await traced(t, { LOG_LEVEL: 'debug' })
  const res = await app.inject({ url: '/v1/agents' })
  t.equal(res.statusCode, 200)
  const out = header(res.headers.traceparent)
  const request = one(spans(), 'request')
  t.same([out.traceId, out.spanId, out.flags], [request.spanContext().traceId, request.spanContext().spanId, '01'])
  const of = (reqId: unknown): Array<Record<string, unknown>> => lines.filter((l) => l.reqId === reqId)
  const reqId = lines.find((l) => l.msg === 'incoming request')?.reqId
  t.same(of(reqId).map((l) => l.msg), ['incoming request', 'request completed'], 'at debug, the incoming line is still written, first')
  t.same([...new Set(of(reqId).map((l) => l.traceId))], [out.traceId], 'with the trace id of the response')

  lines.length = 0
  const scrape = await app.inject({ url: '/metrics' })
  t.equal(scrape.statusCode, 200)
  t.same(lines.map((l) => l.msg), ['incoming request', 'request completed'], 'a scrape is still logged')
  t.same([...new Set(lines.map((l) => l.traceId))], [header(scrape.headers.traceparent).traceId])
  await app.inject({ url: '/health' })
  t.same(named(spans(), 'request').length, 1, 'only the first request made a span')
})

t.test('an LLM call is a backend.call span under the run (backend, model, tokens), and the provider is sent it as its traceparent', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: openai.text(['Hello', ' there'], [12, 2]) })
  const { app, spans } = await traced(t, { LLM_PROVIDER: 'openai', OPENAI_BASE_URL: `${fake.url}/v1`, OPENAI_API_KEY: 'sk-test', OPENAI_MODEL: 'test-model', LLM_MAX_RETRIES: '0' })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(AGENTS.llmChat, { query: 'hi' }) })
  t.equal(res.statusCode, 200)
  await until('the run span ends', () => named(spans(), 'assist.run').length === 1)
  const run = one(spans(), 'assist.run')
  const call = one(spans(), 'backend.call')
  t.equal(call.spanContext().traceId, run.spanContext().traceId)
  t.equal(call.parentSpanContext?.spanId, run.spanContext().spanId, 'a child of the run span')
  t.match(call.attributes, {
    'agent_host.backend.name': 'openai',
    'agent_host.backend.transport': 'llm',
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': 'openai',
    'gen_ai.request.model': 'test-model',
    'gen_ai.usage.input_tokens': 12,
    'gen_ai.usage.output_tokens': 2
  })
  t.equal(call.status.code, SpanStatusCode.UNSET)
  t.equal(fake.received[0]?.headers.traceparent, `00-${call.spanContext().traceId}-${call.spanContext().spanId}-01`, 'the provider\'s parent is the backend call')
})

t.test('a local agent\'s call (send) is a backend.call span too: its transport, and the tokens it reports', async (t) => {
  const { app, spans } = await traced(t, { AGENTS_DIR: fileURLToPath(new URL('./fixtures/telemetry-agents/', import.meta.url)) })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(BACKEND_SEND, { backend: 'local', query: 'one two three' }) })
  t.equal(res.statusCode, 200)
  t.match(res.json().output, { text: 'local: three two one' })
  const call = one(spans(), 'backend.call')
  t.equal(call.parentSpanContext?.spanId, one(spans(), 'assist.run').spanContext().spanId)
  t.match(call.attributes, { 'agent_host.backend.name': 'local', 'agent_host.backend.transport': 'local_agent', 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.usage.input_tokens': 3, 'gen_ai.usage.output_tokens': 3 })
  t.notOk('gen_ai.request.model' in call.attributes, 'no model: the local agent names none')
})

t.test('a caller that does not sample: nothing of its request is recorded, and the response and the backend are told so', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ frames: openai.text(['Hello'], [3, 1]) })
  const { app, spans } = await traced(t, { LLM_PROVIDER: 'openai', OPENAI_BASE_URL: `${fake.url}/v1`, OPENAI_API_KEY: 'sk-test', OPENAI_MODEL: 'test-model', LLM_MAX_RETRIES: '0' })
  const caller = '5bf92f3577b34da6a3ce929d0e0e4737'
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream', traceparent: `00-${caller}-00f067aa0ba902b7-00` }, payload: envelope(AGENTS.llmChat, { query: 'hi' }) })
  t.equal(res.statusCode, 200)
  t.match(String(res.headers.traceparent), new RegExp(`^00-${caller}-[0-9a-f]{16}-00$`), 'the response says: not sampled')
  t.match(fake.received[0]?.headers.traceparent, new RegExp(`^00-${caller}-[0-9a-f]{16}-00$`), 'so does the backend call')
  t.same(spans().filter((s) => s.spanContext().traceId === caller), [], 'no span of the trace was recorded')
})

t.test('the engine without a trace from HTTP (another binding): the run goes under the caller\'s span its envelope names, or starts a trace if that is zeros', async (t) => {
  const { app, spans } = await traced(t)
  const body = envelope(AGENTS.echo)
  const trace = body.context.trace as { trace_id: string, span_id: string }
  const submission = await app.assist.submit(body as never, { identity: ANONYMOUS, delivery: 'request_response' })
  await app.assist.answer(submission.requestId)
  const run = one(spans(), 'assist.run')
  t.equal(run.spanContext().traceId, w3c(trace.trace_id))
  t.equal(run.parentSpanContext?.spanId, w3c(trace.span_id).slice(0, 16))

  const orphan = envelope(AGENTS.echo)
  ;(orphan.context.trace as { span_id: string }).span_id = '00000000-0000-0000-8000-000000000000'
  await app.assist.answer((await app.assist.submit(orphan as never, { identity: ANONYMOUS, delivery: 'request_response' })).requestId)
  const second = named(spans(), 'assist.run')[1]
  t.equal(second?.parentSpanContext, undefined, 'a root: no valid span to hang under')
})

t.test('a failing backend call: an error status on its span and on the run\'s', async (t) => {
  const fake = await fakeProvider(t)
  fake.script({ status: 401, json: { error: { message: 'Incorrect API key provided', type: 'invalid_request_error' } } })
  const { app, spans } = await traced(t, { LLM_PROVIDER: 'openai', OPENAI_BASE_URL: `${fake.url}/v1`, OPENAI_API_KEY: 'sk-test', OPENAI_MODEL: 'test-model', LLM_MAX_RETRIES: '0' })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENTS.llmChat, { query: 'hi' }) })
  t.not(res.statusCode, 200)
  const call = one(spans(), 'backend.call')
  t.equal(call.status.code, SpanStatusCode.ERROR)
  t.match(call.status.message, /401/)
  t.equal(call.attributes['error.type'], 'backend_failed')
  t.equal(call.events[0]?.name, 'exception', 'the exception is recorded')
  t.notOk('gen_ai.usage.input_tokens' in call.attributes, 'no usage: the call produced none')
  const run = one(spans(), 'assist.run')
  t.equal(call.parentSpanContext?.spanId, run.spanContext().spanId)
  t.equal(run.status.code, SpanStatusCode.ERROR, 'the run ended with the ERROR packet')
  t.equal(run.attributes['error.type'], 'backend_failed')
  t.equal(run.attributes['agent_host.run.end'], 'aborted')
})

t.test('a run ended by shutdown is an error; one the caller cancels is not', async (t) => {
  const { app, spans } = await traced(t, { CLOSE_GRACE_MS: '2000' })
  const body = envelope(AGENTS.echoStream, { query: 'a b c d e f g h i j k l m n o p', delay_ms: 200 })
  const answer = app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
  await until('the run has started', () => app.runs.size === 1)
  const cancelled = envelope(AGENTS.echoStream, { query: 'a b c d e f g h i j k l m n o p', delay_ms: 200 })
  const second = app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: cancelled })
  await until('both runs have started', () => app.runs.size === 2)
  t.equal((await app.inject({ method: 'POST', url: `/v1/assist/${cancelled.request_id}/cancel` })).statusCode, 202)
  await second
  await app.close()
  await answer
  const runs = named(spans(), 'assist.run')
  const of = (id: string): ReadableSpan | undefined => runs.find((s) => s.attributes['agent_host.run.request_id'] === id)
  t.match(of(body.request_id), { attributes: { 'agent_host.run.end': 'shutdown', 'error.type': 'shutting_down' }, status: { code: SpanStatusCode.ERROR } })
  t.match(of(cancelled.request_id), { attributes: { 'agent_host.run.end': 'cancelled' }, status: { code: SpanStatusCode.UNSET } })
})

t.test('storage commits are root spans of their own with their writes', async (t) => {
  const { app, spans } = await traced(t)
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.echo) })).statusCode, 200)
  const commits = named(spans(), 'storage.commit')
  t.ok(commits.length > 0, `${commits.length} commits`)
  for (const commit of commits) {
    t.equal(commit.parentSpanContext, undefined, 'a root')
    t.match(commit.attributes, { 'db.system.name': 'sqlite', 'agent_host.storage.failed_writes': 0, 'agent_host.storage.busy_retries': 0 })
    t.ok((commit.attributes['agent_host.storage.writes'] as number) >= 1)
  }
  const runTrace = one(spans(), 'assist.run').spanContext().traceId
  t.notOk(commits.some((c) => c.spanContext().traceId === runTrace), 'in traces of their own')
})

t.test('a commit that waited for another process\'s lock counts its busy tries; one that failed as a whole is an error', async (t) => {
  const dir = tempDataDir(t)
  const db = openDatabase(dir, { busyTimeoutMs: 10 })
  t.teardown(() => db.close())
  db.exec('CREATE TABLE scratch (id INTEGER PRIMARY KEY, v TEXT NOT NULL)')
  const insert = db.prepare('INSERT INTO scratch (id, v) VALUES (?, ?)')
  const { provider, spans } = memoryProvider(t)
  const writer = new SqliteGroupWriter(db, { budgetMs: 10_000 })
  writer.trace(provider.getTracer('test'))

  const holder = await holdDbLock(t, dir)
  const written = writer.write(() => insert.run(1, 'waited'))
  const rolledBack = writer.write(() => { throw new Error('rolled back alone') }).catch((err: unknown) => err)
  // the writer tries at the end of this turn (an immediate), finds the lock held and queues the writes again
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(writer.pending, 2, 'tried, and waiting for the lock')
  t.same(spans(), [], 'a try that found the lock held is no span of its own')
  await holder.release()
  await written
  t.match(await rolledBack, { message: 'rolled back alone' })
  const [waited] = named(spans(), 'storage.commit')
  t.match(waited?.attributes, { 'agent_host.storage.writes': 2, 'agent_host.storage.failed_writes': 1 })
  t.ok((waited?.attributes['agent_host.storage.busy_retries'] as number) >= 1, `busy tries: ${String(waited?.attributes['agent_host.storage.busy_retries'])}`)
  t.equal(waited?.status.code, SpanStatusCode.UNSET)
  t.ok(waited !== undefined && waited.duration[0] * 1e9 + waited.duration[1] > 0, 'it has a duration')

  await writer.write(() => insert.run(2, 'next'))
  t.equal(named(spans(), 'storage.commit')[1]?.attributes['agent_host.storage.busy_retries'], 0, 'counted again from zero')

  const again = await holdDbLock(t, dir)
  const refused = writer.write(() => insert.run(3, 'never')).catch((err: unknown) => err)
  writer.close()
  t.match(await refused, { code: /^SQLITE_BUSY/ })
  await again.release()
  const failed = named(spans(), 'storage.commit')[2]
  t.equal(failed?.status.code, SpanStatusCode.ERROR, 'the closing commit could not get the lock')
  t.match(failed?.attributes, { 'error.type': /^SQLITE_BUSY/, 'agent_host.storage.writes': 1 })
})

t.test('the propagator continues what tracing.ts continues (version 00, valid ids) and writes traceparent back', async (t) => {
  const propagator = new TraceparentPropagator()
  const getter: TextMapGetter<Record<string, string | string[]>> = { keys: (c) => Object.keys(c), get: (c, k) => c[k] }
  const setter: TextMapSetter<Record<string, string>> = { set: (c, k, v) => { c[k] = v } }
  const valid = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
  t.match(trace.getSpanContext(propagator.extract(ROOT_CONTEXT, { traceparent: ` ${valid.toUpperCase()} ` }, getter)), { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1, isRemote: true })
  for (const bad of ['01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', '00-00000000000000000000000000000000-00f067aa0ba902b7-01', 'garbage']) {
    t.equal(trace.getSpanContext(propagator.extract(ROOT_CONTEXT, { traceparent: bad }, getter)), undefined, bad)
  }
  t.equal(trace.getSpanContext(propagator.extract(ROOT_CONTEXT, { traceparent: [valid, valid] }, getter)), undefined, 'two headers: neither')
  t.same(propagator.fields(), ['traceparent'])

  for (const traceFlags of [0, 1]) {
    const carrier: Record<string, string> = {}
    propagator.inject(trace.setSpanContext(ROOT_CONTEXT, { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags }), carrier, setter)
    t.same(carrier, { traceparent: `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0${traceFlags}` })
  }
  const none: Record<string, string> = {}
  propagator.inject(ROOT_CONTEXT, none, setter)
  t.same(none, {}, 'no span: nothing')
})

t.test('startTelemetry: off unless the OTEL_* variables ask for traces', async (t) => {
  const cases: Array<[Record<string, string>, string[], string]> = [
    [{}, [], 'nothing set'],
    [{ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' }, [], 'settings without an exporter or endpoint'],
    [{ OTEL_TRACES_EXPORTER: 'otlp' }, ['otlp'], 'otlp'],
    [{ OTEL_TRACES_EXPORTER: ' Console , otlp,console' }, ['console', 'otlp'], 'a list, trimmed, case-insensitive'],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, ['otlp'], 'an endpoint'],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }, ['otlp'], 'a traces endpoint'],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' }, [], 'none'],
    [{ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'TRUE' }, [], 'the SDK disabled'],
    [{ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'false' }, ['otlp'], 'the SDK not disabled']
  ]
  for (const [env, exporters, what] of cases) {
    t.same(traceExporters(env), { exporters, warnings: [] }, what)
  }
  t.same(traceExporters({ OTEL_TRACES_EXPORTER: 'zipkin,otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }), {
    exporters: ['otlp'],
    warnings: ['OTEL_TRACES_EXPORTER: zipkin is not supported here (only otlp and console); ignored', 'OTEL_EXPORTER_OTLP_PROTOCOL: grpc is not supported here; traces are sent as http/protobuf']
  })
  t.same(traceExporters({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).warnings, [], 'the traces protocol wins')

  const said: Array<[string, string, object]> = []
  const log = { warn: (obj: object, msg: string) => { said.push(['warn', msg, obj]) }, error: (obj: object, msg: string) => { said.push(['error', msg, obj]) } }
  t.equal(await startTelemetry({}, log), undefined)
  t.equal(await startTelemetry({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' }, log), undefined)
  t.equal(await startTelemetry({ OTEL_TRACES_EXPORTER: 'jaeger' }, log), undefined, 'only an exporter it cannot make: off')
  t.match(said, [['warn', /jaeger is not supported/]], 'and says so')
  said.length = 0

  const on = await startTelemetry({ OTEL_TRACES_EXPORTER: 'otlp,console' }, log)
  t.ok(on !== undefined)
  t.same(on?.exporters, ['otlp', 'console'])
  t.ok(on?.provider instanceof NodeTracerProvider)
  diag.error('export failed', new Error('connection refused'))
  diag.warn('dropped 3 spans')
  diag.info('not worth a line')
  t.same(said, [
    ['error', 'OpenTelemetry: export failed', { details: ['Error: connection refused'] }],
    ['warn', 'OpenTelemetry: dropped 3 spans', {}]
  ], 'the SDK\'s complaints go to the log, from warn up')
  await on?.shutdown()
  said.length = 0
  diag.error('after shutdown')
  t.same(said, [], 'no longer once shut down')
})

/** A local OTLP/HTTP receiver: the bodies POSTed to /v1/traces, with their content type. */
async function collector (t: Teardown): Promise<{ url: string, posts: Array<{ type: string | undefined, body: Buffer }> }> {
  const posts: Array<{ type: string | undefined, body: Buffer }> = []
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => { chunks.push(c) })
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces') posts.push({ type: req.headers['content-type'], body: Buffer.concat(chunks) })
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => { await new Promise((resolve) => server.close(resolve)) })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, posts }
}

/** Whether an OTLP protobuf body holds the span named `name` of trace `traceId` (protobuf keeps strings and bytes as they are). */
const holds = (body: Buffer, name: string, traceId: string): boolean => body.includes(Buffer.from(name)) && body.includes(Buffer.from(traceId, 'hex'))

/** The resource attribute `service.name` = `name` as OTLP protobuf encodes it: KeyValue { key, value: AnyValue { string_value } }. */
const serviceName = (name: string): Buffer => Buffer.concat([Buffer.from('service.name'), Buffer.from([0x12, name.length + 2, 0x0a, name.length]), Buffer.from(name)])

t.test('end to end: a server with OTEL_EXPORTER_OTLP_ENDPOINT posts the request\'s spans to it as OTLP protobuf', async (t) => {
  const otlp = await collector(t)
  const server = await startServer(t, { DATA_DIR: tempDataDir(t), OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_BSP_SCHEDULE_DELAY: '50', OTEL_SERVICE_NAME: 'agent-host-e2e' })
  t.match(server.stdout(), /exporting OpenTelemetry traces/)
  const caller = 'b7ad6b7169203331b7ad6b7169203331'
  const res = await fetch(`${server.url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', traceparent: `00-${caller}-00f067aa0ba902b7-01` }, body: JSON.stringify(envelope(AGENTS.echo)) })
  t.equal(res.status, 200)
  await res.arrayBuffer()
  await until('the run\'s span is posted', () => otlp.posts.some((p) => holds(p.body, 'assist.run', caller)), 20_000, 20)
  t.ok(otlp.posts.every((p) => p.type === 'application/x-protobuf'), 'as protobuf')
  t.ok(otlp.posts.some((p) => holds(p.body, 'request', caller)), 'the request span too')
  t.ok(otlp.posts.some((p) => p.body.includes(serviceName('agent-host-e2e'))), 'with the service name of OTEL_SERVICE_NAME')
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0)
})

t.test('end to end: spans still buffered when the server stops are exported before it exits', async (t) => {
  const otlp = await collector(t)
  const server = await startServer(t, { DATA_DIR: tempDataDir(t), OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${otlp.url}/v1/traces`, OTEL_BSP_SCHEDULE_DELAY: '600000' })
  const caller = 'c7ad6b7169203331b7ad6b7169203332'
  const res = await fetch(`${server.url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', traceparent: `00-${caller}-00f067aa0ba902b7-01` }, body: JSON.stringify(envelope(AGENTS.echo)) })
  t.equal(res.status, 200)
  await res.arrayBuffer()
  t.same(otlp.posts, [], 'nothing sent yet: the batch waits ten minutes')
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0)
  t.ok(otlp.posts.some((p) => holds(p.body, 'assist.run', caller)), 'the run\'s span was flushed on the way out')
  t.ok(otlp.posts.some((p) => p.body.includes(serviceName('agent-host'))), 'service.name defaults to agent-host')
})
