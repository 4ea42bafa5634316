import t from 'tap'
import { randomUUID } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import { AH_ERR_RUN_ABORTED } from '../../src/errors.js'
import type { ToolResponse } from '../../src/protocol/tools.js'
import type { ToolRunContext } from '../../src/tools/tool-caller.js'
import { build, tempDataDir, type Teardown } from '../helper.js'
import { holdDbLock } from '../lock-holder.js'
import { until } from '../socket.js'
import { EVERYTHING_BIN, FILESYSTEM_BIN, FIXTURE_SERVER, NO_COVERAGE, ref, serversFile, tempDir } from '../fixtures/tools/servers.js'

/** A run for calls made straight through the registry: `tool-user`, with a signal of its own. */
function runOf (overrides: Partial<ToolRunContext> = {}): ToolRunContext {
  return { agent: 'tool-user', owner: 'owner-1', requestId: randomUUID(), sessionId: randomUUID(), traceId: randomUUID(), user: 'user-1', signal: new AbortController().signal, ...overrides }
}

/** The text of a successful call's first content block. */
function textOf (response: ToolResponse): string {
  return ((response.result as { content: Array<{ text: string }> }).content[0] as { text: string }).text
}

/** A workspace: `base/root` (the tool's root: packages/, tests/, docs/) and `base/outside`, a symlink inside pointing out. */
function workspace (t: Teardown): { base: string, root: string } {
  const base = tempDir(t)
  const root = join(base, 'root')
  for (const dir of ['packages', 'tests', 'docs']) mkdirSync(join(root, dir), { recursive: true })
  mkdirSync(join(base, 'outside'))
  writeFileSync(join(root, 'packages/a.ts'), 'export const a = 1\n')
  writeFileSync(join(root, 'docs/d.md'), '# docs\n')
  writeFileSync(join(base, 'outside/secret.txt'), 'the secret\n')
  symlinkSync(join(base, 'outside'), join(root, 'packages/escape'))
  return { base, root }
}

/** An app whose tools are `servers` (the file is written for it). */
async function appWith (t: Teardown, servers: Record<string, unknown>, env: Record<string, string> = {}): Promise<FastifyInstance> {
  return await build(t, { WORKERS_PER_TYPE: '0', MCP_SERVERS_FILE: serversFile(t, servers), ...env })
}

const fixture = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  command: process.execPath,
  args: [FIXTURE_SERVER],
  env: NO_COVERAGE,
  actions: ['pid', 'sleep', 'exit', 'exit_once', 'fail', 'throw', 'malformed', 'echo_args'],
  ...extra
})

/** Whether the fixture server that logs to `log` has been asked for `name`. */
function asked (log: string, name: string): boolean {
  return existsSync(log) && readFileSync(log, 'utf8').split('\n').some((line) => line !== '' && (JSON.parse(line) as { name: string }).name === name)
}

/** A pid's process is gone. */
function gone (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return false
  } catch {
    return true
  }
}

t.test('the filesystem server: a read through an alias works, is audited and is an event of the run', async (t) => {
  const { base, root } = workspace(t)
  const app = await appWith(t, {
    fs: { command: FILESYSTEM_BIN, args: [base], env: NO_COVERAGE, actions: { read: 'read_text_file', list: 'list_directory' }, scope: { root, paths: ['packages/**', 'tests/**'] } }
  })
  const run = runOf()
  const tools = app.tools.caller(run)
  const read = await tools.call({ tool: 'fs', action: 'read', args: { path: 'packages/a.ts' } })
  t.match(read, { tool: 'fs', action: 'read', success: true, result: { content: [{ type: 'text', text: 'export const a = 1\n' }], structuredContent: { content: 'export const a = 1\n' } } })
  t.notOk('error' in read, 'no error on success')
  t.ok(Number.isInteger(read.duration_ms) && read.duration_ms >= 0, 'duration_ms')
  const list = await tools.call({ tool: 'fs', action: 'list', args: { path: 'packages' } })
  t.match(textOf(list), /\[FILE\] a\.ts/)

  const rows = await app.audit.list({ action: 'tool.call', request_id: run.requestId })
  t.match(rows, [
    { actor: 'owner-1', action: 'tool.call', resource: 'fs.read', success: true, claimed_user: 'user-1', trace_id: run.traceId, details: { by: 'agent:tool-user', attempts: 1 } },
    { resource: 'fs.list', success: true }
  ], 'one audit row per call, the run\'s caller its actor')
  const events = await app.events.list({ request_id: run.requestId, type: 'tool.call' })
  t.equal(events.length, 2)
  t.match(events[0], { session_id: run.sessionId, trace_id: run.traceId, event: { specversion: '1.0', type: 'tool.call', source: 'agent-host/tools', subject: 'fs.read', data: { agent: 'tool-user', tool: 'fs', action: 'read', server_tool: 'read_text_file', success: true, attempts: 1 } } })
})

t.test('scope violations are refused before the server sees them: .., an absolute path outside, a symlink out, a glob not in scope', async (t) => {
  const { base, root } = workspace(t)
  const calls = join(tempDir(t), 'calls.jsonl')
  const app = await appWith(t, {
    fs: { command: FILESYSTEM_BIN, args: [base], env: NO_COVERAGE, actions: { read: 'read_text_file' }, scope: { root, paths: ['packages/**', 'tests/**'] } },
    wide: { command: FILESYSTEM_BIN, args: [base], env: NO_COVERAGE, actions: { read: 'read_text_file' }, scope: { root: base, paths: ['**'] } },
    echo: fixture({ env: { ...NO_COVERAGE, CALLS_LOG: calls }, scope: { root, paths: ['packages/**'] } })
  })
  const run = runOf()
  const tools = app.tools.caller(run)
  const refusals: Array<[string, string]> = [
    ['..', '../outside/secret.txt'],
    ['an absolute path outside', join(base, 'outside/secret.txt')],
    ['a symlink inside pointing outside', 'packages/escape/secret.txt'],
    ['a glob not in scope', 'docs/d.md']
  ]
  for (const [what, path] of refusals) {
    const response = await tools.call({ tool: 'fs', action: 'read', args: { path } })
    t.match(response, { success: false, result: null, error: /^scope_violation: argument "path" / }, what)
  }
  t.match((await tools.call({ tool: 'wide', action: 'read', args: { path: 'outside/secret.txt' } })), { success: true }, 'the server itself would have served the secret')

  const echoed = await tools.call({ tool: 'echo', action: 'echo_args', args: { path: 'packages/a.ts' } })
  t.same((echoed.result as { structuredContent: unknown }).structuredContent, { path: join(root, 'packages/a.ts') }, 'the server gets the absolute real path the host checked')
  t.match(await tools.call({ tool: 'echo', action: 'echo_args', args: { path: 'packages/escape/x' } }), { success: false, error: /^scope_violation/ })
  t.same(readFileSync(calls, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as unknown), [{ name: 'echo_args', args: { path: join(root, 'packages/a.ts') } }], 'the refused call never reached the server')
  t.match((await app.audit.list({ action: 'tool.call', request_id: run.requestId })).filter((r) => !r.success), Array(5).fill({ details: { attempts: 0, error: /^scope_violation/ } }), 'refusals are audited')
})

t.test('the rules before the scopes: an unknown tool, an agent not listed, an action not allowed; a branch pattern', async (t) => {
  const app = await appWith(t, {
    only: fixture({ agents: ['someone-else'] }),
    git: fixture({ actions: { branch: 'echo_args' }, scope: { branch_pattern: 'tdev/auto/*' } })
  })
  const tools = app.tools.caller(runOf())
  t.match(await tools.call({ tool: 'nope', action: 'x', args: {} }), { success: false, error: 'unknown_tool: no tool "nope" is registered (there are: only, git)' })
  t.match(await tools.call({ tool: 'only', action: 'pid', args: {} }), { success: false, error: 'agent_not_allowed: agent "tool-user" may not use tool "only"' })
  t.match(await tools.call({ tool: 'git', action: 'delete', args: {} }), { success: false, error: 'action_not_allowed: "delete" is not an action of tool "git" (its actions: branch)' })
  t.match(await tools.call({ tool: 'git', action: 'echo_args', args: {} }), { success: false, error: /^action_not_allowed/ }, 'an alias hides the server\'s own name')
  t.match(await tools.call({ tool: 'git', action: 'branch', args: { branch: 'main' } }), { success: false, error: 'scope_violation: argument "branch" "main" does not match the tool\'s branch pattern tdev/auto/*' })
  t.match(await tools.call({ tool: 'git', action: 'branch', args: { branch: 'tdev/auto/fix' } }), { success: true, result: { structuredContent: { branch: 'tdev/auto/fix' } } })
  t.equal(app.tools.get('only')?.connection.status, 'not_started', 'a refused call starts nothing')
})

t.test('no tools registered: every call is an unknown tool', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  t.match(await app.tools.caller(runOf()).call({ tool: 'fs', action: 'read', args: {} }), { success: false, error: 'unknown_tool: no tool "fs" is registered' })
})

t.test('a malformed call throws AH_ERR_TOOL_CALL_INVALID; a refusal never throws', async (t) => {
  const app = await appWith(t, { fx: fixture() })
  const tools = app.tools.caller(runOf())
  for (const call of [{ tool: 'fx', action: 'pid' }, { tool: 'fx', action: 'pid', args: {}, timeout: 0 }, { tool: 'fx', action: 'pid', args: {}, extra: 1 }, { tool: '', action: 'pid', args: {} }]) {
    await t.rejects(tools.call(call as never), { code: 'AH_ERR_TOOL_CALL_INVALID', message: /^Invalid tool call: \// }, JSON.stringify(call))
  }
})

t.test('a timeout: success false, the error says timeout, the request is cancelled and the server is still usable', async (t) => {
  const app = await appWith(t, { everything: { command: EVERYTHING_BIN, env: NO_COVERAGE, actions: { long: 'trigger-long-running-operation', echo: 'echo' } } })
  const run = runOf()
  const tools = app.tools.caller(run)
  // started first: the timeout counts the server's start too, and this one's start may take a second here
  t.match(await tools.call({ tool: 'everything', action: 'echo', args: { message: 'hi' } }), { success: true })
  const slow = await tools.call({ tool: 'everything', action: 'long', args: { duration: 30, steps: 30 }, timeout: 1 })
  t.match(slow, { success: false, result: null, error: /^timeout: the call took longer than its timeout of 1 s/ })
  t.equal(app.tools.get('everything')?.connection.status, 'running', 'a timeout is not a crash')
  t.match(await tools.call({ tool: 'everything', action: 'echo', args: { message: 'still here' } }), { success: true, result: { content: [{ text: 'Echo: still here' }] } })
  t.match((await app.events.list({ request_id: run.requestId, type: 'tool.call' }))[1], { event: { data: { success: false, attempts: 1, error: /^timeout/ } } }, 'a timeout is not retried')
})

t.test('a server that crashes mid-call fails the call clearly, and the next call starts it again', async (t) => {
  const log = join(tempDir(t), 'calls.jsonl')
  const app = await appWith(t, { fx: fixture({ env: { ...NO_COVERAGE, CALLS_LOG: log } }) })
  const tools = app.tools.caller(runOf())
  const crash = await tools.call({ tool: 'fx', action: 'exit', args: {}, retry_on_failure: false })
  t.match(crash, { success: false, result: null, error: 'server_exited: the MCP server of tool "fx" exited during the call' })
  const status = (await app.tools.describe())[0]
  t.match(status, { status: 'failed', error: /^the server's process exited/ }, 'listed as failed, with why')
  const first = await tools.call({ tool: 'fx', action: 'pid', args: {} })
  t.match(first, { success: true }, 'started again')
  const pid = Number(textOf(first))

  // killed from outside while a call is in flight
  const sleeping = tools.call({ tool: 'fx', action: 'sleep', args: { ms: 60_000 }, retry_on_failure: false })
  await until('the server to be asked', () => asked(log, 'sleep'), 30_000)
  process.kill(pid, 'SIGKILL')
  t.match(await sleeping, { success: false, error: /^server_exited: / }, 'a SIGKILL mid-call')
  const again = await tools.call({ tool: 'fx', action: 'pid', args: {} })
  t.match(again, { success: true })
  t.not(Number(textOf(again)), pid, 'a new process')
})

t.test('retry_on_failure: a call whose server crashes is made once more on a new server; not when the call or the tool says no', async (t) => {
  const dir = tempDir(t)
  const app = await appWith(t, { fx: fixture(), once: fixture({ retries: 0 }) })
  const run = runOf()
  const tools = app.tools.caller(run)
  const retried = await tools.call({ tool: 'fx', action: 'exit_once', args: { marker: join(dir, 'a') } })
  t.match(retried, { success: true })
  t.match(textOf(retried), /^survived in \d+$/)
  t.match((await app.events.list({ request_id: run.requestId, type: 'tool.call' })).at(-1), { event: { data: { success: true, attempts: 2 } } }, 'two attempts')

  t.match(await tools.call({ tool: 'fx', action: 'exit_once', args: { marker: join(dir, 'b') }, retry_on_failure: false }), { success: false, error: /^server_exited/ })
  t.ok(existsSync(join(dir, 'b')), 'the first attempt ran')
  t.match(await tools.call({ tool: 'once', action: 'exit_once', args: { marker: join(dir, 'c') } }), { success: false, error: /^server_exited/ }, 'a tool with retries 0')
  t.match(await tools.call({ tool: 'fx', action: 'exit', args: {} }), { success: false, error: /^server_exited: .* \(after 2 attempts\)$/ }, 'a server that crashes every time: the second failure is the answer')
})

t.test('a tool error, a protocol error and an answer that is not a result are failures, never retried', async (t) => {
  const app = await appWith(t, { fx: fixture() })
  const run = runOf()
  const tools = app.tools.caller(run)
  t.match(await tools.call({ tool: 'fx', action: 'fail', args: {} }), { success: false, error: 'tool_error: it went wrong', result: { content: [{ type: 'text', text: 'it went wrong' }] } })
  t.match(await tools.call({ tool: 'fx', action: 'throw', args: {} }), { success: false, error: /^server_error: MCP error -32603: the handler threw$/, result: null })
  t.match(await tools.call({ tool: 'fx', action: 'malformed', args: {} }), { success: false, error: /^server_error: the server's answer was not understood \(/, result: null })
  t.same((await app.events.list({ request_id: run.requestId, type: 'tool.call' })).map((e) => (e.event as { data: { attempts: number } }).data.attempts), [1, 1, 1])
  t.equal(app.tools.get('fx')?.connection.status, 'running')
})

t.test('closing the host while a server is still starting stops it at once; no server starts after', async (t) => {
  const pidFile = join(tempDir(t), 'pid')
  const app = await appWith(t, {
    mute: { command: process.execPath, args: ['-e', 'require("node:fs").writeFileSync(process.argv[1], String(process.pid)); setInterval(() => {}, 1000)', pidFile], env: NO_COVERAGE, actions: ['x'], startup_timeout: 600 }
  })
  const tools = app.tools.caller(runOf())
  const call = tools.call({ tool: 'mute', action: 'x', args: {}, timeout: 600 })
  await until('the server to be started', () => existsSync(pidFile) && readFileSync(pidFile, 'utf8') !== '', 30_000)
  t.equal(app.tools.get('mute')?.connection.status, 'starting', 'it never answers initialize')
  t.match(await tools.call({ tool: 'mute', action: 'x', args: {}, timeout: 1 }), { success: false, error: 'timeout: the MCP server of tool "mute" was not started within the call\'s timeout of 1 s' }, 'a call\'s timeout counts the start')
  await app.close()
  t.match(await call, { success: false, error: /^server_unavailable: / }, 'the call waiting for it answers')
  await until('the server to be stopped', () => gone(Number(readFileSync(pidFile, 'utf8'))), 30_000)
  t.match(await tools.call({ tool: 'mute', action: 'x', args: {} }), { success: false, error: /^server_unavailable: .*the host is shutting down/ })
  t.equal(app.tools.get('mute')?.connection.status, 'not_started')
})

t.test('a call whose record cannot be stored (the database locked elsewhere) still gets its answer', async (t) => {
  const dataDir = tempDataDir(t)
  const app = await appWith(t, { fx: fixture() }, { DATA_DIR: dataDir, DB_WRITE_BUDGET_MS: '50' })
  const run = runOf()
  const holder = await holdDbLock(t, dataDir)
  t.match(await app.tools.caller(run).call({ tool: 'nope', action: 'x', args: {} }), { success: false, error: /^unknown_tool/ })
  await holder.release()
  t.same(await app.audit.list({ action: 'tool.call', request_id: run.requestId }), [], 'nothing was recorded')
})

t.test('a server that cannot start: server_unavailable (retried), and listed failed with what it said', async (t) => {
  const app = await appWith(t, {
    missing: { command: join(tempDir(t), 'no-such-program'), actions: ['x'] },
    dies: { command: process.execPath, args: ['-e', 'console.error("cannot open the database"); process.exit(2)'], env: NO_COVERAGE, actions: ['x'] }
  })
  const run = runOf()
  const tools = app.tools.caller(run)
  t.match(await tools.call({ tool: 'missing', action: 'x', args: {} }), { success: false, error: /^server_unavailable: the MCP server of tool "missing" could not be started or reached \(.*ENOENT.*\) \(after 2 attempts\)$/ })
  t.match(await tools.call({ tool: 'dies', action: 'x', args: {}, retry_on_failure: false }), { success: false, error: /^server_unavailable: / })
  const [missing, dies] = await app.tools.describe()
  t.match(missing, { status: 'failed', error: /^the server did not start: .*ENOENT/ })
  t.match(dies, { status: 'failed', error: /^the server did not start: .*\(stderr: cannot open the database\)$/ })
})

t.test('the run\'s signal: a call in flight is aborted (the server cancels it), and none starts after', async (t) => {
  const log = join(tempDir(t), 'calls.jsonl')
  const app = await appWith(t, { fx: fixture({ env: { ...NO_COVERAGE, CALLS_LOG: log } }) })
  const controller = new AbortController()
  const tools = app.tools.caller(runOf({ signal: controller.signal }))
  t.match(await tools.call({ tool: 'fx', action: 'pid', args: {} }), { success: true })
  const sleeping = tools.call({ tool: 'fx', action: 'sleep', args: { ms: 60_000 } })
  await until('the server to be asked', () => asked(log, 'sleep'), 30_000)
  controller.abort(new AH_ERR_RUN_ABORTED('cancelled'))
  t.match(await sleeping, { success: false, error: 'aborted: the run was aborted (cancelled)' }, 'not retried either')
  t.match(await tools.call({ tool: 'fx', action: 'pid', args: {} }), { success: false, error: 'aborted: the run was aborted (cancelled)' })
  t.equal(app.tools.get('fx')?.connection.status, 'running', 'the server is fine')

  const other = new AbortController()
  other.abort()
  t.match(await app.tools.caller(runOf({ signal: other.signal })).call({ tool: 'fx', action: 'pid', args: {} }), { success: false, error: 'aborted: the run was aborted' })
})

t.test('a stdio server gets PATH and the like and what its entry names, never the host\'s other variables', async (t) => {
  process.env.AH_TOOLS_TEST_HOST_SECRET = 'not for servers'
  t.teardown(() => { delete process.env.AH_TOOLS_TEST_HOST_SECRET })
  const app = await appWith(t, { everything: { command: EVERYTHING_BIN, env: { ...NO_COVERAGE, SERVICE_TOKEN: ref('TOKEN_FOR_SERVER') }, actions: { env: 'get-env' } } }, { TOKEN_FOR_SERVER: 'resolved-at-boot', HOME: '/home/tester', PATH: process.env.PATH ?? '' })
  const response = await app.tools.caller(runOf()).call({ tool: 'everything', action: 'env', args: {} })
  const env = JSON.parse(textOf(response)) as Record<string, string>
  t.equal(env.SERVICE_TOKEN, 'resolved-at-boot', 'a reference resolved from the configuration\'s environment')
  t.equal(env.HOME, '/home/tester', 'SUBPROCESS_ENV_ALWAYS from the configuration\'s environment')
  t.equal(env.PATH, process.env.PATH)
  t.notOk('AH_TOOLS_TEST_HOST_SECRET' in env, 'nothing else of the host')
  t.notOk('TOKEN_FOR_SERVER' in env, 'not even the variable a reference named')
})

t.test('GET /v1/tools lists each tool: not started, then running with the server\'s descriptions and schemas; start=true starts them', async (t) => {
  const { root } = workspace(t)
  const app = await appWith(t, {
    fs: { command: FILESYSTEM_BIN, args: [root], env: NO_COVERAGE, agents: ['tool-user'], actions: { read: 'read_text_file', shred: 'shred_file' }, timeout: 10, retries: 0, scope: { root, paths: ['packages/**'] } },
    fx: fixture({ actions: ['pid'], scope: { branch_pattern: 'tdev/auto/*' } })
  })
  const before = await app.inject({ url: '/v1/tools' })
  t.equal(before.statusCode, 200)
  t.same(before.json(), {
    tools: [
      { name: 'fs', transport: 'stdio', status: 'not_started', agents: ['tool-user'], actions: [{ name: 'read', tool: 'read_text_file' }, { name: 'shred', tool: 'shred_file' }], scope: { root, paths: ['packages/**'], path_arguments: ['path', 'paths', 'source', 'destination'] }, timeout: 10, retries: 0 },
      { name: 'fx', transport: 'stdio', status: 'not_started', agents: null, actions: [{ name: 'pid', tool: 'pid' }], scope: { branch_pattern: 'tdev/auto/*', branch_arguments: ['branch'] }, timeout: 30, retries: 1 }
    ]
  }, 'listing starts nothing')
  await app.tools.caller(runOf()).call({ tool: 'fs', action: 'read', args: { path: 'packages/a.ts' } })
  const after = (await app.inject({ url: '/v1/tools' })).json() as { tools: Array<Record<string, unknown>> }
  t.match(after.tools[0], {
    status: 'running',
    actions: [
      { name: 'read', tool: 'read_text_file', listed: true, description: /Read the complete contents of a file/, input_schema: { type: 'object', properties: { path: { type: 'string' } } } },
      { name: 'shred', tool: 'shred_file', listed: false }
    ]
  }, 'asked of the running server; an action the server does not have is marked')
  t.equal(after.tools[1]?.status, 'not_started')
  const started = (await app.inject({ url: '/v1/tools?start=true' })).json() as { tools: Array<Record<string, unknown>> }
  t.match(started.tools[1], { status: 'running', actions: [{ name: 'pid', listed: true, description: 'This process\'s id', input_schema: { type: 'object' } }] })
  t.equal((await app.inject({ url: '/v1/tools?start=maybe' })).statusCode, 400)

  const fxPid = Number(textOf(await app.tools.caller(runOf()).call({ tool: 'fx', action: 'pid', args: {} })))
  await app.close()
  await until('the server to be stopped', () => gone(fxPid), 30_000)
  t.pass('closing the app stops every server')
})
