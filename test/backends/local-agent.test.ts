import t from 'tap'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { delimiter, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { BackendError } from '../../src/agents/index.js'
import { LocalAgentProtocol } from '../../src/backends/local/local-agent-protocol.js'
import { AH_ERR_BACKEND_CONFIG } from '../../src/errors.js'
import { ParseState, type ParseResult, type ProtocolContext, type StreamChunk } from '../../src/backends/protocol.js'
import { memory } from '../fixtures/memory.js'
import { tempDataDir, type Teardown } from '../helper.js'

const TOY = fileURLToPath(new URL('../fixtures/cli/toy-agent.mjs', import.meta.url))

function make (t: Teardown, options: { timeoutMs?: number, dataDir?: string } = {}) {
  const warnings: Array<Record<string, unknown>> = []
  const dataDir = options.dataDir ?? tempDataDir(t)
  const protocol = new LocalAgentProtocol({
    command: [process.execPath, TOY],
    dataDir,
    workspace: 'toys',
    inactivityTimeoutMs: options.timeoutMs ?? 5000,
    log: { info () {}, warn (obj) { warnings.push(obj as Record<string, unknown>) }, error () {} }
  })
  t.teardown(() => protocol.close())
  return { protocol, warnings, dataDir }
}

function collector (extra: Partial<ProtocolContext> = {}): { chunks: StreamChunk[], ctx: ProtocolContext } {
  const chunks: StreamChunk[] = []
  return { chunks, ctx: { onStreamMessage: (c) => { chunks.push(c) }, ...extra } }
}

const user = (content: string) => [{ role: 'user' as const, content }]

/** Whether `pid` runs (a zombie waiting for a parent that will never reap it counts as gone). */
function alive (pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

t.test('a turn streams text and reasoning in order; usage, cost and stop reason; totals over turns', async (t) => {
  const { protocol } = make(t)
  t.equal(protocol.transportType(), 'local_agent')
  const { chunks, ctx } = collector()
  const id = await protocol.start({ sessionId: 's1' }, ctx)
  t.equal(id, 's1')
  const response = await protocol.send(id, user('hello there'), ctx)
  t.same(chunks.filter((c) => c.type === 'text').map((c) => (c as { text: string }).text), ['you', ' said:', ' hello', ' there'])
  t.same(chunks.filter((c) => c.type !== 'text'), [{ type: 'reasoning', text: 'that was easy' }, { type: 'usage', usage: { input: 2, output: 4 }, cost: 0.5 }])
  t.match(response, { content: 'you said: hello there', toolCalls: [], usage: { input: 2, output: 4 }, stopReason: 'end_turn', metadata: { cost: 0.5 } })
  await protocol.send(id, user('again'), ctx)
  t.same(protocol.getUsage(id), { input: 3, output: 7, cost: 1, turns: 2 })
  t.equal(protocol.getUsage('nobody'), null)
  t.same(protocol.formatMessages(user('x')), { type: 'messages', messages: [{ role: 'user', content: 'x' }] })
})

t.test('a second message while the first is being answered is refused, and the first is unharmed', async (t) => {
  const { protocol } = make(t)
  const { ctx } = collector()
  const first = protocol.send('s-busy', user('split'), ctx)
  await sleep(20)
  t.match(await protocol.send('s-busy', user('hello'), ctx).catch((e: unknown) => e), { streamCode: 'backend_failed', severity: 'TRANSIENT', message: /still answering/ })
  t.equal((await first).content, 'héllo 🌍')
  t.equal((await protocol.send('s-busy', user('history'), ctx)).content, 'seen 2', 'the refused message never reached the agent')
})

t.test('JSON lines split across writes, even inside a UTF-8 character, arrive whole', async (t) => {
  const { protocol } = make(t)
  const { chunks, ctx } = collector()
  const response = await protocol.resume('s-split', user('split'), ctx)
  t.equal(response.sessionId, 's-split')
  t.same(chunks, [{ type: 'text', text: 'héllo 🌍' }])
  t.equal(response.response.content, 'héllo 🌍')
})

t.test('parseStream gives the same messages however a recorded stream is split', async (t) => {
  const { protocol } = make(t)
  const recorded = Buffer.from([
    JSON.stringify({ type: 'reasoning', text: 'planning…' }),
    JSON.stringify({ type: 'text', text: 'naïve café 日本 🌍' }),
    '',
    JSON.stringify({ type: 'result', usage: { input: 1, output: 2 } }),
    JSON.stringify({ type: 'eof' })
  ].join('\r\n') + '\n')
  const run = (parts: Buffer[]): ParseResult[] => {
    const state = new ParseState()
    const out = parts.flatMap((p) => protocol.parseStream(p, state))
    return [...out, ...protocol.parseStream(null, state)].filter((r) => r.type !== 'partial')
  }
  const whole = run([recorded])
  t.equal(whole.filter((r) => r.type === 'message').length, 3)
  t.same(whole.map((r) => r.type), ['message', 'message', 'message', 'eof', 'eof'])
  let same = 0
  for (let cut = 0; cut <= recorded.length; cut++) {
    if (JSON.stringify(run([recorded.subarray(0, cut), recorded.subarray(cut)])) === JSON.stringify(whole)) same++
  }
  t.equal(same, recorded.length + 1, 'split in two at every byte boundary')
  t.same(run([...recorded].map((b) => Buffer.from([b]))), whole, 'one byte at a time')
  t.same(protocol.parseStream('{"type":"text"', new ParseState()), [{ type: 'partial' }])
  t.match(protocol.parseStream('[1,2]\n', new ParseState()), [{ type: 'error' }])
  const unterminated = new ParseState()
  t.same(protocol.parseStream('{"type":"text","text":"x"}', unterminated), [{ type: 'partial' }])
  t.same(protocol.parseStream(null, unterminated), [{ type: 'message', message: { type: 'text', text: 'x' } }, { type: 'eof' }], 'the end of input completes an unterminated last line')
})

t.test('a crash mid-turn is a TRANSIENT backend_failed with the exit code; the next turn respawns', async (t) => {
  const { protocol } = make(t)
  const mem = memory()
  const { chunks, ctx } = collector({ memory: mem })
  await protocol.send('s-crash', user('hi'), ctx)
  const err = await protocol.send('s-crash', user('crash'), ctx).catch((e: unknown) => e)
  t.ok(err instanceof BackendError)
  t.match(err, { streamCode: 'backend_failed', severity: 'TRANSIENT', details: { exit_code: 3 }, message: /exited with code 3/ })
  t.ok(chunks.some((c) => c.type === 'text' && c.text === 'about to crash'), 'what came before the crash was streamed')
  const after = await protocol.send('s-crash', user('history'), ctx)
  t.equal(after.content, 'seen 3', 'respawned with the history (hi and its answer; the failed turn is not kept) and the new message')
  await t.rejects(protocol.send('s-crash', user('quit'), ctx), { streamCode: 'backend_failed', severity: 'FATAL', message: /exited before it sent a result/ })
})

t.test('a line that is not JSON is a FATAL backend_failed; an error line is the agent\'s error', async (t) => {
  const { protocol } = make(t)
  const { ctx } = collector()
  await t.rejects(protocol.send('s-garbage', user('garbage'), ctx), { streamCode: 'backend_failed', severity: 'FATAL', message: /not a JSON object.*this is not json/ })
  await t.rejects(protocol.send('s-fail', user('fail'), ctx), { streamCode: 'backend_failed', severity: 'TRANSIENT', message: /cannot do that/ })
})

t.test('a hang past the inactivity timeout is a TRANSIENT backend_timeout and the process is gone', async (t) => {
  const { protocol } = make(t, { timeoutMs: 1000 })
  const { chunks, ctx } = collector()
  const started = Date.now()
  t.match(await protocol.send('s-hang', user('hang'), ctx).catch((e: unknown) => e), { streamCode: 'backend_timeout', severity: 'TRANSIENT', details: { timeout_ms: 1000 } })
  t.ok(Date.now() - started < 3000)
  t.same(chunks, [])
  const again = await protocol.send('s-hang', user('hello'), ctx)
  t.match(again.content, /you said: hello/, 'a fresh process takes the next turn')
})

t.test('abort kills the whole process group within 1 s: no orphans', async (t) => {
  const { protocol } = make(t)
  const controller = new AbortController()
  const seen = { grandchild: 0 }
  const ctx: ProtocolContext = {
    signal: controller.signal,
    onStreamMessage: (c) => { if (c.type === 'text') seen.grandchild = Number(c.text) }
  }
  const turn = protocol.send('s-group', user('spawn-child'), ctx)
  while (seen.grandchild === 0) await sleep(10)
  const grandchild = seen.grandchild
  t.ok(alive(grandchild), 'the grandchild runs')
  const reason = new Error('client went away')
  const cut = Date.now()
  controller.abort(reason)
  t.equal(await turn.catch((e: unknown) => e), reason, 'the send rejects with the abort reason')
  while (alive(grandchild) && Date.now() - cut < 1000) await sleep(10)
  t.notOk(alive(grandchild), `the grandchild is gone after ${Date.now() - cut} ms`)
  await t.rejects(protocol.send('s-group', user('x'), { signal: controller.signal }), reason, 'an aborted signal refuses at once')
})

t.test('workspace confinement: ".." and absolute paths are refused; the agent runs in its session folder', async (t) => {
  const dataDir = tempDataDir(t)
  for (const workspace of ['../escape', 'a/../../x', '/tmp/elsewhere', '..', '.']) {
    t.throws(() => new LocalAgentProtocol({ command: ['node'], dataDir, workspace, inactivityTimeoutMs: 1000 }), AH_ERR_BACKEND_CONFIG, workspace)
  }
  t.throws(() => new LocalAgentProtocol({ command: [], dataDir, workspace: 'w', inactivityTimeoutMs: 1000 }), /empty/)
  const { protocol } = make(t, { dataDir })
  await t.rejects(protocol.start({ sessionId: '../../etc' }, {}), AH_ERR_BACKEND_CONFIG)
  const { ctx } = collector()
  const cwd = await protocol.send('s-cwd', user('cwd'), ctx)
  t.equal(cwd.content, join(dataDir, 'workspaces', 'toys', 's-cwd'))
})

t.test('stderr lines reach the log', async (t) => {
  const { protocol, warnings } = make(t)
  const { ctx } = collector()
  t.equal((await protocol.send('s-err', user('stderr'), ctx)).content, 'noted')
  await protocol.stop('s-err')
  t.match(warnings, [{ session: 's-err', stderr: 'something to note' }])
  const unlogged = new LocalAgentProtocol({ command: [process.execPath, TOY], dataDir: tempDataDir(t), workspace: 'w', inactivityTimeoutMs: 5000 })
  t.teardown(() => unlogged.close())
  t.equal((await unlogged.send('quiet', user('stderr'), {})).content, 'noted', 'without a logger stderr is dropped')
})

t.test('history persists in the session memory and a new process resumes it after a restart', async (t) => {
  const dataDir = tempDataDir(t)
  const mem = memory()
  const first = make(t, { dataDir }).protocol
  await first.send('s-keep', user('one'), { memory: mem })
  await first.send('s-keep', user('two'), { memory: mem })
  await first.close()
  t.equal((mem.map.get('backend:local') as { messages: unknown[] }).messages.length, 4)

  const restarted = make(t, { dataDir }).protocol
  const { response } = await restarted.resume('s-keep', user('history'), { memory: mem })
  t.equal(response.content, 'seen 5', 'four earlier messages (sent as history) and the new one')
  t.same(restarted.getUsage('s-keep'), { input: 2, output: 6, cost: 1, turns: 3 })
})

t.test('available() checks the binary', async (t) => {
  const dataDir = tempDataDir(t)
  const at = (command: string[]) => new LocalAgentProtocol({ command, dataDir, workspace: 'w', inactivityTimeoutMs: 1000 })
  t.equal(await at([process.execPath]).available(), true)
  t.equal(await at(['node']).available(), true, 'found on PATH')
  const missing = at(['/no/such/agent-binary'])
  t.equal(await missing.available(), false)
  t.match(missing.unavailableReason(), /CLI_AGENT_COMMAND/)
  t.equal(await at(['no-such-agent-binary-on-path']).available(), false)
  t.equal(await at([TOY]).available(), false, 'a file that is not executable')
})

t.test('available() looks in the folders the server\'s PATH lists, never in its working directory, and wants a file', async (t) => {
  const dir = tempDataDir(t)
  writeFileSync(join(dir, 'my-agent'), '#!/bin/sh\n', { mode: 0o755 })
  mkdirSync(join(dir, 'a-folder'))
  const at = (command: string[]) => new LocalAgentProtocol({ command, dataDir: dir, workspace: 'w', inactivityTimeoutMs: 1000 })
  const saved = { path: process.env.PATH, cwd: process.cwd() }
  t.teardown(() => {
    if (saved.path === undefined) delete process.env.PATH
    else process.env.PATH = saved.path
    process.chdir(saved.cwd)
  })
  process.chdir(dir)
  process.env.PATH = `/no/such/folder${delimiter}${dir}`
  t.equal(await at(['my-agent']).available(), true, 'found in a folder PATH lists')
  t.equal(await at(['a-folder']).available(), false, 'a folder on PATH is not an executable file')
  t.equal(await at([join(dir, 'a-folder')]).available(), false, 'nor is a folder named by its path')
  t.equal(await at(['./my-agent']).available(), true, 'a relative path is taken from the working directory, as spawn takes it')
  for (const path of [`${delimiter}${delimiter}`, '', undefined]) {
    if (path === undefined) delete process.env.PATH
    else process.env.PATH = path
    t.equal(await at(['my-agent']).available(), false, `PATH ${JSON.stringify(path)} does not mean the working directory`)
    t.equal(await at([join(dir, 'my-agent')]).available(), true, `PATH ${JSON.stringify(path)}: an absolute path needs no PATH`)
  }
})
