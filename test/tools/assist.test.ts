import t from 'tap'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import type { ToolResponse } from '../../src/protocol/tools.js'
import { build, envelope, type Teardown } from '../helper.js'
import { checkErrorBody } from '../sse.js'
import { until } from '../socket.js'
import { FILESYSTEM_BIN, FIXTURE_SERVER, NO_COVERAGE, serversFile, tempDir, TOOL_AGENTS_DIR, TOOL_STRANGER, TOOL_USER } from '../fixtures/tools/servers.js'

const JSON_ACCEPT = { accept: 'application/json' }

/** A root with `packages/a.ts` and `docs/d.md`, an fs tool over it (scope `packages/**`, for `tool-user` only) and the fixture server (anyone). */
async function setup (t: Teardown, env: Record<string, string> = {}): Promise<{ app: FastifyInstance, root: string, log: string }> {
  const root = tempDir(t)
  mkdirSync(join(root, 'packages'))
  mkdirSync(join(root, 'docs'))
  writeFileSync(join(root, 'packages/a.ts'), 'export const a = 1\n')
  writeFileSync(join(root, 'docs/d.md'), '# docs\n')
  const log = join(tempDir(t), 'calls.jsonl')
  const file = serversFile(t, {
    fs: { command: FILESYSTEM_BIN, args: [root], env: NO_COVERAGE, agents: ['tool-user'], actions: { read: 'read_text_file' }, scope: { root, paths: ['packages/**'] } },
    fx: { command: process.execPath, args: [FIXTURE_SERVER], env: { ...NO_COVERAGE, CALLS_LOG: log }, actions: ['pid', 'sleep'] }
  })
  const app = await build(t, { WORKERS_PER_TYPE: '0', AGENTS_DIR: TOOL_AGENTS_DIR, MCP_SERVERS_FILE: file, ...env })
  return { app, root, log }
}

/** Run `calls` as `agent` in JSON mode. */
async function assist (app: FastifyInstance, agent: string, calls: unknown[], extra: Parameters<typeof envelope>[2] = {}, headers: Record<string, string> = {}): Promise<{ status: number, body: Record<string, unknown>, requestId: string }> {
  const body = envelope(agent, { calls }, extra)
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { ...JSON_ACCEPT, ...headers }, payload: body })
  return { status: res.statusCode, body: res.json(), requestId: body.request_id }
}

t.test('an agent reads a file through host.tools, a scope violation is refused, and each call is audited and an event of its run', async (t) => {
  const { app } = await setup(t)
  const { status, body, requestId } = await assist(app, TOOL_USER, [
    { tool: 'fs', action: 'read', args: { path: 'packages/a.ts' } },
    { tool: 'fs', action: 'read', args: { path: '../../etc/passwd' } },
    { tool: 'fs', action: 'read', args: { path: 'docs/d.md' } },
    { tool: 'fs', action: 'write', args: { path: 'packages/b.ts', content: 'x' } }
  ])
  t.equal(status, 200)
  const responses = (body.output as { responses: ToolResponse[] }).responses
  t.match(responses, [
    { tool: 'fs', action: 'read', success: true, result: { content: [{ type: 'text', text: 'export const a = 1\n' }] } },
    { success: false, result: null, error: /^scope_violation: argument "path" "\.\.\/\.\.\/etc\/passwd" resolves outside the tool's root/ },
    { success: false, error: /^scope_violation: .*is not in the tool's scope \(packages\/\*\*\)/ },
    { success: false, error: /^action_not_allowed: "write" is not an action of tool "fs" \(its actions: read\)/ }
  ])
  for (const r of responses) t.ok(Number.isInteger(r.duration_ms), 'duration_ms')

  const rows = await app.audit.list({ action: 'tool.call', request_id: requestId })
  t.match(rows.map((r) => [r.resource, r.success]), [['fs.read', true], ['fs.read', false], ['fs.read', false], ['fs.write', false]], 'every call audited, refusals too')
  t.match(rows[0], { actor: 'anonymous', claimed_user: 'user-1', details: { by: 'agent:tool-user' } })
  const events = await app.events.list({ request_id: requestId, type: 'tool.call' })
  t.match(events.map((e) => e.event), [
    { type: 'tool.call', data: { agent: 'tool-user', tool: 'fs', action: 'read', server_tool: 'read_text_file', success: true, attempts: 1 } },
    { data: { success: false, attempts: 0, error: /^scope_violation/ } },
    { data: { success: false, attempts: 0, error: /^scope_violation/ } },
    { data: { success: false, attempts: 0, error: /^action_not_allowed/ } }
  ], 'in the run\'s events (GET /v1/events?type=tool.call)')
  const listed = await app.inject({ url: `/v1/events?request_id=${requestId}&type=tool.call` })
  t.equal((listed.json() as { events: unknown[] }).events.length, 4)
})

t.test('an agent a tool does not list is refused', async (t) => {
  const { app } = await setup(t)
  const { body } = await assist(app, TOOL_STRANGER, [{ tool: 'fs', action: 'read', args: { path: 'packages/a.ts' } }, { tool: 'fx', action: 'pid', args: {} }])
  t.match((body.output as { responses: ToolResponse[] }).responses, [
    { success: false, error: 'agent_not_allowed: agent "tool-stranger" may not use tool "fs"' },
    { success: true }
  ])
})

t.test('a malformed call throws to the agent (here it ends the run with the message)', async (t) => {
  const { app } = await setup(t)
  const { status, body } = await assist(app, TOOL_USER, [{ tool: 'fs', action: 'read' }])
  t.equal(status, 502)
  t.match(checkErrorBody(body), { code: 'AH_ERR_AGENT_FAILED', details: { error: { code: 'agent_failed', message: /^Invalid tool call: \/args must have required property 'args'/, details: { code: 'AH_ERR_TOOL_CALL_INVALID' } } } })
})

t.test('the run\'s end aborts its call in flight: a run timeout stops the tool call, which is recorded as aborted', async (t) => {
  const { app, log } = await setup(t)
  // the tool's server started and connected first (a call of its own): the run's 3 s are then the
  // call's, not a loaded machine's time to spawn the server, which once took them all
  t.match((await assist(app, TOOL_USER, [{ tool: 'fx', action: 'pid', args: {} }])).body.output, { responses: [{ success: true }] })
  const { status, body, requestId } = await assist(app, TOOL_USER, [{ tool: 'fx', action: 'sleep', args: { ms: 60_000 }, timeout: 120 }], { agentRequest: { metadata: { timeout_ms: 3000 } } })
  t.equal(status, 504)
  t.match(checkErrorBody(body), { code: 'AH_ERR_RUN_TIMEOUT' })
  t.ok(existsSync(log) && readFileSync(log, 'utf8').includes('"sleep"'), 'the call had reached the server')
  await until('the call to be recorded', async () => (await app.events.list({ request_id: requestId, type: 'tool.call' })).length === 1, 30_000)
  t.match((await app.events.list({ request_id: requestId, type: 'tool.call' }))[0]?.event, { data: { tool: 'fx', action: 'sleep', success: false, error: 'aborted: the run was aborted (timeout)' } })
})

t.test('GET /v1/tools needs agents:read; with no servers file it lists nothing', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0', AUTH_MODE: 'apikey' })
  const reader = (await app.keys.create({ name: 'reader', scopes: ['agents:read'] })).key
  const other = (await app.keys.create({ name: 'other', scopes: ['tasks:read'] })).key
  t.equal((await app.inject({ url: '/v1/tools' })).statusCode, 401)
  t.equal((await app.inject({ url: '/v1/tools', headers: { authorization: `Bearer ${other}` } })).statusCode, 403)
  const res = await app.inject({ url: '/v1/tools', headers: { authorization: `Bearer ${reader}` } })
  t.equal(res.statusCode, 200)
  t.same(res.json(), { tools: [] })
})

t.test('GET /v1/tools is in the OpenAPI document', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const doc = (await app.inject({ url: '/openapi.json' })).json() as { paths: Record<string, Record<string, { operationId: string, parameters: Array<{ name: string }> }>> }
  t.match(doc.paths['/v1/tools']?.get, { operationId: 'listTools', parameters: [{ name: 'start' }] })
})
