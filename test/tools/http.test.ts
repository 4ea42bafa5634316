import t from 'tap'
import { randomUUID } from 'node:crypto'
import type { ToolRunContext } from '../../src/tools/tool-caller.js'
import { build } from '../helper.js'
import { startHttpMcpServer } from '../fixtures/tools/http-server.js'
import { ref, serversFile } from '../fixtures/tools/servers.js'

const runOf = (): ToolRunContext => ({ agent: 'tool-user', owner: 'owner-1', requestId: randomUUID(), sessionId: randomUUID(), traceId: randomUUID(), signal: new AbortController().signal })

t.test('a Streamable HTTP server: its headers carry secrets referenced from the environment, a restart loses the session and the retry connects again, a server that is gone is unavailable', async (t) => {
  const server = await startHttpMcpServer('s3cret')
  let current = server
  t.teardown(async () => { await current.close() })
  const app = await build(t, {
    WORKERS_PER_TYPE: '0',
    MCP_TOKEN: 's3cret',
    MCP_SERVERS_FILE: serversFile(t, {
      remote: { url: server.url, headers: { Authorization: `Bearer ${ref('MCP_TOKEN')}` }, actions: ['ping'], timeout: 10 },
      wrong: { url: server.url, headers: { Authorization: 'Bearer nope' }, actions: ['ping'], retries: 0 }
    })
  })
  const tools = app.tools.caller(runOf())
  t.match(await tools.call({ tool: 'remote', action: 'ping', args: {} }), { success: true, result: { content: [{ type: 'text', text: 'pong' }] } })
  t.match((await app.tools.describe())[0], { name: 'remote', transport: 'streamable_http', status: 'running', actions: [{ name: 'ping', listed: true, description: 'Answers pong' }] })
  t.match(await tools.call({ tool: 'wrong', action: 'ping', args: {} }), { success: false, error: /^server_unavailable: the MCP server of tool "wrong" could not be started or reached \(HTTP 401: / })

  // a restart: the same port, no sessions
  await current.close()
  current = await startHttpMcpServer('s3cret', server.port)
  t.match(await tools.call({ tool: 'remote', action: 'ping', args: {}, retry_on_failure: false }), { success: false, error: /^connection_lost: the connection to the MCP server of tool "remote" failed/ }, 'without a retry: the lost session is the answer')
  t.match(await tools.call({ tool: 'remote', action: 'ping', args: {} }), { success: true }, 'the next call connects again')
  await current.close()
  current = await startHttpMcpServer('s3cret', server.port)
  const run = runOf()
  t.match(await app.tools.caller(run).call({ tool: 'remote', action: 'ping', args: {} }), { success: true }, 'with a retry: the call itself survives the restart')
  t.match((await app.events.list({ request_id: run.requestId, type: 'tool.call' }))[0], { event: { data: { success: true, attempts: 2 } } })

  await current.close()
  const down = await tools.call({ tool: 'remote', action: 'ping', args: {} })
  t.match(down, { success: false, error: /^server_unavailable: .* \(after 2 attempts\)$/ }, 'gone: the retry cannot reach it either')

  current = await startHttpMcpServer('s3cret', server.port)
  t.match(await tools.call({ tool: 'remote', action: 'ping', args: {} }), { success: true })
  const session = current.requests.at(-1)?.split(' ')[1]
  await app.close()
  t.ok(current.requests.includes(`DELETE ${String(session)}`), 'closing ends the session')
})
