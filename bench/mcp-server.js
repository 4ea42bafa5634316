// The peer to beat for MCP: a bare official MCP server (@modelcontextprotocol/sdk's low-level Server,
// its Streamable HTTP transport in stateful mode, sessions in a Map) on node:http, with one tool,
// `echo`, that answers its `query` as text and as structured content. Prints one JSON line,
// {"url": ...}, once listening.
import { randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js'

const sessions = new Map()

function mcpServer () {
  const server = new Server({ name: 'bare-echo', version: '1.0.0' }, { capabilities: { tools: {} } })
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [{ name: 'echo', description: 'Echo the query', inputSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } }]
  }))
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    const query = String(request.params.arguments?.query ?? '')
    return { content: [{ type: 'text', text: query }], structuredContent: { echo: query } }
  })
  return server
}

const http = createServer((req, res) => {
  let body = ''
  req.setEncoding('utf8')
  req.on('data', (chunk) => { body += chunk })
  req.on('end', async () => {
    const parsed = body === '' ? undefined : JSON.parse(body)
    const id = req.headers['mcp-session-id']
    let transport = typeof id === 'string' ? sessions.get(id) : undefined
    if (transport === undefined && parsed !== undefined && isInitializeRequest(parsed)) {
      transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (sid) => { sessions.set(sid, transport) } })
      transport.onclose = () => { if (transport.sessionId !== undefined) sessions.delete(transport.sessionId) }
      await mcpServer().connect(transport)
    }
    if (transport === undefined) { res.writeHead(404).end(); return }
    await transport.handleRequest(req, res, parsed)
  })
})
http.listen(0, '127.0.0.1', () => { process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${http.address().port}` }) + '\n') })
process.on('SIGTERM', () => { http.close(); process.exit(0) })
