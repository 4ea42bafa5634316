import t from 'tap'
import { fileURLToPath } from 'node:url'
import { worker } from '../../src/commands/worker.js'
import { ownedBy, type TaskNode } from '../../src/storage/tasks/task.js'
import { build } from '../helper.js'
import { until } from '../socket.js'
import { FIXTURE_SERVER, NO_COVERAGE, serversFile } from '../fixtures/tools/servers.js'

// `agent-host worker`'s task agents get the same host as the server's (`assist/task-host.ts`): the
// MCP tools of MCP_SERVERS_FILE, called on behalf of the task's owner and recorded in the stores the
// server reads. The command runs in this process (its own stores on the server's DATA_DIR, which is
// what a worker process opens): a child process would only add its start-up.

const AGENTS_DIR = fileURLToPath(new URL('../fixtures/task-host/', import.meta.url))

t.test('a task done by agent-host worker calls a tool as its owner, recorded in the server\'s audit log', async (t) => {
  const servers = serversFile(t, { fx: { command: process.execPath, args: [FIXTURE_SERVER], env: NO_COVERAGE, actions: ['echo_args'] } })
  // no workers in the server: only the command's loop claims the task
  const app = await build(t, { AGENTS_DIR, WORKERS_PER_TYPE: '0', MCP_SERVERS_FILE: servers })
  const stop = new AbortController()
  const lines: string[] = []
  const io = { out: (line: string) => { lines.push(line) }, err: (line: string) => { lines.push(line) }, signal: stop.signal }
  const ended = worker('host-user', 1, { DATA_DIR: app.config.DATA_DIR, AGENTS_DIR, MCP_SERVERS_FILE: servers, TASK_POLL_MS: '20', LOG_LEVEL: 'silent' }, io)
  t.teardown(async () => { stop.abort(); await ended })
  await until('the worker to be ready', () => lines.some((line) => line.startsWith('worker ready')), 10_000)

  const [made] = await app.tasks.create([{ type: 'host-user', inputs: { calls: [{ tool: 'fx', action: 'echo_args', args: { path: 'w.ts' } }] }, metadata: ownedBy({ id: 'key-carol', agents: null, scopes: new Set(['assist:invoke']) }) }])
  const id = (made as TaskNode).id
  await until('the worker to finish the task', async () => (await app.tasks.get(id))?.status === 'COMPLETED', 10_000)
  t.match((await app.tasks.get(id))?.outputs?.artifacts, [{ tool: 'fx', success: true, result: { structuredContent: { path: 'w.ts' } } }])
  const rows = (await app.audit.list({ action: 'tool.call', limit: 100 })).filter((row) => row.details?.task === id)
  t.match(rows, [{ actor: 'key-carol', resource: 'fx.echo_args', success: true, details: { by: 'agent:host-user', task: id } }])
  t.match(await app.events.list({ task_id: id, type: 'tool.call' }), [{ event: { data: { agent: 'host-user', success: true } } }], 'its event too, in the same write')
  stop.abort()
  t.equal(await ended, 0, 'the worker stops (its tool servers with it)')
})
