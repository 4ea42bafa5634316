import t from 'tap'
import { docBlocks, runShell } from '../docs/doc-blocks.js'
import { listen } from '../helper.js'

// The "Connect a client" section of docs/mcp.md, run as written (only the port changes): its client configuration
// is JSON, and its curl sequence works against a server that wants a key.

const KEY = 'readme-mcp-key-0123456789abcdefghij'

function section (): { json: string[], sh: string[] } {
  const blocks = (lang: string): string[] => docBlocks('docs/mcp.md', '### Connect a client', lang)
  return { json: blocks('json'), sh: blocks('sh') }
}

t.test('the guide\'s MCP section: the client configuration is an mcpServers entry for /mcp with a bearer header', async (t) => {
  const [config] = section().json
  t.match(JSON.parse(config as string), { mcpServers: { 'agent-host': { type: 'http', url: 'http://127.0.0.1:3000/mcp', headers: { Authorization: 'Bearer $' + '{AGENT_HOST_KEY}' } } } })
})

t.test('the guide\'s MCP section works as written: initialize, tools/list, tools/call of echo and echo-stream, DELETE', async (t) => {
  const { url } = await listen(t, { AUTH_MODE: 'apikey', API_KEYS: JSON.stringify([{ name: 'mcp', key: KEY, scopes: ['assist:invoke'] }]) })
  const [script] = section().sh
  t.ok(script, 'a shell block')
  const out = await runShell((script as string).replaceAll('http://127.0.0.1:3000', url), { env: { AGENT_HOST_KEY: KEY } })
  const messages = out.split('\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as { id?: number, method?: string, result?: Record<string, unknown> })
  const listed = (messages.find((m) => m.id === 2)?.result as { tools: Array<{ name: string }> } | undefined)?.tools ?? []
  t.match(listed.find((tool) => tool.name === 'echo'), { name: 'echo', inputSchema: { type: 'object' } }, 'tools/list')
  t.match(messages.find((m) => m.id === 3)?.result, { structuredContent: { echo: 'hello over MCP', calls: 1 } }, 'tools/call of echo')
  t.match(messages.find((m) => m.method === 'notifications/message'), { params: { level: 'info', logger: 'echo-stream', data: { thought: 'Processing request...' } } }, 'the thought')
  t.match(messages.find((m) => m.id === 4)?.result, { content: [{ type: 'text', text: 'one two three ' }] }, 'tools/call of echo-stream')
  t.match(out.trim().split('\n').at(-1), /^200$/, 'DELETE ended the session')
})

t.test('the guide\'s human-in-the-loop example over MCP works as written: the ask tool says input is required, and the same tool called again answers it', async (t) => {
  const { url } = await listen(t, { AUTH_MODE: 'apikey', API_KEYS: JSON.stringify([{ name: 'mcp', key: KEY, scopes: ['assist:invoke'] }]) })
  const [script] = docBlocks('docs/mcp.md', '### Human in the loop over MCP')
  t.ok(script, 'a shell block')
  const out = await runShell((script as string).replaceAll('http://127.0.0.1:3000', url), { env: { AGENT_HOST_KEY: KEY } })
  t.equal(out.trim().split('\n').at(-1), '{"question":"Which colour?","answer":"blue"}', out)
})
