import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { createAjv, toIssues } from '../../src/agents/json-schema.js'
import { ERROR_CATALOGUE } from '../../src/errors.js'
import { generateOpenApiComponents } from '../../src/protocol/components.js'
import { ECHO_AGENT_ID, EXAMPLE_SESSION_ID, generateOpenApiPath } from '../../src/protocol/openapi.js'
import { AGENTS, build } from '../helper.js'
import { checkServiceResponse, parseSse } from '../sse.js'

type Json = Record<string, any>

const METHODS = new Set(['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'])

async function documentOf (app: FastifyInstance): Promise<Json> {
  const res = await app.inject({ url: '/openapi.json' })
  if (res.statusCode !== 200) throw new Error(`/openapi.json answered ${res.statusCode}: ${res.body}`)
  return res.json()
}

/** A JSON pointer token. */
const esc = (token: string): string => token.replace(/~/g, '~0').replace(/\//g, '~1')

/** The error responses of an operation: every status from 400 up, but a /health 503 (a HealthCheckResponse saying `maintenance`). */
function errorResponsesOf (path: string, op: Json): Array<[string, Json]> {
  // the A2A HTTP+JSON binding answers its 400s and 404s with A2A's own error bodies (the A2A specification's), not this server's
  const a2aRest = /^\/a2a\/\{agent_id\}\/rest\//.test(path)
  return Object.entries(op.responses as Record<string, Json>).filter(([status]) => Number(status) >= 400 && !(path === '/health' && status === '503') && !(a2aRest && (status === '400' || status === '404')))
}

/** Every operation of the document, with its method and path. */
function operationsOf (doc: Json): Array<{ method: string, path: string, op: Json }> {
  return Object.entries(doc.paths as Record<string, Json>).flatMap(([path, item]) =>
    Object.entries(item).filter(([method]) => METHODS.has(method)).map(([method, op]) => ({ method, path, op: op as Json })))
}

/** Every example in the document (parameters, request bodies, responses, and schema `examples`), with the schema it illustrates. */
function examplesOf (doc: Json): Array<{ where: string, schema: unknown, value: unknown }> {
  const found: Array<{ where: string, schema: unknown, value: unknown }> = []
  const visit = (node: unknown, where: string, inSchema: boolean): void => {
    if (typeof node !== 'object' || node === null) return
    if (Array.isArray(node)) { node.forEach((item, i) => { visit(item, `${where}/${i}`, inSchema) }); return }
    const obj = node as Json
    if (inSchema) {
      // a JSON Schema's own `examples`: an array of values of that schema
      if (Array.isArray(obj.examples)) obj.examples.forEach((value: unknown, i: number) => found.push({ where: `${where}/examples/${i}`, schema: obj, value }))
    } else if ('schema' in obj) {
      // a Media Type or Parameter object: `example`, or `examples` as a map of Example objects
      if ('example' in obj) found.push({ where: `${where}/example`, schema: obj.schema, value: obj.example })
      for (const [name, example] of Object.entries((obj.examples ?? {}) as Record<string, Json>)) found.push({ where: `${where}/examples/${esc(name)}`, schema: obj.schema, value: example.value })
    }
    for (const [key, value] of Object.entries(obj)) {
      if (key === 'example' || key === 'examples') continue
      visit(value, `${where}/${esc(key)}`, inSchema || key === 'schema' || key === 'schemas')
    }
  }
  visit(doc.paths, '#/paths', false)
  visit(doc.components, '#/components', false)
  return found
}

/** Every `$ref` in the document, outside example values. */
function refsOf (node: unknown, where: string, out: Array<{ where: string, ref: string }> = []): Array<{ where: string, ref: string }> {
  if (typeof node !== 'object' || node === null) return out
  for (const [key, value] of Object.entries(node)) {
    if (key === '$ref' && typeof value === 'string') out.push({ where, ref: value })
    else if (key !== 'example' && key !== 'examples') refsOf(value, `${where}/${esc(key)}`, out)
  }
  return out
}

/** What a local JSON pointer (`#/a/b`) points to in `doc`, or undefined. */
function resolvePointer (doc: unknown, ref: string): unknown {
  if (!ref.startsWith('#/')) return undefined
  let node: unknown = doc
  for (const token of ref.slice(2).split('/').map((s) => decodeURIComponent(s).replace(/~1/g, '/').replace(/~0/g, '~'))) {
    if (typeof node !== 'object' || node === null || !Object.hasOwn(node, token)) return undefined
    node = (node as Json)[token]
  }
  return node
}

t.test('the document is OpenAPI 3.1: components from generateOpenApiComponents(), POST /v1/assist from generateOpenApiPath(), the same at /docs/json', async (t) => {
  const app = await build(t)
  const doc = await documentOf(app)
  t.equal(doc.openapi, '3.1.0')
  t.same(doc.paths['/v1/assist'], generateOpenApiPath())
  for (const [name, schema] of Object.entries(generateOpenApiComponents())) t.same(doc.components.schemas[name], schema, `components.schemas.${name}`)
  t.same((await app.inject({ url: '/docs/json' })).json(), doc, 'Swagger UI reads the same document')
})

t.test('every operation has an operationId, and they are unique and stable', async (t) => {
  const doc = await documentOf(await build(t))
  const ops = operationsOf(doc)
  for (const { method, path, op } of ops) t.match(op.operationId, /^[a-z][A-Za-z0-9]+$/, `${method.toUpperCase()} ${path} has a camelCase operationId`)
  const ids = ops.map(({ op }) => op.operationId as string)
  t.equal(new Set(ids).size, ids.length, 'no two operations share one')
  // generated clients name their methods after these: renaming one breaks them
  t.same(Object.fromEntries(ops.map(({ method, path, op }) => [`${method.toUpperCase()} ${path}`, op.operationId])), {
    'GET /health': 'getHealth',
    'GET /metrics': 'getMetrics',
    'GET /v1/agents': 'listAgents',
    'GET /v1/agents/{id}': 'getAgent',
    'GET /v1/agents/{id}/metrics': 'getAgentMetrics',
    'POST /v1/plans': 'createPlan',
    'GET /v1/plans/{id}': 'getPlan',
    'GET /v1/backends': 'listBackends',
    'GET /v1/usage': 'listBudgetUsage',
    'POST /v1/assist': 'assist',
    'POST /v1/assist/{request_id}/cancel': 'cancelAssist',
    'GET /v1/sessions/{session_id}/history': 'getSessionHistory',
    'DELETE /v1/sessions/{session_id}': 'deleteSession',
    'GET /v1/events': 'listEvents',
    'GET /v1/audit': 'listAuditRows',
    'GET /v1/audit/verify': 'verifyAudit',
    'GET /v1/audit/checkpoint': 'getAuditCheckpoint',
    'POST /v1/tasks': 'createTasks',
    'GET /v1/tasks': 'listTasks',
    'GET /v1/tasks/{id}': 'getTask',
    'POST /v1/tasks/{id}/cancel': 'cancelTask',
    'POST /v1/tasks/{id}/approvals/{approval_id}': 'answerTaskApproval',
    'GET /v1/tasks/{id}/events': 'listTaskEvents',
    'GET /v1/conversations/{id}/events': 'listConversationEvents',
    'POST /v1/bus/events': 'publishBusEvent',
    'GET /v1/bus/events': 'listBusEvents',
    'GET /v1/bus/subscriptions': 'listBusSubscriptions',
    'GET /v1/bus/dead-letters': 'listBusDeadLetters',
    'POST /v1/bus/dead-letters/{id}/retry': 'retryBusDeadLetter',
    'GET /v1/tools': 'listTools',
    'GET /.well-known/agent-card.json': 'a2aHostCard',
    'GET /a2a/{agent_id}/.well-known/agent-card.json': 'a2aAgentCard',
    'POST /a2a/{agent_id}': 'a2aJsonRpc',
    'POST /a2a/{agent_id}/rest/message:send': 'a2aRestSendMessage',
    'POST /a2a/{agent_id}/rest/message:stream': 'a2aRestStreamMessage',
    'GET /a2a/{agent_id}/rest/tasks': 'a2aRestListTasks',
    'GET /a2a/{agent_id}/rest/tasks/{task}': 'a2aRestGetTask',
    'POST /a2a/{agent_id}/rest/tasks/{task}': 'a2aRestTaskMethod',
    'POST /a2a/{agent_id}/rest/tasks/{task}/pushNotificationConfigs': 'a2aRestCreatePushConfig',
    'GET /a2a/{agent_id}/rest/tasks/{task}/pushNotificationConfigs': 'a2aRestListPushConfigs',
    'GET /a2a/{agent_id}/rest/tasks/{task}/pushNotificationConfigs/{config}': 'a2aRestGetPushConfig',
    'DELETE /a2a/{agent_id}/rest/tasks/{task}/pushNotificationConfigs/{config}': 'a2aRestDeletePushConfig',
    'GET /v1/a2a/push-deliveries': 'listPushDeliveries',
    'POST /mcp': 'mcpPost',
    'GET /mcp': 'mcpStream',
    'DELETE /mcp': 'mcpDeleteSession',
    'POST /ag-ui/{agent_id}': 'agUiRun',
    'POST /ai-sdk/{agent_id}/chat': 'aiSdkChat',
    'GET /ai-sdk/{agent_id}/chat/{chat_id}/stream': 'aiSdkChatResume',
    'POST /ai-sdk/{agent_id}/chat/{chat_id}/stop': 'aiSdkChatStop'
  })
})

t.test('every $ref resolves, and bodies and responses name their types', async (t) => {
  const doc = await documentOf(await build(t))
  const refs = refsOf(doc, '#')
  t.ok(refs.length > 100, `${refs.length} $refs`)
  for (const { where, ref } of refs) {
    t.match(ref, /^#\/components\/schemas\/[A-Za-z]+$/, `${where}: ${ref} points into components.schemas`)
    if (resolvePointer(doc, ref) === undefined) t.fail(`${where}: ${ref} resolves to nothing`)
  }
  const media = (op: Json, status: string, type = 'application/json'): unknown => op.responses[status]?.content?.[type]?.schema
  const op = (method: string, path: string): Json => doc.paths[path][method]
  t.same(op('post', '/v1/assist').requestBody.content['application/json'].schema, { $ref: '#/components/schemas/ServiceRequest' })
  t.same(media(op('post', '/v1/assist'), '200'), { $ref: '#/components/schemas/ServiceResponse' })
  t.same(media(op('post', '/v1/assist'), '200', 'text/event-stream'), { $ref: '#/components/schemas/StreamPacket' })
  t.same(media(op('get', '/v1/agents/{id}'), '200'), { $ref: '#/components/schemas/AgentDefinition' })
  t.same(doc.components.schemas.AgentList.properties.agents.items, { $ref: '#/components/schemas/AgentDefinition' })
  t.same(op('post', '/v1/tasks').requestBody.content['application/json'].schema, { $ref: '#/components/schemas/CreateTasks' })
  t.same(media(op('get', '/v1/tasks/{id}'), '200'), { $ref: '#/components/schemas/Task' })
  t.same(media(op('get', '/v1/sessions/{session_id}/history'), '200'), { $ref: '#/components/schemas/HistoryPage' })
  t.same(media(op('post', '/v1/assist/{request_id}/cancel'), '202'), { $ref: '#/components/schemas/CancelAccepted' })
  for (const { method, path, op } of operationsOf(doc)) {
    for (const [status, response] of errorResponsesOf(path, op)) {
      t.same(Object.keys(response.content), ['application/json'], `${method.toUpperCase()} ${path} ${status} is JSON`)
      const schema = response.content['application/json'].schema
      // /mcp answers JSON-RPC errors, the error body in error.data
      if (path === '/mcp') t.same(schema.properties.error.properties.data, { $ref: '#/components/schemas/ErrorBody' }, `${method.toUpperCase()} ${path} ${status} is a JSON-RPC error with an ErrorBody`)
      else t.same(schema, { $ref: '#/components/schemas/ErrorBody' }, `${method.toUpperCase()} ${path} ${status} is an ErrorBody`)
    }
  }
})

t.test('every example in the document validates against its schema', async (t) => {
  const doc = await documentOf(await build(t))
  const ajv = createAjv()
  const examples = examplesOf(doc)
  t.ok(examples.length > 60, `${examples.length} examples`)
  for (const [i, { where, schema, value }] of examples.entries()) {
    // the schema's $refs resolve against the document's components
    const validate = ajv.compile({ $id: `urn:agent-host:example:${i}`, components: doc.components, allOf: [schema] })
    const valid = validate(value)
    t.ok(valid, `${where}${valid ? '' : `: ${JSON.stringify(toIssues(validate.errors))}`}`)
  }
  t.ok(examples.some(({ where }) => where.includes('/parameters/')), 'parameters have examples too')
  t.ok(examples.some(({ where }) => where.includes('/requestBody/')), 'request bodies have examples too')
})

t.test('every documented error has examples whose statusCode is its status and whose code is in the catalogue', async (t) => {
  const doc = await documentOf(await build(t))
  const codes = new Set(ERROR_CATALOGUE.map((e) => e.code))
  let checked = 0
  for (const { method, path, op } of operationsOf(doc)) {
    for (const [status, response] of errorResponsesOf(path, op)) {
      const examples = Object.values((response.content?.['application/json']?.examples ?? {}) as Record<string, Json>)
      t.ok(examples.length > 0, `${method.toUpperCase()} ${path} ${status} has examples`)
      for (const example of examples) {
        checked++
        const value = path === '/mcp' ? example.value.error.data : example.value
        t.equal(value.statusCode, Number(status), `${method.toUpperCase()} ${path} ${status}: ${value.code as string} has statusCode ${status}`)
        t.ok(codes.has(value.code), `${value.code as string} is a catalogue code`)
      }
    }
  }
  t.ok(checked > 80, `${checked} error examples`)
  const notFound = doc.paths['/v1/assist'].post.responses['404'].content['application/json'].examples
  t.match(notFound.AH_ERR_AGENT_NOT_FOUND.value, { statusCode: 404, code: 'AH_ERR_AGENT_NOT_FOUND', error: 'Not Found' })
})

t.test('POST /v1/assist: both media types of the 200 are listed, so Swagger UI\'s media type list sets Accept; the description says how to stream', async (t) => {
  const doc = await documentOf(await build(t))
  const op = doc.paths['/v1/assist'].post
  t.same(Object.keys(op.responses['200'].content), ['application/json', 'text/event-stream'])
  // OpenAPI ignores a header parameter named Accept: the media type list is what sets it
  t.notOk((op.parameters as Json[]).some((p) => p.in === 'header' && String(p.name).toLowerCase() === 'accept'), 'no Accept parameter')
  t.match(op.description, /delivery_mode/)
  t.match(op.description, /Accept/)
  t.match(op.description, /\/playground/)
  t.match(op.description, /curl -N/)
})

/** The body Swagger UI pre-fills for an operation: its first example. */
function prefilled (doc: Json, path: string, method = 'post'): Json {
  const media = doc.paths[path][method].requestBody.content['application/json']
  return media.example ?? (Object.values(media.examples as Record<string, Json>)[0] as Json).value
}

t.test('Try it out: the pre-filled /v1/assist body asks the echo agent and answers 200 in JSON, again on a second Execute', async (t) => {
  const app = await build(t)
  const body = prefilled(await documentOf(app), '/v1/assist')
  t.equal(body.context.agent_id, AGENTS.echo)
  t.equal(body.context.agent_id, ECHO_AGENT_ID)
  for (const round of ['first', 'second']) {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body })
    t.equal(res.statusCode, 200, `${round} Execute answers 200`)
    t.match(res.headers['content-type'], /application\/json/)
    t.same(checkServiceResponse(res.json()).output, { echo: body.payload.payload.query, calls: 1 }, `${round} Execute: the same run's answer`)
  }
  const history = await app.inject({ url: `/v1/sessions/${EXAMPLE_SESSION_ID}/history` })
  t.equal(history.statusCode, 200, 'the history of the example session is there')
  t.equal(history.json().total, 1)
})

t.test('Try it out: the pre-filled /v1/assist body answers 200 in SSE mode (Accept: text/event-stream)', async (t) => {
  const app = await build(t)
  const body = prefilled(await documentOf(app), '/v1/assist')
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: body })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/event-stream/)
  const { packets } = parseSse(res.body)
  t.match(packets, [{ op: 'EVENT', p: { type: 'RESULT', data: { echo: body.payload.payload.query, calls: 1 } } }, { op: 'CLOSE', p: 'done' }])
})

t.test('Try it out: the other pre-filled examples work as they are', async (t) => {
  const app = await build(t)
  const doc = await documentOf(app)
  const created = await app.inject({ method: 'POST', url: '/v1/tasks', payload: prefilled(doc, '/v1/tasks') })
  t.equal(created.statusCode, 201, 'POST /v1/tasks with its example creates the task')
  t.notOk('warnings' in created.json(), 'an agent here serves the example task\'s type')
  const agentId = (doc.paths['/v1/agents/{id}'].get.parameters as Json[]).find((p) => p.name === 'id')?.example
  t.equal((await app.inject({ url: `/v1/agents/${String(agentId)}` })).statusCode, 200)
})
