import t from 'tap'
import { fileURLToPath } from 'node:url'
import { listen } from '../helper.js'
import { connect } from './client.js'

const MCP_AGENTS_DIR = fileURLToPath(new URL('../fixtures/mcp-agents/', import.meta.url))
const ADMIN_KEY = 'mcp-admin-key-0123456789abcdefghij'

t.test('tool names fit the spec: characters it does not allow become _, a clash falls back to the agent id; an agent with several capabilities has a tool each', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: MCP_AGENTS_DIR })
  const { client } = await connect(t, url)
  const { tools } = await client.listTools()
  t.same(tools.map((tool) => tool.name), ['multi_tool_.first', 'multi_tool_.second', 'multi_tool_.third', 'f0000000-0000-4000-8000-00000000b002', 'promise'])
  for (const { name } of tools) t.match(name, /^[A-Za-z0-9_.-]{1,128}$/, `${name} is a valid tool name`)
  const [first, second, third, clash] = tools
  t.match(first, { title: 'multi tool!: first', description: 'The first capability', annotations: { title: 'multi tool!: first', readOnlyHint: true, idempotentHint: true } })
  t.notOk('openWorldHint' in (first?.annotations ?? {}), 'a hint that is not a boolean is not passed on')
  t.notOk('made_up' in (first?.annotations ?? {}), 'nor one MCP does not know')
  t.same(second?.inputSchema, { anyOf: [{ type: 'object', required: ['a'] }, { type: 'object', required: ['b'] }], type: 'object' }, 'an object at the root, as MCP requires')
  t.same(third?.inputSchema, { type: 'object' }, 'a capability without inputs takes any object')
  t.notOk(third?.outputSchema)
  t.match(clash, { title: 'multi tool?.first', description: 'multi tool?.first' }, 'no description: its title')
  t.same((await client.callTool({ name: 'multi_tool_.second', arguments: { b: 2 } })).content, [{ type: 'text', text: 'second: {"b":2}' }], 'each tool runs its own capability')
  t.same((await client.callTool({ name: 'multi_tool_.first', arguments: { n: 1 } })).content, [{ type: 'text', text: 'first: {"n":1}' }])
  const neither = await client.callTool({ name: 'multi_tool_.second', arguments: { c: 3 } })
  t.equal(neither.isError, true)
  t.match(((neither.content as Array<{ text: string }>)[0] as { text: string }).text, /^Invalid arguments: .*\/ must match a schema in anyOf/, 'a failure at the root of the arguments is at /')
})

t.test('an agent that requires authentication is not a tool for an anonymous caller, and is for a key', async (t) => {
  const off = await listen(t, { AGENTS_DIR: MCP_AGENTS_DIR })
  const anonymous = await connect(t, off.url)
  t.notOk((await anonymous.client.listTools()).tools.some((tool) => tool.name === 'private'), 'not listed')
  await t.rejects(anonymous.client.callTool({ name: 'private', arguments: {} }), { code: -32602, message: /Unknown tool: private/ }, 'not callable')

  const on = await listen(t, { AGENTS_DIR: MCP_AGENTS_DIR, AUTH_MODE: 'apikey', API_KEYS: JSON.stringify([{ name: 'admin', key: ADMIN_KEY, scopes: ['admin'] }]) })
  const admin = await connect(t, on.url, { key: ADMIN_KEY })
  t.ok((await admin.client.listTools()).tools.some((tool) => tool.name === 'private'), 'listed for a key')
  t.same((await admin.client.callTool({ name: 'private', arguments: {} })).content, [{ type: 'text', text: 'secret' }])
})

t.test('a tool with an outputSchema: its result is the structuredContent; a run that ends without one breaks the schema\'s promise, an isError', async (t) => {
  const { url } = await listen(t, { AGENTS_DIR: MCP_AGENTS_DIR })
  const { client } = await connect(t, url)
  const promise = (await client.listTools()).tools.find((tool) => tool.name === 'promise')
  t.same(promise?.outputSchema, { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] })
  const kept = await client.callTool({ name: 'promise', arguments: { give: true } })
  t.same(kept.structuredContent, { n: 1 }, 'and the SDK client checked it against the schema')
  const broken = await client.callTool({ name: 'promise', arguments: { give: false } })
  t.equal(broken.isError, true)
  t.same(broken.content, [{ type: 'text', text: 'no result' }, { type: 'text', text: 'agent_contract_violation: the agent ended without calling result(), which its outputSchema promises' }])
})
